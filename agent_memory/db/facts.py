"""Facts (memory_items): the top of a scope for inject, upserts from consolidation, the purge.

Current importance is derived from ``decay_rank`` and the day (see :mod:`agent_memory.decay`);
the factor comes from the ``decay_policy`` row, so every reader and writer uses the same one.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from agent_memory.db.fragments import LAMBDA, SCOPE_MATCH, importance_on
from agent_memory.decay import MIN_IMPORTANCE, day_index
from agent_memory.models import Fact, MemoryItem, Scope

# The inject query: one index range scan on (scope_key, decay_rank DESC), no sort, no full scan.
# least(1, ...): seen from a day before a fact's clock started (a backfill), it has not faded
TOP = f"""
SELECT id, content, {importance_on()} AS importance
FROM agent_memory.memory_items
WHERE {SCOPE_MATCH}
  AND superseded_at IS NULL
  AND decay_rank >= ln(%(min_importance)s) + %(day)s * {LAMBDA}
ORDER BY decay_rank DESC
LIMIT %(limit)s
"""

ITEMS = f"""
SELECT id, user_id, agent_id, workflow_id, content,
       {importance_on()} AS importance,
       importance AS base_importance, importance_at, created_at, updated_at,
       superseded_at, superseded_by
FROM agent_memory.memory_items
WHERE {SCOPE_MATCH} AND (%(history)s OR superseded_at IS NULL)
ORDER BY decay_rank DESC
LIMIT %(limit)s
"""

# A fact mentioned again is reinforced, not copied: its importance is raised and its decay
# clock restarts at the newer mention (both evaluated on the row's values before the update).
_AT_LATEST_MENTION = importance_on(
    "greatest(m.decay_rank, EXCLUDED.decay_rank)",
    "agent_memory.day_index(greatest(m.importance_at, EXCLUDED.importance_at))",
)
_REINFORCED = f"least(1.0, {_AT_LATEST_MENTION} + %(boost)s)"

UPSERT = f"""
INSERT INTO agent_memory.memory_items AS m
    (user_id, agent_id, workflow_id, content, content_hash, importance, importance_at,
     decay_rank, source_job_id)
VALUES (%(user_id)s, %(agent_id)s, %(workflow_id)s, %(content)s, %(content_hash)s,
        %(importance)s, %(at)s,
        ln(%(importance)s) + agent_memory.day_index(%(at)s) * {LAMBDA}, %(job_id)s)
ON CONFLICT (scope_key, content_hash) DO UPDATE SET
    -- the clock restarts at the latest mention; the importance there is the higher of the
    -- two mentions' (decayed to that day) plus the reinforcement boost
    importance_at = greatest(m.importance_at, EXCLUDED.importance_at),
    importance    = {_REINFORCED},
    decay_rank    = ln({_REINFORCED})
                    + agent_memory.day_index(greatest(m.importance_at, EXCLUDED.importance_at))
                      * {LAMBDA},
    content       = EXCLUDED.content,
    source_job_id = EXCLUDED.source_job_id,
    updated_at    = now(),
    -- said again after it was superseded: it is true again
    superseded_at = NULL,
    superseded_by = NULL,
    superseded_by_job = NULL
