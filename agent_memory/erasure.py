"""Erasing a person, or one scope: the one entry point, `erase`, and what it returns.

Whose scopes: `Selection`. A person (``Selection.person("alex")``) is every scope whose
``user_id`` is theirs, whatever its agent or workflow, narrowed by an ``agent_id`` or
``workflow_id`` where given; ``Selection.of(scope)`` is that scope alone (what
``MemoryManager.erase(scope)`` always did).

Whose checkpoint threads: a LangGraph thread belongs to the scope it carries, read as the
memory nodes read it (`agent_memory.graph.scope_from`): the ``user_id`` / ``agent_id`` /
``workflow_id`` of its state, else those of its configuration (``configurable``, which
LangGraph copies into every checkpoint's metadata); a thread carrying several takes the first.
A thread carrying none belongs to the scope its id maps to, as ``agent-memory backfill
checkpoints`` maps ids (a thread id is a ``user_id``, or ``thread_pattern``).

`erase` removes every selected scope's rows and threads in one transaction (a record per
scope in ``agent_memory.erasures``, without content), with every fact of another level that
those scopes' conversations alone support (`agent_memory.db.derived`), then vacuums the
database's tables and releases the WAL (`agent_memory.db.vacuum`) and returns an
`ErasureSummary` listing each scope and level. ``dry_run`` says the same without writing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from agent_memory.backfill import scope_of_thread
from agent_memory.backfill import thread_pattern as compile_pattern
from agent_memory.checkpoints import CHECKPOINT_SCHEMA
from agent_memory.db import derived as derived_repo
from agent_memory.db import erasure as erasure_repo
from agent_memory.db import vacuum as vacuum_repo
from agent_memory.db.derived import Derived
from agent_memory.db.vacuum import DEFAULT_REWRITE_MAX_BYTES, Vacuumed, vacuum
from agent_memory.errors import InvalidScopeError, UnknownScopeError
from agent_memory.models import SCOPE_FIELDS, Scope


@dataclass(frozen=True)
class Selection:
    """The scopes an erasure or export takes: a person's (`person`) or one
    (`of`)."""

    scope: Scope
    exact: bool = False

    @classmethod
    def person(
        cls, user_id: str, agent_id: str | None = None, workflow_id: str | None = None
    ) -> Selection:
        """Every scope of ``user_id``, of ``agent_id`` / ``workflow_id`` only where given."""
        if user_id is None:
            raise InvalidScopeError("user_id is None: name the person whose memory to take")
        return cls(Scope(user_id, agent_id, workflow_id))  # validates each part, naming it

    @classmethod
    def of(cls, scope: Scope) -> Selection:
        """Exactly ``scope``."""
        return cls(scope, exact=True)

    @property
    def label(self) -> str:
        return self.scope.label

    def matches(self, scope: Scope) -> bool:
        if self.exact:
            return scope == self.scope
        return all(
            want is None or want == have
            for want, have in zip(self.scope.params, scope.params, strict=True)
        )


@dataclass(frozen=True)
class ErasedScope:
    """One scope erased: how many rows of each table went, and its checkpoint threads."""

    scope: Scope
    removed: dict[str, int]
    threads: tuple[str, ...] = ()


@dataclass(frozen=True)
class ErasureSummary:
    """What an erasure did (or, with ``dry_run``, would do): each scope erased (in order: the
    person's own scope first), the facts of other levels learned from its conversations
    (``derived``: gone, kept, revived), what became of the tables' files (``files``:
    rewritten, vacuumed or skipped, and the WAL), and what went from the orchestrator's
    database (``orchestrator``: rows of each kind, when one is in use)."""

    selection: Selection
    scopes: tuple[ErasedScope, ...]
    files: Vacuumed = field(default_factory=Vacuumed)
    orchestrator: dict[str, int] = field(default_factory=dict)
    derived: Derived = field(default_factory=Derived)
    dry_run: bool = False

    @property
    def removed(self) -> dict[str, int]:
        """The rows removed per table, over every scope."""
        total: dict[str, int] = {}
        for erased in self.scopes:
            for table, count in erased.removed.items():
                total[table] = total.get(table, 0) + count
        return total


def _order(scope: Scope) -> tuple[bool, str, bool, str]:
    return (
        scope.agent_id is not None,
        scope.agent_id or "",
        scope.workflow_id is not None,
        scope.workflow_id or "",
    )


def _carried(state: dict[str, str | None], config: dict[str, str | None]) -> Scope | None:
    """The scope a checkpoint carries, as graph.state.scope_from reads it (None: unreadable)."""
    parts = state if any(v is not None for v in state.values()) else config
    try:
        return Scope.from_mapping(parts)
    except InvalidScopeError:  # not a scope memory could hold rows of
        return None


async def threads_of(
    conn: psycopg.AsyncConnection[Any],
    selection: Selection,
    schema: str = CHECKPOINT_SCHEMA,
    pattern: str | None = None,
) -> dict[str, Scope]:
    """The checkpoint threads of ``schema`` that belong to a selected scope, with their scope
    (see the module's docstring for how a thread is tied to one)."""
    found: dict[str, Scope] = {}
    first = next(
        ((n, v) for n, v in zip(SCOPE_FIELDS, selection.scope.params, strict=True) if v), None
    )
    if first is not None:
        for thread, state, config in await erasure_repo.carried(conn, schema, *first):
            scope = _carried(state, config)
            if scope is not None and thread not in found and selection.matches(scope):
                found[thread] = scope
    compiled = compile_pattern(pattern)
    for thread in await erasure_repo.thread_ids(conn, schema):
        if thread in found:
            continue
        try:
            scope = scope_of_thread(thread, compiled)
        except (ValueError, InvalidScopeError):  # a thread the pattern does not fit
            continue
        if selection.matches(scope):
            found[thread] = scope
    return found


async def scopes_of(
    conn: psycopg.AsyncConnection[Any], selection: Selection, threads: Iterable[Scope] = ()
) -> list[Scope]:
    """The selected scopes memory holds rows of, with those only ``threads`` carry; in
    order."""
    if selection.exact:
        scopes = {selection.scope}
    else:
        user, agent, workflow = selection.scope.params
        assert user is not None  # a person's selection names the user
        scopes = set(await erasure_repo.scopes_of_user(conn, user, agent, workflow))
        scopes.update(threads)
    return sorted(scopes, key=_order)


# The planner's statistics hold sampled values of the tables' columns: the tables' ANALYZE
# replaces their rows, and the old ones leave the file with this table's VACUUM (last, after
# the tables'). Only a superuser may vacuum it; anyone else sees it skipped, with the reason.
STATISTICS = ("pg_catalog", "pg_statistic")


async def erase(
    pool: AsyncConnectionPool,
    selection: Selection,
    *,
    thread_pattern: str | None = None,
    checkpoint_schema: str = CHECKPOINT_SCHEMA,
    rewrite_max_bytes: int = DEFAULT_REWRITE_MAX_BYTES,
    dry_run: bool = False,
) -> ErasureSummary:
    """Erase every scope of ``selection`` and its checkpoint threads in one transaction (a
    record per scope in ``agent_memory.erasures``), with the facts of other levels learned
    from its conversations alone (`agent_memory.db.derived`); then vacuum the database's tables
    (those up to ``rewrite_max_bytes`` rewritten: see `agent_memory.db.vacuum`) and, where the
    role may, close the WAL segment and checkpoint, so that old segments holding the text are
    released. A selection memory holds nothing about raises `UnknownScopeError`, naming it,
    and writes nothing.

    ``dry_run``: the same transaction, rolled back (no index dropped, no tenant session ended,
    nothing vacuumed): the summary says what an erasure would remove now and what it would
    keep, with ``dry_run`` set.

    Example::

        summary = await erase(pool, Selection.person("alex"))
        [s.scope.label for s in summary.scopes]   # ['user=alex', 'user=alex agent=support']
    """
    if rewrite_max_bytes < 0:
        raise ValueError(f"rewrite_max_bytes {rewrite_max_bytes} is below 0")
    async with pool.connection() as conn:
        try:
            async with conn.transaction():
                threads = await threads_of(conn, selection, checkpoint_schema, thread_pattern)
                scopes = await scopes_of(conn, selection, threads.values())
                # a consolidation writing facts from these conversations commits first
                await derived_repo.lock_episodes(conn, scopes)
                erased, rows = [], erasure_repo.Erased()
                for scope in scopes:
                    own = sorted(t for t, s in threads.items() if s == scope)
                    removed = await erasure_repo.erase(
                        conn, scope, checkpoint_schema, own, into=rows, dry_run=dry_run
                    )
                    if any(removed.values()):
                        erased.append(ErasedScope(scope, removed, tuple(own)))
                if not erased:
                    # the transaction rolls back: not even a record of the attempt is written
                    raise UnknownScopeError(
                        f"memory holds nothing about {selection.label}: not erased"
                    )
                derived = await derived_repo.settle(conn, rows)
                if dry_run:
                    raise _DryRun()
        except _DryRun:
            return ErasureSummary(selection, tuple(erased), derived=derived, dry_run=True)
    files = await _release(pool, checkpoint_schema, rewrite_max_bytes)
    return ErasureSummary(selection, tuple(erased), files, derived=derived)


async def _release(
    pool: AsyncConnectionPool, checkpoint_schema: str, rewrite_max_bytes: int
) -> Vacuumed:
    """After an erasure's commit: the erased rows leave the tables' files, then the WAL's
    segments."""
    async with pool.connection() as conn:
        tables = await vacuum_repo.tables(conn, ("agent_memory", checkpoint_schema))
        files = await vacuum(conn, [*tables, STATISTICS], rewrite_max_bytes)
        files.wal = await vacuum_repo.release_wal(conn)
    return files


@dataclass(frozen=True)
class LeftBehind:
    """What `erase_left_behind` took (or, with ``dry_run``, would take): the facts, per level
    (``derived.gone``, with their history and what they had replaced, revived), and the
    files."""

    derived: Derived
    files: Vacuumed = field(default_factory=Vacuumed)
    dry_run: bool = False


async def erase_left_behind(
    pool: AsyncConnectionPool,
    *,
    checkpoint_schema: str = CHECKPOINT_SCHEMA,
    rewrite_max_bytes: int = DEFAULT_REWRITE_MAX_BYTES,
    dry_run: bool = False,
) -> LeftBehind:
    """Erase the facts that erasures before schema 31 left behind at other levels than the
    scopes they erased, with no source (their conversations and jobs erased), as an erasure
    now takes them; then vacuum and release the WAL as `erase` does. ``dry_run``: the same,
    rolled back."""
    async with pool.connection() as conn:
        try:
            async with conn.transaction():
                derived = await derived_repo.settle(conn, await derived_repo.left_behind(conn))
                if dry_run:
                    raise _DryRun()
        except _DryRun:
            return LeftBehind(derived, dry_run=True)
    if not derived.gone:
        return LeftBehind(derived)
    return LeftBehind(derived, await _release(pool, checkpoint_schema, rewrite_max_bytes))


class _DryRun(Exception):
    """Rolls a dry run's transaction back."""
