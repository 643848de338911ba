"""Episodes: recorded conversations waiting to be consolidated."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from agent_memory.db.dual import Run, Steps, dual
from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.errors import InvalidScopeError
from agent_memory.models import Episode, HistoryEntry, Scope, Window

log = logging.getLogger(__name__)

INSERT = """
INSERT INTO agent_memory.episodes
    (user_id, agent_id, workflow_id, messages, message_count, metadata, occurred_at)
VALUES (%(user_id)s, %(agent_id)s, %(workflow_id)s, %(messages)s, %(message_count)s,
        %(metadata)s, coalesce(%(occurred_at)s, now()))
RETURNING id
"""

# a backfill's episode: its source key (file and line, or thread and message) makes a second
# import of the same history a no-op
IMPORT = """
INSERT INTO agent_memory.episodes
    (user_id, agent_id, workflow_id, messages, message_count, metadata, occurred_at, source_key)
VALUES (%(user_id)s, %(agent_id)s, %(workflow_id)s, %(messages)s, %(message_count)s,
        %(metadata)s, %(occurred_at)s, %(source_key)s)
ON CONFLICT (scope_key, source_key) WHERE source_key IS NOT NULL DO NOTHING
"""

# A run's window: conversations that happened in [since, until), of these users (NULL: any),
# in scopes of this shard (a stable hash of the scope's key, modulo the number of shards).
IN_WINDOW = """
    occurred_at >= coalesce(%(since)s, '-infinity'::timestamptz)
    AND occurred_at < coalesce(%(until)s, 'infinity'::timestamptz)
    AND (%(users)s::text[] IS NULL OR user_id = ANY(%(users)s::text[]))
    AND (%(shards)s = 1
         OR (hashtextextended(scope_key, 0) & 9223372036854775807) %% %(shards)s = %(shard)s)"""

PENDING_SCOPES = f"""
SELECT DISTINCT ON (scope_key) user_id, agent_id, workflow_id
FROM agent_memory.episodes e
WHERE consolidated = false AND {IN_WINDOW}
  AND (%(include_waiting)s OR NOT EXISTS (
      SELECT 1 FROM agent_memory.scope_retries r
      WHERE r.scope_key = e.scope_key AND (r.parked OR r.next_attempt_at > now())))
ORDER BY scope_key
LIMIT %(limit)s
"""

LOAD_PENDING = f"""
SELECT id, user_id, agent_id, workflow_id, messages, occurred_at, created_at, consolidated
FROM agent_memory.episodes
WHERE consolidated = false AND {SCOPE_MATCH} AND {IN_WINDOW}
ORDER BY occurred_at, id
LIMIT %(limit)s
"""

COUNT_PENDING = f"""
SELECT count(*) FROM agent_memory.episodes WHERE consolidated = false AND {IN_WINDOW}
"""

# Only episodes still pending are marked: if another run got there first, the count tells.
MARK = """
UPDATE agent_memory.episodes e
SET consolidated = true, consolidated_at = now(), consolidation_job_id = %(job_id)s,
    summary = s.summary
FROM unnest(%(ids)s::bigint[], %(summaries)s::text[]) AS s(id, summary)
WHERE e.id = s.id AND e.consolidated = false
"""


# a LangGraph checkpoint database's threads (its PostgresSaver's table), for the backfill
CHECKPOINT_THREADS = (
    "SELECT DISTINCT thread_id FROM checkpoints WHERE checkpoint_ns = '' ORDER BY thread_id"
)
# how many of a thread's messages a backfill stored already (its episodes' source keys)
IMPORTED_FROM_THREAD = """
SELECT coalesce(sum(message_count), 0) FROM agent_memory.episodes
WHERE scope_key = agent_memory.scope_key_inline(%(user_id)s, %(agent_id)s, %(workflow_id)s)
  AND starts_with(source_key, %(prefix)s)
"""
COUNTS = """
SELECT (SELECT count(*) FROM agent_memory.episodes WHERE NOT consolidated),
       (SELECT count(*) FROM agent_memory.episodes WHERE consolidated),
       (SELECT count(DISTINCT scope_key) FROM agent_memory.memory_items)
