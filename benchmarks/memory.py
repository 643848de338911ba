"""python -m benchmarks.memory [--quick] [--episodes N] [--scopes N] [--message-bytes N]

Peak memory of consolidating a backlog: N episodes (about --message-bytes of text each) over M
scopes are consolidated by the real flow (offline extractor, large batches, concurrency 8) in a
child process, which reports its peak RSS (ru_maxrss) and, as the reference measured in the
same run, its RSS once everything is imported and before the flow starts. The pipeline streams:
a scope is loaded a batch at a time (at most AGENT_MEMORY max_episodes_per_scope episodes), so
peak memory follows the batch size and concurrency, not the backlog.

Bound (issue 6): a 10,000-episode backlog keeps peak RSS <= 500 MB. --quick: 2,000 episodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
from typing import Any

import psycopg

from benchmarks._common import ROOT, bench_database, emit, parser, prefect_server

BACKLOG = """
INSERT INTO agent_memory.episodes (user_id, messages, message_count, occurred_at)
SELECT 'backlog-' || (e %% %(scopes)s),
       jsonb_build_array(
           jsonb_build_object('role', 'user', 'content',
               'I prefer tool number ' || e || '. ' || repeat('context ', %(words)s)),
           jsonb_build_object('role', 'assistant', 'content', 'Noted.')),
       2, now() - (e || ' seconds')::interval
FROM generate_series(1, %(episodes)s) AS e
"""


def rss_mb() -> float:
    """This process's peak resident set so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def child() -> dict[str, Any]:
    from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
    from agent_memory_flows.outcome import run_for_summary

    before = rss_mb()
    episodes = 0
    runs = 0
    while True:  # a run takes at most max_batches_per_scope batches of each scope
        summary = await run_for_summary(
            consolidation_flow, ConsolidationParams(max_batches_per_scope=1000)
        )
        runs += 1
        episodes += summary["episodes"]
        if summary["episodes"] == 0 or summary["failed"]:
            break
    return {
        "rss_after_imports_mb": round(before, 1),
        "peak_rss_mb": round(rss_mb(), 1),
        "episodes_consolidated": episodes,
        "failed": summary["failed"],
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    cli = parser("memory", __doc__, quick="2,000 episodes")
    cli.add_argument("--episodes", type=int, default=10_000)
    cli.add_argument("--scopes", type=int, default=10)
    cli.add_argument("--message-bytes", type=int, default=2000)
    cli.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = cli.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(child())))
        return 0
    if args.quick:
        args.episodes = 2_000

    with bench_database("agent_memory_rss") as (_admin, dsn), prefect_server() as prefect:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                BACKLOG,
                {
                    "episodes": args.episodes,
                    "scopes": args.scopes,
                    "words": max(args.message_bytes // 8, 1),
                },
            )
            size = conn.execute(
                "SELECT pg_size_pretty(sum(octet_length(messages::text)))"
                " FROM agent_memory.episodes"
            ).fetchone()
        env = {
            **os.environ,
            "DATABASE_URL": dsn,
            "PREFECT_API_URL": prefect.api_url,
            "PREFECT_LOGGING_LEVEL": "WARNING",
            "PREFECT_LOGGING_TO_API_ENABLED": "false",
            "AGENT_MEMORY_LLM_MODEL": "",  # the offline extractor: memory, not LLM latency
            "AGENT_MEMORY_LLM_BATCH_TOKENS": "200000",
            "AGENT_MEMORY_LLM_MAX_CONCURRENCY": "8",
        }
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.memory", "--child"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 2
        measured = json.loads(done.stdout.strip().splitlines()[-1])
    growth = measured["peak_rss_mb"] - measured["rss_after_imports_mb"]
    result = {
        "episodes": args.episodes,
        "scopes": args.scopes,
        "backlog_messages_size": size[0] if size else None,
        **measured,
        "growth_during_flow_mb": round(growth, 1),
        "bounds": {"peak_rss_mb": "<= 500 (10,000 episodes)"},
        "pass": (
            measured["peak_rss_mb"] <= 500 and measured["episodes_consolidated"] == args.episodes
        )
        if args.episodes >= 10_000
        else None,
    }
    return emit(result)


if __name__ == "__main__":
    sys.exit(main())
