"""One shard's consolidation run, in a process of its own, for benchmarks.consolidation.

python -m benchmarks._shard_worker DSN WARM_DSN API_BASE SHARD SHARD_COUNT CONCURRENCY

Warms up (imports, a flow run over ``WARM_DSN``), prints ``ready``, waits for a line on stdin,
then consolidates its shard of ``DSN``'s scopes and prints one JSON line: when the run started
and ended (``time.time()``, comparable across processes), its CPU seconds and its summary's
counts. ``PREFECT_API_URL`` comes from the environment, as a worker's does.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from benchmarks._consolidation_runs import run_flow, settings_for


def main(argv: list[str]) -> int:
    dsn, warm_dsn, api_base, shard, shard_count, concurrency = argv
    from agent_memory_flows.consolidation import ConsolidationParams

    params = ConsolidationParams(
        max_scopes=1_000_000, shard=int(shard), shard_count=int(shard_count)
    )
    asyncio.run(run_flow(settings_for(warm_dsn, api_base, int(concurrency)), params))
    print("ready", flush=True)
    sys.stdin.readline()
    cpu, started = time.process_time(), time.time()
    _wall, summary, _run = asyncio.run(
        run_flow(settings_for(dsn, api_base, int(concurrency)), params)
    )
    print(
        json.dumps(
            {
                "started": started,
                "ended": time.time(),
                "cpu_s": time.process_time() - cpu,
                "scopes": summary["scopes"],
                "completed": summary["completed"],
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
