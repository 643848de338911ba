"""The load test (benchmarks/load.py) at a small size: agents injecting and recording while
another process runs the consolidation and decay flows against the same database. No errors,
no lost or doubly stored episodes, no deadlocks, every episode consolidated in the end."""

from __future__ import annotations

from typing import Any

import pytest

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