"""


async def counts(conn: psycopg.AsyncConnection[Any]) -> tuple[int, int, int]:
    """Episodes pending, episodes consolidated, and scopes with facts."""
    cur = await conn.execute(COUNTS)
    row = await cur.fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)


def insert_params(
    scope: Scope,
    messages: list[dict[str, Any]],
    metadata: dict[str, Any],
    occurred_at: datetime | None,
) -> dict[str, Any]:
    return {
        **scope.as_dict(),
        "messages": Jsonb(messages),
        "message_count": len(messages),
        "metadata": Jsonb(metadata),
        "occurred_at": occurred_at,
    }


def insert_steps(
    scope: Scope,
    messages: list[dict[str, Any]],
    metadata: dict[str, Any],
    occurred_at: datetime | None = None,
) -> Steps[int]:
    """Insert one episode; its id."""
    row = yield Run(INSERT, insert_params(scope, messages, metadata, occurred_at), "one")
    assert row is not None
    return int(row[0])


insert, insert_sync = dual(insert_steps)


def insert_many_steps(
    rows: Sequence[tuple[Scope, list[dict[str, Any]], dict[str, Any], datetime | None]],
) -> Steps[list[int]]:
    """Insert several episodes in one transaction and one round trip (a pipeline); their ids,
    in order."""
    ids: list[int] = yield Run(INSERT, [insert_params(*row) for row in rows], "ids")
    return ids


insert_many, insert_many_sync = dual(insert_many_steps)


async def pending_scopes(
    conn: psycopg.AsyncConnection[Any],
    limit: int = 100_000,
    window: Window | None = None,
    include_waiting: bool = False,
) -> list[Scope]:
    """The scopes that have unconsolidated episodes (in the window), in a stable order;
    failed scopes waiting out their backoff, and parked ones, only with ``include_waiting``."""
    cur = await conn.execute(
        PENDING_SCOPES, {"limit": limit, "include_waiting": include_waiting, **_window(window)}
    )
    scopes: list[Scope] = []
    for row in await cur.fetchall():
        try:
            scopes.append(Scope(*row))
        except InvalidScopeError as exc:  # written around the library (plain SQL, old data)
            log.warning("skipping pending episodes of an invalid scope: %s", exc)
    return scopes


async def load_pending(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    limit: int = 10_000,
    window: Window | None = None,
) -> list[Episode]:
    """A scope's unconsolidated episodes (in the window), oldest first."""
    return await _episodes(conn, LOAD_PENDING, scope, limit, _window(window))


def count_pending_steps(window: Window | None = None) -> Steps[int]:
    """How many episodes (in the window) wait for consolidation."""
    row = yield Run(COUNT_PENDING, _window(window), "one")
    return int(row[0]) if row else 0


count_pending, count_pending_sync = dual(count_pending_steps)


def _window(window: Window | None) -> dict[str, Any]:
    window = window or Window()
    return {
        "since": window.since,
        "until": window.until,
        "users": window.users,
        "shard": window.shard,
        "shards": window.shards,
    }


async def _episodes(
    conn: psycopg.AsyncConnection[Any],
    query: str,
    scope: Scope,
    limit: int,
    extra: dict[str, Any] | None = None,
) -> list[Episode]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, {**scope.as_dict(), "limit": limit, **(extra or {})})
        return [Episode.model_validate(row) for row in await cur.fetchall()]


async def mark_consolidated(
    conn: psycopg.AsyncConnection[Any], summaries: dict[int, str], job_id: int
) -> int:
    """Mark these episodes (by id) consolidated by ``job_id``, each with its one-sentence
    summary, in one UPDATE; how many were still pending."""
    params = {"ids": list(summaries), "summaries": list(summaries.values()), "job_id": job_id}
    cur = await conn.execute(MARK, params)
    return cur.rowcount


async def count_marked_by(conn: psycopg.AsyncConnection[Any], ids: list[int], job_id: int) -> int:
    """How many of these episodes the given job consolidated."""
    cur = await conn.execute(
        "SELECT count(*) FROM agent_memory.episodes"
        " WHERE id = ANY(%s) AND consolidation_job_id = %s",
        (ids, job_id),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


# ---- the episodic tier by time: recent summaries, what happened between two moments ----

HISTORY = f"""
SELECT occurred_at, summary
FROM agent_memory.episodes
WHERE {SCOPE_MATCH} AND summary IS NOT NULL AND occurred_at < %(before)s
ORDER BY occurred_at DESC, id DESC
LIMIT %(limit)s
"""

BETWEEN = f"""
SELECT id, user_id, agent_id, workflow_id, messages, occurred_at, created_at, consolidated,
       summary
FROM agent_memory.episodes
WHERE {SCOPE_MATCH}
  AND occurred_at >= coalesce(%(since)s, '-infinity'::timestamptz)
  AND occurred_at < coalesce(%(until)s, 'infinity'::timestamptz)
ORDER BY occurred_at, id
LIMIT %(limit)s
"""


def _history(rows: list[Any]) -> list[HistoryEntry]:
    return [HistoryEntry(occurred_at=r[0], summary=r[1]) for r in rows]


def history_steps(scope: Scope, limit: int, before: datetime) -> Steps[list[HistoryEntry]]:
    """The scope's ``limit`` most recent summarised episodes before ``before``, newest first."""
    rows = yield Run(HISTORY, {**scope.as_dict(), "limit": limit, "before": before})
    return _history(rows)


async def between(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    since: datetime | None,
    until: datetime | None,
    limit: int,
) -> list[Episode]:
    """The scope's episodes that happened in [since, until), oldest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        params = {**scope.as_dict(), "since": since, "until": until, "limit": limit}
        await cur.execute(BETWEEN, params)
        return [Episode.model_validate(row) for row in await cur.fetchall()]
