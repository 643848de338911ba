"""python -m benchmarks.record [--quick] [--messages N] [--records N]

What a turn's record costs the database (issue 40, item 3): a scope already holding N messages
(turns of two, as the load test's agents record them), then on one connection set up as the
manager's, one record at a time as ``MemoryManager.record`` stores it (the episode repository's
INSERT, autocommit):

* record - wall time per call (p50 / p99), the PostgreSQL backend's CPU per call (its
  ``/proc/<pid>/stat``, Linux only; 10 ms ticks over the calls) and the WAL written per call
  (``pg_current_wal_insert_lsn`` before and after, commit records included);
* explain - one more record under ``EXPLAIN (ANALYZE, BUFFERS, WAL)``: the WAL records and
  bytes of the INSERT itself, the WAL of all it caused (its triggers' writes and its commit
  too), its execution time and the time of each trigger it fired.

* drain - the queued episodes (those records') indexed afterwards, as the manager's background
  drain and the consolidation flow do: time and WAL per episode (schema 26 on);
* search - the conversation search by full text (as inject runs it) with 0, 1, 10 and 50 of the
  scope's episodes waiting to be indexed, p50 of 200 each;
* reference_insert_without_triggers - the same INSERT with no trigger firing
  (``session_replication_role = replica``, which needs a superuser, as the embedded server's
  is): what an INSERT costs.

It prints JSON. No bound: the figures are read beside the reference and the same command's run
on the code before a change (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from agent_memory.db import episodes as episode_repo
from agent_memory.db import snippets as snippet_repo
from agent_memory.decay import today
from agent_memory.messages import serialize_messages
from agent_memory.models import Scope
from benchmarks._common import agent_connection, bench_database, emit, parser, summary, timings

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


def _drain(conn: Any) -> int | None:
    """Index every queued episode (as ``MemoryManager.index_pending`` does); how many, or None
    on a schema with no queue (before version 26, the INSERT indexed them)."""
    known = conn.execute("SELECT to_regproc('agent_memory.index_pending') IS NOT NULL").fetchone()
    if not known or not known[0]:
        return None
    from agent_memory.db import snippet_queue

    return snippet_queue.drain_sync(conn)


def _prepare(conn: Any, messages: int) -> None:
    """The scope's first ``messages`` messages, indexed (the state a scope is in between two
    drains)."""
    rows = [(SCOPE, turn(n), {"bytes": 0}, None) for n in range(messages // 2)]
    for start in range(0, len(rows), 500):
        episode_repo.insert_many_sync(conn, rows[start : start + 500])
    _drain(conn)
    conn.execute("VACUUM ANALYZE")


def _searches(conn: Any, start: int, searches: int) -> dict[str, float]:
    """The conversation search's p50 (full text, as inject runs it with the facts) with 0, 1,
    10 and 50 of the scope's episodes waiting to be indexed: turns recorded from ``start``."""
    out: dict[str, float] = {}
    day = today()
    recorded = 0
    for waiting in (0, 1, 10, 50):
        for n in range(recorded, waiting):
            episode_repo.insert_sync(conn, SCOPE, turn(start + n), {"bytes": 0})
        recorded = waiting
        asks = iter(
            [f"How should I use {TOPICS[n % 8]} for turn {n}?" for n in range(2 * searches)]
        )

        def search(asks: Iterator[str] = asks) -> None:
            snippet_repo.search_sync(conn, snippet_repo.search_params(SCOPE, next(asks), on=day))

        out[f"{waiting}_waiting_p50_ms"] = summary(timings(search, searches), (0.5,), 3)["p50_ms"]
    return out


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


def _timed(conn: Any, pid: int, payloads: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Each of ``payloads`` recorded, one call each: wall time, backend CPU and WAL per call."""
    lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    cpu = backend_cpu_s(pid)
    wall: list[float] = []
    for stored in payloads:
        started = time.perf_counter()
        episode_repo.insert_sync(conn, SCOPE, stored, {"bytes": 0})
        wall.append((time.perf_counter() - started) * 1000)
    cpu_after = backend_cpu_s(pid)
    wal = conn.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (lsn,)
    ).fetchone()[0]
    server = None if cpu is None or cpu_after is None else (cpu_after - cpu) * 1000 / len(wall)
    return {
        **summary(wall, (0.50, 0.99), digits=3),
        "server_cpu_ms": None if server is None else round(server, 3),
        "wal_bytes": round(float(wal) / len(wall)),
    }


def run(messages: int, records: int) -> dict[str, Any]:
    with bench_database(DB) as (_admin, dsn), agent_connection(dsn) as conn:
        _prepare(conn, messages)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        searches = _searches(conn, messages // 2, 200)
        _drain(conn)
        first = messages // 2 + 50
        payloads = [turn(first + n) for n in range(2 * records + 10)]
        for stored in payloads[:10]:  # warm-up: plans, caches
            episode_repo.insert_sync(conn, SCOPE, stored, {"bytes": 0})
        record = _timed(conn, pid, payloads[10 : 10 + records])
        explained = _explained(conn, first + 2 * records + 10)
        # what indexing the queued episodes costs, off the agent's path, per episode
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        started = time.perf_counter()
        drained = _drain(conn)
        drain_ms = (time.perf_counter() - started) * 1000
        wal = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (lsn,)
        ).fetchone()[0]
        # the reference: the same INSERT with no trigger firing (a superuser's session only)
        conn.execute("SET session_replication_role = replica")
        alone = _timed(conn, pid, payloads[10 + records :])
        conn.execute("RESET session_replication_role")
    return {
        "messages_in_scope": messages,
        "records": records,
        "record": record,
        "explain": explained,
        "drain": None
        if not drained
        else {
            "episodes": drained,
            "ms_per_episode": round(drain_ms / drained, 3),
            "wal_bytes_per_episode": round(float(wal) / drained),
        },
        "search": searches,
        "reference_insert_without_triggers": alone,
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
