"""python -m benchmarks.decay [--quick]

The daily decay at 1M facts over 10k scopes (--quick: 100k over 1k), in a fresh database (the
embedded PostgreSQL unless DATABASE_URL is set), against the seed's decay on the same data in
the same run. Facts are loaded as benchmarks/inject.py loads them (importance 0.06-1, clocks
started over the last 60 days, every kind, one to three mentions), then purged as of today, so
the runs below find one day's worth of expiry, as a daily run does. ``seed_items`` is the
seed's table (its columns, its primary key and importance index) holding the same facts with
their importance of today. Autovacuum is off on both tables, so dead tuples stay where the
runs left them, and each compared run starts from a CHECKPOINT, so each pays its own
full-page writes. Prints JSON:

* seed           - the seed's daily decay (UPDATE importance * 0.95, then DELETE below 0.05):
                   wall ms, rows updated / deleted, dead tuples added
* purge          - our daily decay's SQL for tomorrow (agent_memory.db.facts.purge, batches of
                   5,000): wall ms, purged (== the facts below the threshold that day), dead
                   tuples added (bound: <= purged + 100), the longest batch transaction
                   (begin to commit: how long it holds its row locks), and seed_ms / purge_ms
                   (bound: >= 10)
* purge_rerun    - the same day again: purged and dead tuples added (bound: 0 and 0)
* flow           - the real decay_flow for the day after, reporting to a `prefect server
                   start` of its own: wall ms (Prefect's overhead and the analytics included),
                   purged, dead tuples, seed_ms / flow_ms; and the same day again (purged: 0).
                   analytics_ms is what the flow's analytics step costs on its own (it reads
                   every fact), measured apart
* current_importance - inject (top_sync) on that day for sampled scopes against
                   agent_memory.decay.importance_on and importance * 2 ** (-days / half-life)
                   computed in Python (bound: relative error <= 1e-9)
* inject         - top_sync latency from another process for random scopes: idle, during a
                   whole decay flow 20 days ahead and during a purge 30 days ahead (much to
                   purge in both), inject asking for that day; p50 / p95 / p99 ms and facts
                   returned (bound: p99 during decay <= 5 ms)
* purge_plan     - EXPLAIN (ANALYZE, BUFFERS) of the flow's day's first PURGE_BATCH, rolled back
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import date, timedelta
from typing import Any

from benchmarks._common import prefect_defaults

# (PREFECT_HOME is inherited by the inject process: no second directory)
os.environ.update(prefect_defaults())

import psycopg

from agent_memory.decay import day_index, today
from benchmarks._common import bench_database, emit, parser, prefect_server
from benchmarks._decay_inject import check_importance, purge_plan, with_injector
from benchmarks._decay_runs import (
    ITEMS,
    SEED_FILL,
    SEED_TABLE,
    analytics_cost,
    flow_day,
    purge_day,
    run_flow,
    seed_decay,
    table_stats,
    timed_purge,
)
from benchmarks._synthetic import LOAD

BENCH_DB = "agent_memory_bench_decay"


def run(facts: int, scopes: int, inject_idle_s: float) -> dict[str, Any]:
    day0 = today()
    result: dict[str, Any] = {"facts": facts, "scopes": scopes, "today": day0.isoformat()}
    with (
        bench_database(BENCH_DB) as (_admin, dsn),
        prefect_server(),
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        result |= _load(dsn, conn, facts, scopes, day0)

        # a warm-up flow for today (nothing to purge): imports, Prefect's first run
        run_flow(dsn, day0)

        # 1. the seed's daily decay, and ours for the next day, on the same facts;
        # 2. idempotent: ours for the same day again
        result |= _seed_then_purge(dsn, conn, day0 + timedelta(days=1))
        # 3. the whole flow, for the day after, and again for that day
        day2 = day0 + timedelta(days=2)
        result |= _flow_twice(dsn, conn, day2, seed_ms=result["seed"]["wall_ms"])
        # 4. inject sees the current importance
        result["current_importance"] = check_importance(conn, scopes, day2)

        # 5. inject latency: idle, during a large purge, during a whole flow
        result["inject"] = _inject_latency(dsn, conn, scopes, day0, inject_idle_s)
        result["table_after"] = table_stats(conn, ITEMS)

    checks = _checks(result)
    result["checks"] = checks
    result["bounds_apply_at"] = "1,000,000 facts over 10,000 scopes"
    result["pass"] = all(checks.values()) if facts >= 1_000_000 and scopes >= 10_000 else None
    return result


def _load(
    dsn: str, conn: psycopg.Connection[Any], facts: int, scopes: int, day0: date
) -> dict[str, Any]:
    """The facts loaded and today's decay run on them, the seed's table filled alike."""
    started = time.perf_counter()
    conn.execute(LOAD, {"facts": facts, "scopes": scopes})
    conn.execute(f"ALTER TABLE {ITEMS} SET (autovacuum_enabled = off)")
    # today's decay has run: what is left is what a daily run starts from
    setup_purged = asyncio.run(timed_purge(dsn, day0))["purged"]
    conn.execute(SEED_TABLE)
    conn.execute(SEED_FILL, {"day": day_index(day0)})
    conn.execute(f"VACUUM ANALYZE {ITEMS}")
    conn.execute("VACUUM ANALYZE seed_items")
    return {
        "load_seconds": round(time.perf_counter() - started, 1),
        "facts_loaded": facts,
        "facts_after_todays_purge": facts - setup_purged,
        "seed_rows": int((conn.execute("SELECT count(*) FROM seed_items").fetchone() or [0])[0]),
    }


def _seed_then_purge(dsn: str, conn: psycopg.Connection[Any], day1: date) -> dict[str, Any]:
    """The seed's daily decay, then ours for ``day1`` on the same facts, then ours again."""
    seed = seed_decay(dsn, conn)
    purge = purge_day(dsn, conn, day1)
    purge["seed_ms_over_purge_ms"] = round(seed["wall_ms"] / purge["wall_ms"], 2)
    purge["bounds"] = {
        "seed_ms_over_purge_ms": ">= 10",
        "dead_tuples_added": "<= purged + 100",
        "purged": "== expected",
    }
    rerun = purge_day(dsn, conn, day1)
    return {
        "seed": seed,
        "purge": purge,
        "purge_rerun": {
            "purged": rerun["purged"],
            "dead_tuples_added": rerun["dead_tuples_added"],
            "wall_ms": rerun["wall_ms"],
            "bound": "purged == 0 and dead_tuples_added == 0",
        },
    }


