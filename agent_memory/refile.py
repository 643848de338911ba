"""Re-filing facts written before levels of memory (issue 39; docs/guide.md, "Levels of
memory", "Re-filing facts written before levels").

Facts keep the exact scope they were written in until they are re-filed: each current fact
moves to the scope consolidation would file it under today (:func:`agent_memory.levels.
filing_scope` with the fact's kind and no named level, under the configured
``AGENT_MEMORY_SHARE``): who the user is and what they prefer go to the person's level; the
rest stays. Where that level already holds the same fact (learned through another agent, or
re-filed a scope earlier), the two become one: the level's fact is reinforced as a second
mention would reinforce it, takes the moved one's sources, and the moved one is kept as its
history, superseded by it. Superseded facts stay where they are. A fact an item of the Store
shows stays with the item (``kept``). A scope is re-filed in one transaction, holding its
consolidation claim; a second run finds nothing to do.

``agent-memory levels refile`` runs it as the Prefect flow ``memory-refile``
(``agent_memory_flows.refile``), with ``--dry-run`` to see the counts first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from agent_memory.db import refile as refile_repo
from agent_memory.db import term_counts
from agent_memory.decay import Reinforcement
from agent_memory.errors import InvalidScopeError, UnknownScopeError
from agent_memory.levels import PERSONAL_KINDS, filing_scope
from agent_memory.models import Scope, Share

# (a level, a content hash): what a level holds after the scopes re-filed before (a dry run)
Filed = frozenset[tuple[Scope, bytes]]


@dataclass
class ScopeRefile:
    """What re-filing one scope did (or, in a dry run, would do): facts ``moved`` to their
    level, ``merged`` into the level's fact of the same content, ``kept`` (shown by a Store
    item). ``filed``: what the levels hold after it, for the next scope's dry run."""

    scope: Scope
    moved: int = 0
    merged: int = 0
    kept: int = 0
    filed: Filed = field(default=frozenset(), repr=False)

    def row(self, name: str) -> dict[str, Any]:
        """The report's row, the scope called ``name``."""
        return {"scope": name, "moved": self.moved, "merged": self.merged, "kept": self.kept}


def check_users(users: Sequence[str] | None) -> list[str] | None:
    """``users`` as scope ids (None: everyone's); a bad one raises, naming it."""
    if users is None:
        return None
    if not users:
        raise InvalidScopeError("users is an empty list: name at least one user, or None (all)")
    checked = []
    for user in users:
        try:
            part = Scope(user).user_id
        except InvalidScopeError as exc:
            raise InvalidScopeError(f"user filter {user!r:.80}: {exc}") from None
        assert part is not None
        checked.append(part)
    return checked


async def scopes_to_refile(
    conn: psycopg.AsyncConnection[Any], users: Sequence[str] | None
) -> list[Scope]:
    """The scopes whose facts a level above may take (of ``users``, when given), in order; a
    user memory holds no fact of raises :class:`UnknownScopeError`, naming them."""
    users = check_users(users)
    if users is not None:
        unknown = await refile_repo.unknown_users(conn, users)
        if unknown:
            raise UnknownScopeError(
                f"memory holds no fact of user(s) {', '.join(repr(u) for u in unknown)}: "
                "nothing to re-file (check the --user filter)"
            )
    return await refile_repo.scopes(conn, PERSONAL_KINDS, users)


async def plan_scope(
    conn: psycopg.AsyncConnection[Any], scope: Scope, share: Share, filed: Filed = frozenset()
) -> ScopeRefile:
    """What :func:`refile_scope` would do to ``scope``, writing nothing; ``filed``: what the
    scopes planned before this one add to the levels."""
    report = ScopeRefile(scope)
    held = set(filed)
    for fact in await refile_repo.candidates(conn, scope, PERSONAL_KINDS):
        target = filing_scope(scope, share, fact.kind)
        if target == scope:
            continue
        if fact.shown:
            report.kept += 1
        elif (target, fact.content_hash) in held or await refile_repo.held(
            conn, target, fact.content_hash
        ):
            report.merged += 1
        else:
            report.moved += 1
            held.add((target, fact.content_hash))
    report.filed = frozenset(held)
    return report


async def refile_scope(
    pool: AsyncConnectionPool, scope: Scope, share: Share, reinforce: Reinforcement
) -> ScopeRefile:
    """Re-file ``scope``'s current facts at their levels (see the module), in one transaction
    that holds the scope's consolidation claim."""
    report = ScopeRefile(scope)
    async with pool.connection() as conn:
        await refile_repo.ensure_claims(conn, [scope])
    async with pool.connection() as conn, conn.transaction():
        await refile_repo.claim(conn, scope)
        targets = {scope}
        for fact in await refile_repo.candidates(conn, scope, PERSONAL_KINDS):
            target = filing_scope(scope, share, fact.kind)
            if target == scope:
                continue
            done = await refile_repo.refile(conn, fact.id, scope, target, reinforce)
            if done == "moved":
                report.moved += 1
            elif done == "merged":
                report.merged += 1
            elif done == "kept":
                report.kept += 1
            targets.add(target)
        for changed in sorted(targets, key=lambda s: s.label):
            await term_counts.compact(conn, changed)  # the counts the moves appended
    return report
