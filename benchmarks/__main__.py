"""python -m benchmarks [--quick] [--facts N] [--scopes N]

Loads N facts over M scopes into a fresh database (the embedded PostgreSQL unless DATABASE_URL
is set; a database named agent_memory_bench is created and dropped), then measures on one
connection:

* select1   - SELECT 1, the floor of a round trip
* inject    - the inject_memory query (top facts of a scope by current importance)
* seed      - the seed's query (IS NOT DISTINCT FROM on the three parts, ORDER BY importance)

and prints JSON with p50/p95 in ms and the two ratios the README promises:
inject_p50 / select1_p50 (bound: <= 3) and seed_p50 / inject_p50 (bound: >= 100).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg

from agent_memory.db import facts as fact_repo
from agent_memory.db.migrations import ensure_decay_policy, migrate
from agent_memory.decay import today
from agent_memory.models import Scope
from benchmarks.database import admin_dsn

BENCH_DB = "agent_memory_bench"

# the seed's inject query, on the columns it had (importance is current in the seed's model)
SEED_QUERY = """
SELECT * FROM agent_memory.memory_items
WHERE user_id IS NOT DISTINCT FROM %s
  AND agent_id IS NOT DISTINCT FROM %s
  AND workflow_id IS NOT DISTINCT FROM %s
  AND importance >= %s
ORDER BY importance DESC
LIMIT %s
"""

# Scope s: user 'user-s'; agent set for even s; workflow set for s divisible by 3, so the data
# has NULL parts in every combination the scope index must get right.
LOAD = """
INSERT INTO agent_memory.memory_items
    (user_id, agent_id, workflow_id, content, content_hash, importance, importance_at, decay_rank)
SELECT 'user-' || s,
       CASE WHEN s %% 2 = 0 THEN 'agent-' || (s %% 5) END,
       CASE WHEN s %% 3 = 0 THEN 'wf-' || (s %% 11) END,
       'fact ' || g || ' about scope ' || s,
       sha256(('fact ' || g)::bytea),
       imp,
       at,
       ln(imp) + agent_memory.day_index(at) * -ln(0.95)
FROM (
    SELECT g, g %% %(scopes)s AS s,
           0.06 + random() * 0.94 AS imp,
           now() - (random() * 60) * interval '1 day' AS at
    FROM generate_series(1, %(facts)s) AS g
) AS rows
"""


def scope_of(s: int) -> Scope:
    return Scope(
        f"user-{s}",
        f"agent-{s % 5}" if s % 2 == 0 else None,
        f"wf-{s % 11}" if s % 3 == 0 else None,
    )


def timings(fn: Callable[[], Any], n: int, warmup: int = 10) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "p50_ms": round(statistics.median(ms), 4),
        "p95_ms": round(ms[int(len(ms) * 0.95) - 1], 4),
        "n": len(ms),
    }


def run(facts: int, scopes: int, iterations: int, seed_iterations: int) -> dict[str, Any]:
    admin, server = admin_dsn()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")
    dsn = psycopg.conninfo.make_conninfo(admin, dbname=BENCH_DB)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
            ensure_decay_policy(conn, 0.95)
            t = time.perf_counter()
            conn.execute(LOAD, {"facts": facts, "scopes": scopes})
            conn.execute("VACUUM ANALYZE agent_memory.memory_items")
            load_s = time.perf_counter() - t

            rng = random.Random(7)
            picks = [scope_of(rng.randrange(scopes)) for _ in range(iterations)]
            day = today()
            it = iter(picks * 2)

            def inject() -> None:
                rows = fact_repo.top_sync(conn, next(it), 0.1, 20, day)
                assert rows

            def select1() -> None:
                conn.execute("SELECT 1").fetchall()

            seed_it = iter(picks)

            def seed() -> None:
                conn.execute(SEED_QUERY, (*next(seed_it).params, 0.1, 20)).fetchall()

            # interleave the two fast ones in rounds so drift on the machine hits both alike
            s1: list[float] = []
            inj: list[float] = []
            rounds = 10
            for _ in range(rounds):
                s1 += timings(select1, iterations // rounds)
                inj += timings(inject, iterations // rounds)
            seed_ms = timings(seed, seed_iterations, warmup=2)
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    "EXPLAIN " + fact_repo.TOP, fact_repo.top_params(picks[0], 0.1, 20, day)
                )
            )
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        if server is not None:
            server.cleanup()
    r_select1, r_inject, r_seed = summary(s1), summary(inj), summary(seed_ms)
    inject_vs_select1 = r_inject["p50_ms"] / r_select1["p50_ms"]
    seed_vs_inject = r_seed["p50_ms"] / r_inject["p50_ms"]
    return {
        "facts": facts,
        "scopes": scopes,
        "load_seconds": round(load_s, 1),
        "select1": r_select1,
        "inject": r_inject,
        "seed_query": r_seed,
        "ratios": {
            "inject_p50_over_select1_p50": round(inject_vs_select1, 2),
            "seed_p50_over_inject_p50": round(seed_vs_inject, 1),
        },
        "bounds": {
            "inject_p50_over_select1_p50": "<= 3",
            "seed_p50_over_inject_p50": ">= 100",
            "apply_at": "1,000,000 facts over 10,000 scopes",
        },
        # the seed's query is a full scan, so its ratio only means something at full size
        "pass": (inject_vs_select1 <= 3 and seed_vs_inject >= 100)
        if facts >= 1_000_000 and scopes >= 10_000
        else None,
        "inject_plan_uses_index": "memory_items_current_rank_idx" in plan,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="100k facts over 1k scopes")
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--scopes", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=4000)
    args = parser.parse_args(argv)
    if args.quick:
        args.facts, args.scopes, args.iterations = 100_000, 1_000, 1000
    result = run(args.facts, args.scopes, args.iterations, seed_iterations=30)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 1 if result["pass"] is False else 0


if __name__ == "__main__":
    sys.exit(main())