def _flow_twice(
    dsn: str, conn: psycopg.Connection[Any], day2: date, *, seed_ms: float
) -> dict[str, Any]:
    """The plan of one batch of ``day2``'s purge, then the whole flow for that day, twice, and
    what its analytics cost on their own."""
    # the plan of one batch of that day's purge (rolled back, so it changes nothing)
    plan = purge_plan(conn, day2)
    conn.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(0.2)
    flow = flow_day(dsn, conn, day2)
    flow_again = flow_day(dsn, conn, day2)
    analytics_ms = analytics_cost(dsn, day2)
    flow["seed_ms_over_flow_ms"] = round(seed_ms / flow["wall_ms"], 2)
    flow["analytics_ms"] = round(analytics_ms, 1)
    flow["flow_ms_without_analytics"] = round(flow["wall_ms"] - analytics_ms, 1)
    flow["rerun"] = {
        "purged": flow_again["purged"],
        "dead_tuples_added": flow_again["dead_tuples_added"],
        "wall_ms": flow_again["wall_ms"],
    }
    return {"purge_plan": plan, "flow": flow}


def _inject_latency(
    dsn: str, conn: psycopg.Connection[Any], scopes: int, day0: date, idle_s: float
) -> dict[str, Any]:
    """Inject's latency from another process: idle, during a whole flow, during a purge."""
    # (inject asks for the decay's own day, so it still finds facts above 0.1)
    day20, day30 = day0 + timedelta(days=20), day0 + timedelta(days=30)
    idle, _ = with_injector(dsn, scopes, day20, 1, None, idle_s=idle_s)
    during_flow, big_flow = with_injector(
        dsn, scopes, day20, 3, lambda: flow_day(dsn, conn, day20, fresh=False)
    )
    during_purge, big = with_injector(
        dsn, scopes, day30, 2, lambda: purge_day(dsn, conn, day30, fresh=False)
    )
    return {
        "idle": idle,
        "during_purge": {
            **during_purge,
            "purge_as_of": big["as_of"],
            "purged": big["purged"],
            "purge_wall_ms": big["wall_ms"],
            "batches": big["batches"],
            "max_batch_ms": big["max_batch_ms"],
        },
        "during_flow": {
            **during_flow,
            "flow_as_of": big_flow["as_of"],
            "purged": big_flow["purged"],
            "flow_wall_ms": big_flow["wall_ms"],
        },
        "query": "fact_repo.TOP (min_importance 0.1, limit 20), random scopes, "
        "one connection in another process",
        "bound": "p99 during decay <= 5 ms",
    }


def _checks(result: dict[str, Any]) -> dict[str, bool]:
    """The bounds, each judged on the figures measured."""
    p, inj, importance = result["purge"], result["inject"], result["current_importance"]
    return {
        "seed_ms_over_purge_ms >= 10": result["seed"]["wall_ms"] >= 10 * p["wall_ms"],
        "purged == expected": p["purged"] == p["expected"] and p["left_below_threshold"] == 0,
        "dead_tuples_added <= purged + 100": p["dead_tuples_added"] <= p["purged"] + 100,
        "rerun purges nothing, adds no dead tuples": result["purge_rerun"]["purged"] == 0
        and result["purge_rerun"]["dead_tuples_added"] == 0
        and result["flow"]["rerun"]["purged"] == 0,
        "inject p99 during decay <= 5 ms": inj["during_purge"]["p99_ms"] <= 5
        and inj["during_flow"]["p99_ms"] <= 5,
        "inject sees the current importance": importance["max_rel_error_vs_current_importance"]
        <= 1e-9
        and importance["max_rel_error_vs_importance_halved_per_half_life"] <= 1e-9
        and importance["returned_below_purge_threshold"] == 0,
    }


def main(argv: list[str] | None = None) -> int:
    cli = parser("decay", __doc__, quick="100k facts over 1k scopes")
    cli.add_argument("--facts", type=int, default=1_000_000)
    cli.add_argument("--scopes", type=int, default=10_000)
    args = cli.parse_args(argv)
    if args.quick:
        args.facts, args.scopes = 100_000, 1_000
    return emit(run(args.facts, args.scopes, inject_idle_s=3.0 if args.quick else 10.0))


if __name__ == "__main__":
    sys.exit(main())
