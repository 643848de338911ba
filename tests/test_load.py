"""The load test (benchmarks/load.py) at a small size: agents injecting and recording while
another process runs the consolidation and decay flows against the same database. No errors,
no lost or doubly stored episodes, no deadlocks, every episode consolidated in the end."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import _load_capacity
from benchmarks.load import ok, run_load


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("prefect_harness")
async def test_agents_under_load_lose_nothing_while_the_flows_run(database_url: str) -> None:
    from prefect.settings import PREFECT_API_URL

    result: dict[str, Any] = await run_load(
        database_url,
        agents_count=6,
        turns=15,
        think_ms=20,
        flows_env={"PREFECT_API_URL": str(PREFECT_API_URL.value())},
    )
    assert result["errors"] == 0, result["error_samples"]
    assert result["lost_episodes"] == 0 and result["deadlocks"] == 0
    assert result["episodes"]["distinct_ids"] == result["episodes"]["stored"] == 6 * 15
    assert result["episodes"]["consolidated"] == 6 * 15
    # the flows ran beside the agents, and between them and the last run took every episode
    assert result["flows"]["consolidations"] >= 1 and result["flows"]["decays"] >= 1
    assert result["flows"]["scopes_failed"] == 0
    assert result["flows"]["episodes"] + result["flows"]["final_consolidation_episodes"] == 6 * 15
    assert ok(result)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("prefect_harness")
async def test_the_capacity_is_the_busiest_step_that_kept_the_bound_per_core(
    database_url: str,
) -> None:
    from prefect.settings import PREFECT_API_URL

    env = {"PREFECT_API_URL": str(PREFECT_API_URL.value())}
    found = await _load_capacity.sweep(database_url, (1, 3), 4, 10, 60_000, flows_env=env)
    steps = found["steps"]
    assert [s["agents"] for s in steps] == [1, 3] and all(s["checks_hold"] for s in steps)
    assert all(s["turns_per_s"] > 0 and s["inject_p99_ms"] > 0 for s in steps)
    best = max(s["turns_per_s"] for s in steps)  # every step kept a bound of a minute
    assert found["turns_per_s_within_bound"] == best
    assert found["turns_per_s_per_core"] == round(best / _load_capacity.cores(), 1)
    none = await _load_capacity.sweep(database_url, (1,), 2, 10, 0.0, flows_env=env)
    assert none["turns_per_s_within_bound"] == 0.0 == none["turns_per_s_per_core"]
