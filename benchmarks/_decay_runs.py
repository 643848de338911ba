"""The decays the decay benchmark (benchmarks/decay.py) compares, each timed with the dead
tuples it leaves: the seed's daily job (UPDATE + DELETE on ``seed_items``, the seed's table),
our purge (agent_memory.db.facts.purge, each batch's transaction timed) and the real
decay_flow; and the table statistics they are read from."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import date
from typing import Any

import psycopg

from agent_memory.db import decay as decay_repo
from agent_memory.decay import day_index

PURGE_BELOW = 0.05
BATCH = 5_000
ITEMS = "agent_memory.memory_items"

# The seed's memory_items (../shared/seeds/agent-memory-layer.md): its columns, and "an
# importance index on memory_items" for its decay; importance is the current value.
SEED_TABLE = """
CREATE TABLE seed_items (
    id           bigint PRIMARY KEY,
    user_id      text,
    agent_id     text,
    workflow_id  text,
    content      text NOT NULL,
    importance   double precision NOT NULL,
    memory_types text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
) WITH (autovacuum_enabled = off);
CREATE INDEX seed_items_importance_idx ON seed_items (importance);
"""
SEED_FILL = """
INSERT INTO seed_items (id, user_id, agent_id, workflow_id, content, importance, memory_types,
                        created_at, updated_at)
SELECT id, user_id, agent_id, workflow_id, content,
       agent_memory.importance_on(expires_day, %(day)s, half_life,
                                  (SELECT purge_below FROM agent_memory.decay_policy)),
       memory_types, created_at, updated_at
FROM agent_memory.memory_items
"""
# The seed's daily job, for all scopes (its "AND scope matches" left out), one statement each.
SEED_UPDATE = """
UPDATE seed_items SET importance = importance * 0.95 WHERE importance * 0.95 >= 0.05
"""
SEED_DELETE = "DELETE FROM seed_items WHERE importance < 0.05"

STATS = """
SELECT n_dead_tup, n_tup_upd, n_tup_del, n_tup_hot_upd, n_live_tup
FROM pg_stat_user_tables WHERE relid = %s::regclass
"""
EXPIRED = f"""
SELECT count(*) FROM {ITEMS}
WHERE agent_memory.importance_on(expires_day, %(day)s, half_life,
                                 (SELECT purge_below FROM agent_memory.decay_policy))
      < %(purge_below)s
"""


def table_stats(conn: psycopg.Connection[Any], table: str) -> dict[str, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(STATS, (table,)).fetchone()
    assert row is not None
    keys = ("n_dead_tup", "n_tup_upd", "n_tup_del", "n_tup_hot_upd", "n_live_tup")
    return dict(zip(keys, (int(v) for v in row), strict=True))


def stats_after(
    conn: psycopg.Connection[Any],
    table: str,
    before: dict[str, int],
    updated: int,
    deleted: int,
    timeout_s: float = 15.0,
) -> dict[str, int]:
    """The table's counters once the writers' statistics have reached the shared ones (the
    writer forces a flush or has disconnected; this waits for the counts it knows it made)."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = table_stats(conn, table)
        done = (
            now["n_tup_upd"] - before["n_tup_upd"] >= updated
            and now["n_tup_del"] - before["n_tup_del"] >= deleted
        )
        if done or time.monotonic() > deadline:
            return {k: now[k] - before[k] for k in now}
        time.sleep(0.05)


# --- our purge, with each batch's transaction timed ----------------------------------------


class TimedConnection:
    """Hands decay_repo.purge a real connection, timing each of its transactions from BEGIN to
    COMMIT: the span in which a batch holds its row locks."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.batches_ms: list[float] = []

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        started = time.perf_counter()
        async with self.conn.transaction():
            yield
        self.batches_ms.append((time.perf_counter() - started) * 1000)

    async def execute(self, query: Any, params: Any = None) -> Any:
        return await self.conn.execute(query, params)


async def timed_purge(dsn: str, on: date) -> dict[str, Any]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        timed = TimedConnection(conn)
        started = time.perf_counter()
        purged = await decay_repo.purge(timed, PURGE_BELOW, on, None, BATCH)  # type: ignore[arg-type]
        wall = (time.perf_counter() - started) * 1000
        await conn.execute("SELECT pg_stat_force_next_flush()")
    return {
        "as_of": on.isoformat(),
        "wall_ms": round(wall, 1),
        "purged": purged,
        "batches": len(timed.batches_ms),
        "batch_rows": BATCH,
        "max_batch_ms": round(max(timed.batches_ms), 2),
        "mean_batch_ms": round(statistics.fmean(timed.batches_ms), 2),
    }


def checkpoint(conn: psycopg.Connection[Any]) -> None:
    """Start a measured run from a fresh checkpoint: each run pays its own full-page writes
    (most of the WAL of a write scattered over the table) rather than a previous one's."""
    conn.execute("CHECKPOINT")


