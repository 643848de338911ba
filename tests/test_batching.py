"""Bounded work: a backlog goes in chronological batches under a token budget, each committed
on its own; an episode larger than the budget is cut to fit, with a warning, never dropped."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.consolidation.load import select_batch
from agent_memory.extraction import OfflineExtractor
from agent_memory.models import Episode
from agent_memory.settings import Settings, use_settings
from tests.fake_llm import FakeLLM, Reply

pytestmark = pytest.mark.usefixtures("prefect_harness")
START = datetime(2026, 1, 1, tzinfo=UTC)


def small_batches(settings: Settings, tokens: int = 100) -> Settings:
    s = settings.model_copy(
        update={"llm": settings.llm.model_copy(update={"batch_tokens": tokens})}
    )
    use_settings(s)
    return s


async def backlog(
    manager: MemoryManager, scope: Scope, n: int, text: str = "I prefer tea {i}."
) -> None:
    for i in range(n):
        await manager.record(
            scope,
            [{"role": "user", "content": text.format(i=i)}],
            occurred_at=START + timedelta(days=i),
        )


def test_select_batch_is_a_chronological_prefix_within_budget() -> None:
    episodes = [
        Episode(
            id=i,
            user_id="u",
            agent_id=None,
            workflow_id=None,
            consolidated=False,
            messages=[{"role": "user", "content": "x" * 200}],
            occurred_at=START + timedelta(days=i),
            created_at=START,
        )
        for i in range(10)
    ]
    chosen, notes = select_batch(episodes, OfflineExtractor(), budget=200)
    assert [e.id for e in chosen] == [0, 1, 2]  # ~60 tokens each
    assert notes == []
    chosen, notes = select_batch(episodes[:1], OfflineExtractor(), budget=20)
    assert len(chosen) == 1 and "over the batch budget of 20" in notes[0]
    assert chosen[0].messages[0]["content"].endswith("[...truncated]")
    assert len(chosen[0].messages[0]["content"]) < 100


async def test_backlog_goes_in_batches_in_order(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    settings = small_batches(settings)
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await backlog(manager, Scope(user_id="big"), 12)
        summary = await manager.consolidate()
    finally:
        await manager.close()
    (row,) = summary["results"]
    assert row["outcome"] == "completed" and row["episodes"] == 12 and row["batches"] > 1
    jobs = db.execute(
        """SELECT j.id, min(e.occurred_at), max(e.occurred_at), count(*)
           FROM agent_memory.consolidation_jobs j
           JOIN agent_memory.episodes e ON e.consolidation_job_id = j.id
           GROUP BY j.id ORDER BY j.id"""
    ).fetchall()
    assert len(jobs) == row["batches"]
    assert sum(j[3] for j in jobs) == 12
    for earlier, later in itertools.pairwise(jobs):
        assert earlier[2] < later[1]  # each batch is older than the next
    assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (12,)


async def test_oversize_episode_is_cut_with_a_warning_not_dropped(
    settings: Settings, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    settings = small_batches(settings)
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await manager.record(
            Scope(user_id="huge"),
            [{"role": "user", "content": "I prefer long walks. " + "blah " * 2000}],
        )
        summary = await manager.consolidate()
    finally:
        await manager.close()
    assert summary["completed"] == 1
    assert "over the batch budget of 100" in caplog.text
    assert db.execute(
        "SELECT consolidated, length(messages->0->>'content') FROM agent_memory.episodes"
    ).fetchone() == (True, 10021)  # stored in full
    assert db.execute("SELECT content FROM agent_memory.memory_items").fetchone() == (
        "User prefers long walks.",
    )


async def test_failure_mid_backlog_keeps_the_batches_already_committed(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    def handler(request: dict[str, Any]) -> Reply:
        prompt = request["messages"][-1]["content"]
        if "tea 7" in prompt:
            return Reply("not json at all")
        return Reply(json.dumps([{"content": "User likes tea.", "importance": 0.5}]))

    fake_llm.reset(handler)
    settings = small_batches(llm_settings, tokens=120)
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await backlog(manager, Scope(user_id="mid"), 12)
        summary = await manager.consolidate()
    finally:
        await manager.close()
    (row,) = summary["results"]
    assert row["outcome"] == "failed" and row["batches"] >= 2
    statuses = [
        r[0]
        for r in db.execute(
            "SELECT status FROM agent_memory.consolidation_jobs ORDER BY id"
        ).fetchall()
    ]
    assert statuses[-1] == "failed" and set(statuses[:-1]) == {"completed"}
    done = db.execute("SELECT count(*) FROM agent_memory.episodes WHERE consolidated").fetchone()
    assert done is not None and 0 < done[0] < 12
    # the pending ones are exactly the failed batch and everything after it
    first_pending = db.execute(
        "SELECT min(occurred_at) FROM agent_memory.episodes WHERE NOT consolidated"
    ).fetchone()
    last_done = db.execute(
        "SELECT max(occurred_at) FROM agent_memory.episodes WHERE consolidated"
    ).fetchone()
    assert last_done is not None and first_pending is not None
    assert last_done[0] < first_pending[0]
    # the prompt is the conversation plus a bounded overhead, not the whole backlog
    assert max(len(r["messages"][-1]["content"]) for r in fake_llm.requests) < 1500
