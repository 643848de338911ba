"""Re-filing facts at their level (agent_memory.refile; docs/guide.md, "Levels of memory"): the
statements that find the facts a scope may re-file and move one current fact to another scope,
or merge it into the fact of the same content the other scope holds.

Moving a fact changes its scope parts; the rest follows from the database: its scope_key (a
generated column), its full-text statistics (sql/0017's update trigger), its vector's scope key
and tag, and so its place in the scopes' HNSW indexes (sql/0024), and the Store rows that show
it by id. The facts it superseded stay where they are, as history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg

from agent_memory.db import claims
from agent_memory.db.fragments import SCOPE_KEY, SCOPE_MATCH
from agent_memory.decay import Reinforcement
from agent_memory.models import FactKind, Scope
from agent_memory.settings import MAX_HALF_LIFE

# every scope of a person, other than the person's own, that holds current facts of the kinds
# filing may move (of ``users`` only, when given), in the order of their keys
SCOPES = """
SELECT DISTINCT user_id, agent_id, workflow_id, scope_key FROM agent_memory.memory_items
WHERE superseded_at IS NULL AND user_id IS NOT NULL
  AND (agent_id IS NOT NULL OR workflow_id IS NOT NULL)
  AND kind = ANY(%(kinds)s::text[])
  AND (%(users)s::text[] IS NULL OR user_id = ANY(%(users)s::text[]))
ORDER BY scope_key
"""

# the users memory holds no fact of, current or not (each user's keys are one range of the
# scope index: C collation, every key of theirs starts with their quoted id and a comma)
UNKNOWN_USERS = """
SELECT u FROM unnest(%(users)s::text[]) WITH ORDINALITY AS t(u, n)
WHERE NOT EXISTS (
    SELECT 1 FROM agent_memory.memory_items m
    WHERE m.scope_key >= (quote_nullable(u) || ',') COLLATE "C"
      AND m.scope_key < (quote_nullable(u) || '-') COLLATE "C")
ORDER BY n
"""

# the scope's current facts of those kinds, oldest first
FACTS = f"""
SELECT id, content_hash, kind, shown FROM agent_memory.memory_items
WHERE {SCOPE_MATCH} AND superseded_at IS NULL AND kind = ANY(%(kinds)s::text[])
ORDER BY id
"""

# the fact of this content scope ``to`` holds, current or superseded (one at most: the scope's
# content is unique; one a writer adds meanwhile makes the move fail, and it merges instead)
HELD = """
SELECT id FROM agent_memory.memory_items
WHERE scope_key = agent_memory.scope_key_inline(%(to_user)s, %(to_agent)s, %(to_workflow)s)
  AND content_hash = %(hash)s
"""

# the fact to re-file, locked, while it is a current fact of its scope
ONE = f"""
SELECT content, content_hash, importance, importance_at, kind, mentions, source_job_id,
       valid_from, shown
FROM agent_memory.memory_items
WHERE id = %(id)s AND {SCOPE_MATCH} AND superseded_at IS NULL
FOR UPDATE
"""

MOVE = f"""
UPDATE agent_memory.memory_items
SET user_id = %(to_user)s, agent_id = %(to_agent)s, workflow_id = %(to_workflow)s,
    updated_at = now()
WHERE id = %(id)s AND {SCOPE_MATCH} AND superseded_at IS NULL
"""

# the level's fact, reinforced as by a second mention (the moved fact's importance, clock,
# mentions and time it became true), or written again if it was superseded (sql/0022)
REINFORCE = """
SELECT id FROM agent_memory.upsert_fact(
    %(to_user)s, %(to_agent)s, %(to_workflow)s, %(content)s, %(hash)s, %(importance)s::float8,
    %(at)s, %(kind)s, %(mentions)s::integer, %(boost)s::float8, %(growth)s::float8,
    %(max_half_life)s::float8, %(job_id)s::bigint, %(valid_from)s)
"""

# the moved duplicate's provenance, given to the fact that holds it now (the duplicate keeps
# its own: its history still says where it was learned)
SOURCES = """
INSERT INTO agent_memory.fact_sources (fact_id, episode_id, job_id, added_at)
SELECT %(to_id)s, episode_id, job_id, added_at FROM agent_memory.fact_sources
WHERE fact_id = %(id)s
ON CONFLICT DO NOTHING
"""

# the duplicate, superseded by the level's fact: history, true in its scope until now
RETIRE = f"""
UPDATE agent_memory.memory_items
SET superseded_at = now(), superseded_by = %(to_id)s, superseded_by_job = NULL,
    valid_to = greatest(valid_from, now())
