"""Fan-out within one run on Dask (prefect-dask): chunks of scopes on worker processes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from psycopg.types.json import Jsonb

from agent_memory.settings import Settings
from agent_memory_flows.dask import DaskConsolidationParams, consolidation_dask_flow
from agent_memory_flows.outcome import run_for_summary

pytestmark = pytest.mark.usefixtures("prefect_harness")

USERS = [f"dask-{i}" for i in range(9)]


@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_a_run_fans_out_over_dask_workers_without_duplicates(
    settings: Settings,
    database_url: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", database_url)  # Dask workers read their environment
    for user in USERS:
        db.execute(
            "INSERT INTO agent_memory.episodes (user_id, messages, message_count)"
            " VALUES (%s, %s, 1)",
            (user, Jsonb([{"role": "user", "content": f"I prefer tools made by {user}."}])),
        )
    state = await consolidation_dask_flow(DaskConsolidationParams(chunks=3), return_state=True)
    summary = await run_for_summary(
        consolidation_dask_flow, DaskConsolidationParams(chunks=3)
    )  # a second run: nothing left
    first = await state.result()
    assert (first["scopes"], first["completed"], first["failed"]) == (9, 9, 0)
    assert summary["scopes"] == 0
    jobs = db.execute(
        "SELECT user_id, status, flow_run_id FROM agent_memory.consolidation_jobs"
    ).fetchall()
    assert sorted(j[0] for j in jobs) == USERS and {j[1] for j in jobs} == {"completed"}
    run_id = state.state_details.flow_run_id
    assert {j[2] for j in jobs} == {str(run_id)}
    assert db.execute(
        "SELECT count(*), count(DISTINCT user_id) FROM agent_memory.memory_items"
    ).fetchone() == (9, 9)
    async with get_client() as client:
        task_runs = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
        )
    names = {t.name for t in task_runs}
    assert {f"consolidate [chunk {i}/3: 3 scopes]" for i in (1, 2, 3)} <= names
    # each chunk's three scopes are one group: a write task run for the three
    # (named by keys: Prefect is never told user ids)
    assert sum(name.startswith("write [3 scopes: scope-") for name in names) == 3
