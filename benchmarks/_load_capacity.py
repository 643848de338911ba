"""How many turns a second a machine serves with inject's p99 within a bound (issue 52, item
7), for sizing one: the load test again at a rising number of agents (each an inject, a think
time and a record per turn, the flows running beside), each step's turns per second and
latencies, and the most turns per second of a step whose inject p99 kept the bound, per core
of this machine. A step is a run of its own on the same database, which grows as they go."""

from __future__ import annotations

import os
from typing import Any

FULL_STEPS = (1, 2, 5, 10, 20, 30, 40, 50)
QUICK_STEPS = (2, 5)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


async def sweep(
    dsn: str,
    steps: tuple[int, ...],
    turns: int,
    think_ms: float,
    bound_ms: float = 20.0,
    flows_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The load test at each number of agents in ``steps``; what each step served."""
    from benchmarks.load import ok, run_load

    rows = []
    for agents in steps:
        result = await run_load(
            dsn, agents_count=agents, turns=turns, think_ms=think_ms, flows_env=flows_env
        )
        rows.append(
            {
                "agents": agents,
                "turns_per_s": round(agents * turns / result["wall_seconds"], 1),
                "inject_p50_ms": result["inject_under_load"]["p50_ms"],
                "inject_p99_ms": result["inject_under_load"]["p99_ms"],
                "record_p99_ms": result["record_under_load"]["p99_ms"],
                "checks_hold": ok(result),
            }
        )
    within = [r for r in rows if r["inject_p99_ms"] <= bound_ms and r["checks_hold"]]
    best = max(within, key=lambda r: r["turns_per_s"], default=None)
    n = cores()
    return {
        "bound": f"inject p99 <= {bound_ms:g} ms, flows running, think time {think_ms:g} ms",
        "cores": n,
        "turns_per_step": turns,
        "steps": rows,
        "turns_per_s_within_bound": best["turns_per_s"] if best else 0.0,
        "turns_per_s_per_core": round(best["turns_per_s"] / n, 1) if best else 0.0,
        "note": "the most of a step that kept the bound: a lower bound of the capacity, at the"
        " steps' granularity; 0 when no step kept it",
    }