WHERE id = %(id)s AND {SCOPE_MATCH} AND superseded_at IS NULL
"""

# the scope's consolidation claim (agent_memory.db.claims), waited for: no consolidation
# writes the scope while its facts are re-filed
CLAIM = f"""
SELECT 1 FROM agent_memory.scope_claims WHERE scope_key = {SCOPE_KEY} FOR UPDATE
"""

Refiled = Literal["moved", "merged", "kept", "gone"]


@dataclass(frozen=True)
class Candidate:
    """A current fact of a scope that filing may move: its id, content hash, kind, and
    whether an item of the Store shows it."""

    id: int
    content_hash: bytes
    kind: FactKind
    shown: bool


def _to(target: Scope) -> dict[str, Any]:
    user, agent, workflow = target.params
    return {"to_user": user, "to_agent": agent, "to_workflow": workflow}


async def scopes(
    conn: psycopg.AsyncConnection[Any], kinds: Sequence[str], users: Sequence[str] | None
) -> list[Scope]:
    """The scopes with current facts of ``kinds`` that a level above may take (of ``users``)."""
    cur = await conn.execute(
        SCOPES, {"kinds": list(kinds), "users": list(users) if users is not None else None}
    )
    return [Scope(*row[:3]) for row in await cur.fetchall()]


async def unknown_users(conn: psycopg.AsyncConnection[Any], users: Sequence[str]) -> list[str]:
    """Those of ``users`` memory holds no fact of."""
    cur = await conn.execute(UNKNOWN_USERS, {"users": list(users)})
    return [str(row[0]) for row in await cur.fetchall()]


async def candidates(
    conn: psycopg.AsyncConnection[Any], scope: Scope, kinds: Sequence[str]
) -> list[Candidate]:
    """The scope's current facts of ``kinds``, oldest first."""
    cur = await conn.execute(FACTS, {**scope.as_dict(), "kinds": list(kinds)})
    return [Candidate(int(r[0]), bytes(r[1]), r[2], bool(r[3])) for r in await cur.fetchall()]


async def held(conn: psycopg.AsyncConnection[Any], target: Scope, content_hash: bytes) -> bool:
    """Whether ``target`` holds a fact of this content (current or superseded)."""
    cur = await conn.execute(HELD, {**_to(target), "hash": content_hash})
    return await cur.fetchone() is not None


async def claim(conn: psycopg.AsyncConnection[Any], scope: Scope) -> None:
    """Hold ``scope``'s consolidation claim until the transaction ends (waiting for a run that
    holds it). ``conn`` must be in a transaction; the claim row is made first, committed, on a
    connection of ``pool`` (see :mod:`agent_memory.db.claims`)."""
    await conn.execute(CLAIM, scope.as_dict())


async def ensure_claims(conn: psycopg.AsyncConnection[Any], scopes: Sequence[Scope]) -> None:
    """Make the scopes' claim rows (``conn`` in autocommit mode)."""
    if scopes:
        await conn.execute(claims.ENSURE, claims.columns(scopes))


async def refile(
    conn: psycopg.AsyncConnection[Any],
    fact_id: int,
    scope: Scope,
    target: Scope,
    reinforce: Reinforcement,
) -> Refiled:
    """Move current fact ``fact_id`` of ``scope`` to ``target`` (``moved``), or, when ``target``
    holds a fact of its content, reinforce that one as a second mention would, give it the
    fact's sources and supersede the fact by it (``merged``). A fact an item of the Store shows
    stays (``kept``): the item was put in its scope's namespace, and its later puts replace the
    fact there. ``gone``: no longer a current fact of ``scope``. ``conn`` must be in a
    transaction (the move and a merge are each a savepoint of it)."""
    cur = await conn.execute(ONE, {**scope.as_dict(), "id": fact_id})
    row = await cur.fetchone()
    if row is None:
        return "gone"
    content, content_hash, importance, at, kind, mentions, job_id, valid_from, shown = row
    if shown:
        return "kept"
    params = {**scope.as_dict(), **_to(target), "id": fact_id, "hash": content_hash}
    if not await held(conn, target, content_hash):
        try:
            async with conn.transaction():  # a savepoint: a writer may add it meanwhile
                await conn.execute(MOVE, params)
            return "moved"
        except psycopg.errors.UniqueViolation:
            pass
    return await _merge(
        conn, params, content, importance, at, kind, mentions, job_id, valid_from, reinforce
    )


async def _merge(
    conn: psycopg.AsyncConnection[Any],
    params: dict[str, Any],
    content: str,
    importance: float,
    at: datetime,
    kind: str,
    mentions: int,
    job_id: int | None,
    valid_from: datetime,
    reinforce: Reinforcement,
) -> Refiled:
    written = await conn.execute(
        REINFORCE,
        {
            **params,
            "content": content,
            "importance": importance,
            "at": at,
            "kind": kind,
            "mentions": mentions,
            "boost": reinforce.boost,
            "growth": reinforce.growth,
            "max_half_life": MAX_HALF_LIFE,
            "job_id": job_id,
            "valid_from": valid_from,
        },
    )
    found = await written.fetchone()
    assert found is not None
    params = {**params, "to_id": int(found[0])}
    await conn.execute(SOURCES, params)
    await conn.execute(RETIRE, params)
    return "merged"