RETURNING id, (xmax = 0) AS inserted, content_hash
"""

# Only a current fact of the same scope can be superseded (ids come from our own mapping,
# but the scope check keeps even a wrong id from touching another scope).
SUPERSEDE = f"""
UPDATE agent_memory.memory_items
SET superseded_at = now(), superseded_by = %(by)s, superseded_by_job = %(job_id)s
WHERE id = %(id)s AND {SCOPE_MATCH} AND superseded_at IS NULL
"""

# Bounded batches, so the purge never holds many row locks or one long transaction. ORDER BY
# decay_rank makes it a range scan of the rank index from the bottom: the threshold comes from
# a subquery, so the planner cannot estimate it, and without the order it chose a sequential
# scan that re-read the whole table (and earlier batches' dead rows) for every batch - 7.4x the
# seed's decay instead of 13x at 1M facts, and 160-220 ms for a day with nothing to purge.
PURGE_BATCH = f"""
WITH doomed AS (
    SELECT id FROM agent_memory.memory_items
    WHERE decay_rank < ln(%(purge_below)s) + %(day)s * {LAMBDA}
      AND (%(all_scopes)s OR {SCOPE_MATCH})
    ORDER BY decay_rank
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM agent_memory.memory_items m USING doomed WHERE m.id = doomed.id
"""

# facts of these scopes that the next decay would purge (their importance on the day is below
# the threshold)
FADED = f"""
SELECT count(*) FROM agent_memory.memory_items
WHERE decay_rank < ln(%(purge_below)s) + %(day)s * {LAMBDA}
  AND scope_key IN (SELECT agent_memory.scope_key(u, a, w)
                    FROM unnest(%(users)s::text[], %(agents)s::text[], %(workflows)s::text[])
                         AS s(u, a, w))
"""

_SPACE = re.compile(r"\s+")


def normalise(content: str) -> str:
    """The form in which two wordings count as the same fact (case, spacing, final stop)."""
    text = unicodedata.normalize("NFKC", content).casefold()
    return _SPACE.sub(" ", text).strip().rstrip(".!;").strip()


def content_hash(content: str) -> bytes:
    return hashlib.sha256(normalise(content).encode("utf-8")).digest()


def top_params(scope: Scope, min_importance: float, limit: int, on: date) -> dict[str, Any]:
    return {
        **scope.as_dict(),
        "day": day_index(on),
        "min_importance": max(min_importance, MIN_IMPORTANCE),
        "limit": limit,
    }


def top_sync(
    conn: psycopg.Connection[Any], scope: Scope, min_importance: float, limit: int, on: date
) -> list[tuple[int, str, float]]:
    rows = conn.execute(TOP, top_params(scope, min_importance, limit, on)).fetchall()
    return [(int(r[0]), str(r[1]), float(r[2])) for r in rows]


async def top(
    conn: psycopg.AsyncConnection[Any], scope: Scope, min_importance: float, limit: int, on: date
) -> list[tuple[int, str, float]]:
    """The scope's facts with current importance >= ``min_importance``, most important first."""
    cur = await conn.execute(TOP, top_params(scope, min_importance, limit, on))
    return [(int(r[0]), str(r[1]), float(r[2])) for r in await cur.fetchall()]


async def items(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    on: date,
    limit: int = 1000,
    *,
    history: bool = False,
) -> list[MemoryItem]:
    """The scope's current facts (and superseded ones with ``history``), most important first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        params = {**scope.as_dict(), "day": day_index(on), "limit": limit, "history": history}
        await cur.execute(ITEMS, params)
        return [MemoryItem.model_validate(row) for row in await cur.fetchall()]


@dataclass
class UpsertResult:
    created: int = 0
    reinforced: int = 0
    ids: dict[bytes, int] = field(default_factory=dict)  # content hash -> fact id


async def upsert(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    facts: Sequence[Fact],
    at: datetime,
    job_id: int | None,
    sources: Sequence[int] = (),
    boost: float = 0.05,
) -> UpsertResult:
    """Insert new facts and reinforce known ones (reviving superseded ones said again).

    ``sources`` are the ids of the episodes the facts came from (provenance); ``boost`` is
    added to a reinforced fact's importance (capped at 1).
    """
    result = UpsertResult()
    if not facts:
        return result
    params = [
        {
            **scope.as_dict(),
            "content": fact.content,
            "content_hash": content_hash(fact.content),
            "importance": max(fact.importance, MIN_IMPORTANCE),
            "at": at,
            "job_id": job_id,
            "boost": boost,
        }
        for fact in _dedupe(facts)
    ]
    async with conn.cursor() as cur:
        await cur.executemany(UPSERT, params, returning=True)
        while True:
            row = await cur.fetchone()
            if row is not None:
                result.ids[bytes(row[2])] = int(row[0])
                if row[1]:
                    result.created += 1
                else:
                    result.reinforced += 1
            if not cur.nextset():
                break
    if sources:
        await conn.execute(
            SOURCES,
            {"fact_ids": list(result.ids.values()), "episode_ids": list(sources), "job_id": job_id},
        )
    return result


async def supersede(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    fact_id: int,
    by: int | None,
    job_id: int | None,
) -> bool:
    """Mark a current fact superseded (by fact ``by``, or invalidated when None)."""
    cur = await conn.execute(
        SUPERSEDE, {**scope.as_dict(), "id": fact_id, "by": by, "job_id": job_id}
    )
    return cur.rowcount == 1


SOURCES = """
INSERT INTO agent_memory.fact_sources (fact_id, episode_id, job_id)
SELECT f, e, %(job_id)s
FROM unnest(%(fact_ids)s::bigint[]) AS f, unnest(%(episode_ids)s::bigint[]) AS e
ON CONFLICT DO NOTHING
"""

EXPLAIN = """
SELECT e.id, e.occurred_at, e.messages, s.job_id
FROM agent_memory.fact_sources s
JOIN agent_memory.episodes e ON e.id = s.episode_id
WHERE s.fact_id = %s
ORDER BY e.occurred_at, e.id
"""


async def get(conn: psycopg.AsyncConnection[Any], fact_id: int, on: date) -> MemoryItem | None:
    """One fact by id, with its current importance."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"""SELECT id, user_id, agent_id, workflow_id, content,
                       {importance_on()} AS importance,
                       importance AS base_importance, importance_at, created_at, updated_at,
                       superseded_at, superseded_by
                FROM agent_memory.memory_items WHERE id = %(id)s""",
            {"id": fact_id, "day": day_index(on)},
        )
        row = await cur.fetchone()
    return MemoryItem.model_validate(row) if row else None


async def sources(
    conn: psycopg.AsyncConnection[Any], fact_id: int
) -> list[tuple[int, datetime, list[dict[str, Any]], int | None]]:
    """The episodes a fact came from: (episode id, when it happened, messages, job id)."""
    cur = await conn.execute(EXPLAIN, (fact_id,))
    return [(int(r[0]), r[1], r[2], r[3]) for r in await cur.fetchall()]


def _dedupe(facts: Sequence[Fact]) -> list[Fact]:
    """One fact per normalised content (the highest importance wins), in first-seen order."""
    best: dict[bytes, Fact] = {}
    for fact in facts:
        key = content_hash(fact.content)
        if key not in best or fact.importance > best[key].importance:
            best[key] = fact
    return list(best.values())


async def count_faded(
    conn: psycopg.AsyncConnection[Any], scopes: Sequence[Scope], purge_below: float, on: date
) -> int:
    """How many facts of ``scopes`` have an importance below ``purge_below`` on ``on``: those
    the decay of that day purges."""
    if not scopes:
        return 0
    cur = await conn.execute(
        FADED,
        {
            "users": [s.user_id for s in scopes],
            "agents": [s.agent_id for s in scopes],
            "workflows": [s.workflow_id for s in scopes],
            "purge_below": purge_below,
            "day": day_index(on),
        },
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def purge(
    conn: psycopg.AsyncConnection[Any],
    purge_below: float,
    on: date,
    scope: Scope | None = None,
    batch: int = 5_000,
) -> int:
    """Delete facts whose importance on ``on`` is below ``purge_below``; returns how many.

    Runs in autocommit batches of ``batch`` rows.
    """
    params = {
        **(scope or Scope()).as_dict(),
        "all_scopes": scope is None,
        "purge_below": purge_below,
        "day": day_index(on),
        "batch": batch,
    }
    total = 0
    while True:
        async with conn.transaction():
            cur = await conn.execute(PURGE_BATCH, params)
        total += cur.rowcount
        if cur.rowcount < batch:
            return total


async def policy_factor(conn: psycopg.AsyncConnection[Any]) -> float | None:
    cur = await conn.execute("SELECT factor FROM agent_memory.decay_policy")
    row = await cur.fetchone()
    return float(row[0]) if row else None


async def rebase(conn: psycopg.AsyncConnection[Any], factor: float, on: date) -> int:
    """Switch to a new decay factor: every fact keeps its importance as of ``on``.

    Rewrites every row once (only when the configured factor changes).
    """
    day = day_index(on)
    async with conn.transaction():
        await conn.execute("SELECT factor FROM agent_memory.decay_policy FOR UPDATE")
        cur = await conn.execute(
            f"""
            UPDATE agent_memory.memory_items
            SET importance = {importance_on()},
                importance_at = (%(on)s::date)::timestamp AT TIME ZONE 'UTC',
                decay_rank = decay_rank - %(day)s * {LAMBDA} + %(day)s * -ln(%(factor)s)
            """,
            {"day": day, "on": on, "factor": factor},
        )
        await conn.execute(
            "UPDATE agent_memory.decay_policy SET factor = %s, updated_at = now()", (factor,)
        )
    return cur.rowcount
