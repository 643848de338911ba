"""python -m benchmarks.upgrade [--facts N]

What upgrading costs: a fresh database (the embedded PostgreSQL unless DATABASE_URL is set) is
brought to schema version 11, loaded with N facts (default 1M over 10k scopes, importance and
clocks as benchmarks/inject.py draws them, ranked by the daily factor as version 11 stored
them, each cited by one of N / 10 episodes), then every later migration is applied and timed
on its own. Prints JSON: seconds per migration, and a check that each fact's importance on a
day is what version 11 said it was.
"""

from __future__ import annotations

import sys
import time
from datetime import date
from typing import Any

import psycopg

from agent_memory.db.migrations import load_migrations, migrate
from benchmarks._common import bench_database, emit, parser

DB = "agent_memory_bench_upgrade"

# version 11's memory_items, as benchmarks/inject.py loaded them then
LOAD_FACTS = """
INSERT INTO agent_memory.memory_items
    (user_id, content, content_hash, importance, importance_at, decay_rank)
SELECT 'user-' || (g %% %(scopes)s), 'fact ' || g, sha256(('fact ' || g)::bytea), imp, at,
       ln(imp) + agent_memory.day_index(at) * -ln(0.95)
FROM (SELECT g, 0.06 + random() * 0.94 AS imp,
             now() - (random() * 60) * interval '1 day' AS at
      FROM generate_series(1, %(facts)s::bigint) AS g) AS rows
"""
LOAD_EPISODES = """
INSERT INTO agent_memory.episodes (user_id, messages, message_count, occurred_at)
SELECT 'user-' || (g %% %(scopes)s), '[]', 0, now() - (g %% 60) * interval '1 day'
FROM generate_series(1, %(episodes)s::bigint) AS g
"""
LOAD_SOURCES = """
INSERT INTO agent_memory.fact_sources (fact_id, episode_id)
SELECT m.id, e.id FROM agent_memory.memory_items m
JOIN agent_memory.episodes e ON e.id = 1 + m.id %% %(episodes)s
"""
# importance on a day before (version 11) and after (the one definition of its time)
BEFORE = """
SELECT id, exp(decay_rank - agent_memory.day_index(%(day)s::date) * -ln(0.95))
FROM agent_memory.memory_items WHERE id %% 1000 = 0 ORDER BY id
"""
AFTER = """
SELECT id, agent_memory.importance_on(
    expires_day, agent_memory.day_index(%(day)s::date), half_life,
    (SELECT purge_below FROM agent_memory.decay_policy))
FROM agent_memory.memory_items WHERE id %% 1000 = 0 ORDER BY id
"""


def run(dsn: str, facts: int, scopes: int) -> dict[str, Any]:
    migrations = load_migrations()
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn, migrations=[m for m in migrations if m.version <= 11])
        started = time.perf_counter()
        episodes = max(1, facts // 10)
        conn.execute(LOAD_FACTS, {"facts": facts, "scopes": scopes})
        conn.execute(LOAD_EPISODES, {"episodes": episodes, "scopes": scopes})
        conn.execute(LOAD_SOURCES, {"episodes": episodes})
        conn.execute("VACUUM ANALYZE")
        load_s = time.perf_counter() - started
        day = date.today().isoformat()
        before = conn.execute(BEFORE, {"day": day}).fetchall()
        timings: dict[str, float] = {}
        for migration in (m for m in migrations if m.version > 11):
            started = time.perf_counter()
            migrate(conn, migrations=[m for m in migrations if m.version <= migration.version])
            timings[migration.name] = round(time.perf_counter() - started, 2)
        after: dict[int, float] = dict(conn.execute(AFTER, {"day": day}).fetchall())
    worst = max(abs(after[i] - imp) / imp for i, imp in before)
    return {
        "facts": facts,
        "scopes": scopes,
        "episodes": episodes,
        "load_s": round(load_s, 1),
        "migration_s": timings,
        "max_rel_error_of_importance": worst,
        "pass": worst <= 1e-9,
    }


def main(argv: list[str] | None = None) -> int:
    cli = parser("upgrade", __doc__)
    cli.add_argument("--facts", type=int, default=1_000_000)
    cli.add_argument("--scopes", type=int, default=10_000)
    args = cli.parse_args(argv)
    with bench_database(DB, migrated=False) as (_admin, dsn):
        result = run(dsn, args.facts, args.scopes)
    emit(result)
    return 0  # python -m benchmarks does not run this section; "pass" is in the JSON


if __name__ == "__main__":
    sys.exit(main())
