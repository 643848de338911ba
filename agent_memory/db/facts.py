"""Facts (memory_items): the top of a scope for inject, upserts from consolidation, the purge.

Current importance is derived from a fact's ``expires_day``, ``half_life`` and the day (see
:mod:`agent_memory.decay`); the kinds' half-lives and the purge threshold come from the
``decay_policy`` row, so every reader and writer uses the same ones.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from agent_memory.db.dual import Run, Steps, dual
from agent_memory.db.fragments import SCOPE_MATCH, importance_on
from agent_memory.decay import MIN_IMPORTANCE, day_index, importance_floor
from agent_memory.models import Fact, FactKind, MemoryItem, Scope
from agent_memory.settings import MAX_HALF_LIFE

# The inject query: one index range scan on (scope_key, expires_day DESC), no sort, no full
# scan. The facts memory keeps longest come first: among facts of one half-life that is the
# order of current importance.
_TOP = f"""
SELECT id, content, {importance_on()} AS importance{{more}}
FROM agent_memory.memory_items
WHERE {SCOPE_MATCH}
  AND superseded_at IS NULL
  AND {importance_on()} >= %(min_importance)s
ORDER BY expires_day DESC
LIMIT %(limit)s
"""
TOP = _TOP.format(more="")
# what the extractor is shown of the facts memory holds: the same, with their kinds
KNOWN = _TOP.format(more=", kind")

_ITEM = f"""id, user_id, agent_id, workflow_id, content, {importance_on()} AS importance,
       importance AS base_importance, importance_at, created_at, updated_at,
       superseded_at, superseded_by, kind, half_life, mentions, valid_from, valid_to"""

ITEMS = f"""
SELECT {_ITEM}
FROM agent_memory.memory_items
WHERE {SCOPE_MATCH}
  AND CASE WHEN %(as_of)s::timestamptz IS NULL THEN %(history)s OR superseded_at IS NULL
           -- true at the end of that day: known by then, and not superseded by then
           ELSE valid_from < %(as_of)s AND (valid_to IS NULL OR valid_to >= %(as_of)s) END
-- most important on the day first, as the listing promises (expiry is not that order: a fact
-- of a long half-life outlasts a more important one that fades fast)
ORDER BY {importance_on()} DESC, id
LIMIT %(limit)s
"""

# Write a fact, or reinforce the scope's fact of the same content (sql/0022_store_put.sql: a
# fact mentioned again is not copied; its importance is raised, its decay clock restarts at the
# newer mention and its half-life grows): its id, whether it was new, its content hash.
UPSERT = """
SELECT id, inserted, content_hash FROM agent_memory.upsert_fact(
    %(user_id)s, %(agent_id)s, %(workflow_id)s, %(content)s, %(content_hash)s,
    %(importance)s::float8, %(at)s, %(kind)s, %(mentions)s::integer, %(boost)s::float8,
    %(growth)s::float8, %(max_half_life)s::float8, %(job_id)s::bigint, %(valid_from)s)
"""

# Only a current fact of the same scope can be superseded (ids come from our own mapping,
# but the scope check keeps even a wrong id from touching another scope).
SUPERSEDE = f"""
UPDATE agent_memory.memory_items
SET superseded_at = now(), superseded_by = %(by)s, superseded_by_job = %(job_id)s,
    valid_to = greatest(valid_from, coalesce(%(valid_to)s, now()))
WHERE id = %(id)s AND {SCOPE_MATCH} AND superseded_at IS NULL
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
        "min_importance": importance_floor(min_importance),
        "limit": limit,
    }


def top_steps(
    scope: Scope, min_importance: float, limit: int, on: date
) -> Steps[list[tuple[int, str, float]]]:
    """The scope's facts with current importance >= ``min_importance``, most important first."""
    rows = yield Run(TOP, top_params(scope, min_importance, limit, on))
    return [(int(r[0]), str(r[1]), float(r[2])) for r in rows]


top, top_sync = dual(top_steps)


async def known(
    conn: psycopg.AsyncConnection[Any], scope: Scope, limit: int, on: date
) -> list[tuple[int, str, float, FactKind]]:
    """:func:`top` of every current fact (importance above the floor), with its kind."""
    cur = await conn.execute(KNOWN, top_params(scope, MIN_IMPORTANCE, limit, on))
    return [(int(r[0]), str(r[1]), float(r[2]), r[3]) for r in await cur.fetchall()]


async def items(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    on: date,
    limit: int = 1000,
    *,
    history: bool = False,
    as_of: date | None = None,
) -> list[MemoryItem]:
    """The scope's current facts (and superseded ones with ``history``), most important first;
    with ``as_of``, the facts that were true at the end of that day (UTC) instead."""
    async with conn.cursor(row_factory=dict_row) as cur:
        params = {
            **scope.as_dict(),
            "day": day_index(on),
            "limit": limit,
            "history": history,
            "as_of": _day_end(as_of) if as_of else None,
        }
        await cur.execute(ITEMS, params)
        return [MemoryItem.model_validate(row) for row in await cur.fetchall()]


