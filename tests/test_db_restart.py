"""The database restarts in the middle of a consolidation run: the run ends (it does not hang
or crash), each scope is completed or failed cleanly, and a rerun finishes the rest with
nothing lost or duplicated."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.settings import Settings
from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
from agent_memory_flows.outcome import run_for_summary
from tests.fake_llm import FakeLLM, Reply, facts_answer

pytestmark = pytest.mark.usefixtures("prefect_harness")

SCOPES = 24


@pytest.mark.timeout(300)
async def test_a_database_restart_mid_run_loses_and_duplicates_nothing(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    restart_database: Any,
) -> None:
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        for i in range(SCOPES):
            await manager.record(
                Scope(user_id=f"r{i}"), [{"role": "user", "content": f"I use tool {i}."}]
            )
    finally:
        await manager.close()
    db.close()  # the test's own connection would not survive the restart either

    restarted = threading.Event()
    lock = threading.Lock()

    def handler(request: dict[str, Any]) -> Reply:
        # the fifth answer restarts PostgreSQL first: other scopes are mid-load or mid-write
        with lock:
            first = fake_llm.calls >= 5 and not restarted.is_set()
            if first:
                restart_database()
                restarted.set()
        return facts_answer(request)

    fake_llm.reset(handler)
    first = await run_for_summary(consolidation_flow, ConsolidationParams())
    assert restarted.is_set()
    assert first["scopes"] == SCOPES
    assert first["completed"] + first["failed"] == SCOPES  # every scope accounted for

    fake_llm.reset(facts_answer)
    await run_for_summary(consolidation_flow, ConsolidationParams())
    with psycopg.connect(llm_settings.db.url.get_secret_value()) as conn:  # type: ignore[union-attr]
        assert conn.execute(
            "SELECT count(*) FROM agent_memory.episodes WHERE NOT consolidated"
        ).fetchone() == (0,)
        # each episode consolidated by one completed job; each fact once
        assert conn.execute(
            """SELECT count(*) FROM agent_memory.episodes e
               JOIN agent_memory.consolidation_jobs j ON j.id = e.consolidation_job_id
               WHERE j.status = 'completed'"""
        ).fetchone() == (SCOPES,)
        facts = conn.execute(
            "SELECT user_id, content FROM agent_memory.memory_items ORDER BY user_id"
        ).fetchall()
        assert sorted(facts) == sorted(
            (f"r{i}", f"User said I use tool {i}.") for i in range(SCOPES)
        )
        assert conn.execute(
            "SELECT count(*) FROM agent_memory.consolidation_jobs WHERE status = 'running'"
        ).fetchone() == (0,)
