"""python -m benchmarks.record [--quick] [--messages N] [--records N]

What a turn's record costs the database (issue 40, item 3): a scope already holding N messages
(turns of two, as the load test's agents record them), then on one connection set up as the
manager's, one record at a time as ``MemoryManager.record`` stores it (the episode repository's
INSERT, autocommit):

* record - wall time per call (p50 / p99), the PostgreSQL backend's CPU per call (its
  ``/proc/<pid>/stat``, Linux only) and the WAL written per call (``pg_current_wal_insert_lsn``
  before and after, commit records included);
* explain - one more record under ``EXPLAIN (ANALYZE, BUFFERS, WAL)``: the WAL records and
  bytes of the INSERT itself, the WAL of all it caused (its triggers' writes and its commit
  too), its execution time and the time of each trigger it fired.

It prints JSON. No bound: the figures are read beside the same command's run on the code before
a change (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from agent_memory.db import episodes as episode_repo
from agent_memory.messages import serialize_messages
from agent_memory.models import Scope
from benchmarks._common import agent_connection, bench_database, emit, parser, summary

DB = "agent_memory_bench_record"
SCOPE = Scope("record-user", "record-agent")
TOPICS = ["pandas", "polars", "duckdb", "postgres", "prefect", "langgraph", "pytest", "docker"]


def turn(n: int) -> list[dict[str, Any]]:
    """The messages of turn ``n``, as an agent of the load test records them."""
    topic = TOPICS[n % len(TOPICS)]
    question = f"How should I use {topic} for turn {n}?"
    messages = [HumanMessage(f"I prefer {topic} for my work. {question}"), AIMessage("Ok.")]
    return serialize_messages(messages, max_bytes=1_000_000)[0]


def backend_cpu_s(pid: int) -> float | None:
    """The CPU seconds (user + system) backend ``pid`` has used, or None off Linux or when its
    /proc entry cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _prepare(conn: Any, messages: int) -> None:
    """The scope's first ``messages`` messages, and the queue of sentences to index drained
    where there is one (the state a scope is in between two drains)."""
    rows = [(SCOPE, turn(n), {"bytes": 0}, None) for n in range(messages // 2)]
    for start in range(0, len(rows), 500):
        episode_repo.insert_many_sync(conn, rows[start : start + 500])
    drained = conn.execute(
        "SELECT to_regproc('agent_memory.index_pending') IS NOT NULL"
    ).fetchone()
    if drained and drained[0]:
        while conn.execute("SELECT agent_memory.index_pending(500)").fetchone()[0]:
            pass
    conn.execute("VACUUM ANALYZE")


def _explained(conn: Any, n: int) -> dict[str, Any]:
    params = episode_repo.insert_params(SCOPE, turn(n), {"bytes": 0}, None)
    lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    plan = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) " + episode_repo.INSERT, params
    ).fetchone()[0][0]
    wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (lsn,))
    return {
        "execution_ms": round(plan["Execution Time"], 3),
        "wal_records": plan["Plan"].get("WAL Records"),
        "wal_bytes": plan["Plan"].get("WAL Bytes"),
        # the statement's triggers included, and its commit
        "wal_bytes_in_all": round(float(wal.fetchone()[0])),
        "triggers_ms": {t["Trigger Name"]: round(t["Time"], 3) for t in plan.get("Triggers", [])},
    }


def run(messages: int, records: int) -> dict[str, Any]:
    with bench_database(DB) as (_admin, dsn), agent_connection(dsn) as conn:
        _prepare(conn, messages)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        payloads = [turn(messages // 2 + n) for n in range(records + 10)]
        for stored in payloads[:10]:  # warm-up: plans, caches
            episode_repo.insert_sync(conn, SCOPE, stored, {"bytes": 0})
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        cpu = backend_cpu_s(pid)
        wall: list[float] = []
        for stored in payloads[10:]:
            started = time.perf_counter()
            episode_repo.insert_sync(conn, SCOPE, stored, {"bytes": 0})
            wall.append((time.perf_counter() - started) * 1000)
        cpu_after = backend_cpu_s(pid)
        wal = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (lsn,)
        ).fetchone()[0]
        explained = _explained(conn, messages + records + 10)
    server_ms = None if cpu is None or cpu_after is None else (cpu_after - cpu) * 1000 / records
    return {
        "messages_in_scope": messages,
        "records": records,
        "record": summary(wall, (0.50, 0.99), digits=3),
        "server_cpu_ms_per_record": None if server_ms is None else round(server_ms, 3),
        "wal_bytes_per_record": round(float(wal) / records),
        "explain": explained,
    }


def main(argv: list[str] | None = None) -> int:
    cli = parser("record", __doc__, quick="300 messages, 100 records")
    cli.add_argument("--messages", type=int, default=3_000)
    cli.add_argument("--records", type=int, default=500)
    args = cli.parse_args(argv)
    if args.quick:
        args.messages, args.records = 300, 100
    return emit(run(args.messages, args.records))


if __name__ == "__main__":
    sys.exit(main())