def upsert_params(
    scope: Scope,
    fact: Fact,
    at: datetime,
    job_id: int | None,
    *,
    boost: float = 0.05,
    mentions: int = 1,
    growth: float = 2.0,
    valid_from: datetime | None = None,
) -> dict[str, Any]:
    """The parameters of :data:`UPSERT` for one fact (see :func:`upsert`)."""
    return {
        **scope.as_dict(),
        "content": fact.content,
        "content_hash": content_hash(fact.content),
        "importance": max(fact.importance, MIN_IMPORTANCE),
        "kind": fact.kind,
        "at": at,
        "job_id": job_id,
        "boost": boost,
        "mentions": mentions,
        "growth": growth,
        "max_half_life": MAX_HALF_LIFE,
        "valid_from": valid_from or at,
    }


def _day_end(day: date) -> datetime:
    return datetime.combine(day + timedelta(days=1), time(), tzinfo=UTC)


# When the facts a frame injects became true, and their kinds (for how to say it).
DATES = "SELECT id, kind, valid_from FROM agent_memory.memory_items WHERE id = ANY(%s)"


def dates_steps(ids: Sequence[int]) -> Steps[dict[int, tuple[FactKind, datetime]]]:
    """Each fact's kind and since when it is true."""
    rows = yield Run(DATES, (list(ids),))
    return {int(r[0]): (r[1], r[2]) for r in rows}


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
    *,
    mentions: int = 1,
    growth: float = 2.0,
    valid_from: datetime | None = None,
) -> UpsertResult:
    """Insert new facts and reinforce known ones (reviving superseded ones said again).

    ``sources`` are the ids of the episodes the facts came from (provenance); ``boost`` is
    added to a reinforced fact's importance (capped at 1). ``mentions``: how many conversations
    said these facts; each one past the first multiplies the half-life by ``growth``.
    ``valid_from``: when they were said (the conversation's time; default ``at``).
    """
    result = UpsertResult()
    if not facts:
        return result
    if mentions < 1:
        raise ValueError(f"mentions must be at least 1, got {mentions!r}")
    params = [
        upsert_params(
            scope,
            fact,
            at,
            job_id,
            boost=boost,
            mentions=mentions,
            growth=growth,
            valid_from=valid_from,
        )
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
    valid_to: datetime | None = None,
) -> bool:
    """Mark a current fact superseded (by fact ``by``, or invalidated when None); it stopped
    being true at ``valid_to`` (the conversation that said so; default now)."""
    cur = await conn.execute(
        SUPERSEDE,
        {**scope.as_dict(), "id": fact_id, "by": by, "job_id": job_id, "valid_to": valid_to},
    )
    return cur.rowcount == 1


SOURCES = """
INSERT INTO agent_memory.fact_sources (fact_id, episode_id, job_id)
SELECT f, e, %(job_id)s
FROM unnest(%(fact_ids)s::bigint[]) AS f, unnest(%(episode_ids)s::bigint[]) AS e
ON CONFLICT DO NOTHING
"""

EXPLAIN = """
SELECT e.id, e.occurred_at, e.messages, s.job_id, e.user_id, e.agent_id, e.workflow_id
FROM agent_memory.fact_sources s
JOIN agent_memory.episodes e ON e.id = s.episode_id
WHERE s.fact_id = %s
ORDER BY e.occurred_at, e.id
"""


async def get(conn: psycopg.AsyncConnection[Any], fact_id: int, on: date) -> MemoryItem | None:
    """One fact by id, with its current importance."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {_ITEM} FROM agent_memory.memory_items WHERE id = %(id)s",
            {"id": fact_id, "day": day_index(on)},
        )
        row = await cur.fetchone()
    return MemoryItem.model_validate(row) if row else None


async def sources(
    conn: psycopg.AsyncConnection[Any], fact_id: int
) -> list[tuple[int, datetime, list[dict[str, Any]], int | None, Scope]]:
    """The episodes a fact came from: (episode id, when it happened, messages, job id, the
    exact scope it was recorded in, which differs from the fact's at another level)."""
    cur = await conn.execute(EXPLAIN, (fact_id,))
    return [(int(r[0]), r[1], r[2], r[3], Scope(*r[4:7])) for r in await cur.fetchall()]


def _dedupe(facts: Sequence[Fact]) -> list[Fact]:
    """One fact per normalised content (the highest importance wins), in first-seen order."""
    best: dict[bytes, Fact] = {}
    for fact in facts:
        key = content_hash(fact.content)
        if key not in best or fact.importance > best[key].importance:
            best[key] = fact
    return list(best.values())


SOURCE_IDS = """
SELECT fact_id, array_agg(episode_id ORDER BY episode_id) FROM agent_memory.fact_sources
WHERE fact_id = ANY(%s) GROUP BY fact_id
"""


async def source_ids(
    conn: psycopg.AsyncConnection[Any], fact_ids: list[int]
) -> dict[int, list[int]]:
    """Each fact's source episodes, by id."""
    cur = await conn.execute(SOURCE_IDS, (fact_ids,))
    return {int(r[0]): [int(e) for e in r[1]] for r in await cur.fetchall()}