def purge_day(
    dsn: str, stats: psycopg.Connection[Any], on: date, *, fresh: bool = True
) -> dict[str, Any]:
    """decay_repo.purge for ``on``, with the facts expected to go and the dead tuples added."""
    day = day_index(on)
    if fresh:
        checkpoint(stats)
    expected = stats.execute(EXPIRED, {"purge_below": PURGE_BELOW, "day": day}).fetchone()
    before = table_stats(stats, ITEMS)
    result = asyncio.run(timed_purge(dsn, on))
    delta = stats_after(stats, ITEMS, before, 0, result["purged"])
    left = stats.execute(EXPIRED, {"purge_below": PURGE_BELOW, "day": day}).fetchone()
    return {
        **result,
        "expected": int(expected[0]) if expected else None,
        "left_below_threshold": int(left[0]) if left else None,
        "dead_tuples_added": delta["n_dead_tup"],
        "rows_deleted": delta["n_tup_del"],
        "rows_updated": delta["n_tup_upd"],
    }


# --- the seed's decay --------------------------------------------------------------------


def seed_decay(dsn: str, stats: psycopg.Connection[Any]) -> dict[str, Any]:
    checkpoint(stats)
    before = table_stats(stats, "seed_items")
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        updated = conn.execute(SEED_UPDATE).rowcount
        update_ms = (time.perf_counter() - started) * 1000
        deleted = conn.execute(SEED_DELETE).rowcount
        wall = (time.perf_counter() - started) * 1000
        conn.execute("SELECT pg_stat_force_next_flush()")
    delta = stats_after(stats, "seed_items", before, updated, deleted)
    return {
        "statements": [SEED_UPDATE.strip(), SEED_DELETE],
        "wall_ms": round(wall, 1),
        "update_ms": round(update_ms, 1),
        "delete_ms": round(wall - update_ms, 1),
        "rows_updated": updated,
        "rows_deleted": deleted,
        "dead_tuples_added": delta["n_dead_tup"],
        "hot_updates": delta["n_tup_hot_upd"],
    }


# --- the real flow ----------------------------------------------------------------------


def run_flow(dsn: str, on: date) -> tuple[float, dict[str, Any]]:
    from pydantic import SecretStr

    from agent_memory.settings import DatabaseSettings, Settings, use_settings
    from agent_memory_flows.decay import DecayParams, decay_flow
    from agent_memory_flows.outcome import run_for_summary

    use_settings(
        Settings(db=DatabaseSettings(url=SecretStr(dsn), pool_min_size=1, pool_max_size=4))
    )
    started = time.perf_counter()
    # the decay flow's own summary (purged, facts, ...): read as a plain dict
    summary: dict[str, Any] = dict(
        asyncio.run(run_for_summary(decay_flow, DecayParams(as_of=on, batch_size=BATCH)))
    )
    return (time.perf_counter() - started) * 1000, summary


def flow_day(
    dsn: str, stats: psycopg.Connection[Any], on: date, *, fresh: bool = True
) -> dict[str, Any]:
    if fresh:
        checkpoint(stats)
    before = table_stats(stats, ITEMS)
    wall, summary = run_flow(dsn, on)
    delta = stats_after(stats, ITEMS, before, 0, int(summary["purged"]))
    return {
        "as_of": on.isoformat(),
        "wall_ms": round(wall, 1),
        "purged": summary["purged"],
        "facts_left": summary["facts"],
        "dead_tuples_added": delta["n_dead_tup"],
    }


def analytics_cost(dsn: str, on: date) -> float:
    """Milliseconds of the flow's analytics step alone (read every fact, polars report)."""
    from agent_memory import analytics

    async def measure() -> float:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            started = time.perf_counter()
            frame = await analytics.load_frame(conn, None, PURGE_BELOW)
            analytics.report(frame, as_of=on, purge_below=PURGE_BELOW, purged=0).summary()
            return (time.perf_counter() - started) * 1000

    return asyncio.run(measure())
