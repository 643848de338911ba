"""Exact provenance: a fact's sources are the episodes it came from, named by the extractor
(by their numbers in the prompt, mapped back in code) and known exactly by the offline rules;
its decay clock starts at theirs, not at the batch's newest. One batch of several
conversations each time, through the real consolidation flow."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.settings import Settings
from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
from agent_memory_flows.outcome import run_for_summary
from tests.fake_llm import FakeLLM, Reply, facts_answer

pytestmark = pytest.mark.usefixtures("prefect_harness")

ANNA = Scope("anna")
SAID = [
    (datetime(2026, 3, 2, 9, tzinfo=UTC), "I'm a nurse at St Mary's."),
    (datetime(2026, 4, 6, 9, tzinfo=UTC), "I prefer tea over coffee."),
    (datetime(2026, 5, 11, 9, tzinfo=UTC), "We use Linux at home."),
]


async def record_all(settings: Settings) -> None:
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        for at, text in SAID:
            await manager.record(ANNA, [{"role": "user", "content": text}], occurred_at=at)
    finally:
        await manager.close()


def sources(db: psycopg.Connection[Any]) -> dict[str, tuple[list[str], str]]:
    """Each current fact: the days of its source episodes, and the day its clock starts."""
    rows = db.execute(
        """SELECT m.content, array_agg(e.occurred_at::date::text ORDER BY e.occurred_at),
                  m.importance_at::date::text
           FROM agent_memory.memory_items m
           JOIN agent_memory.fact_sources s ON s.fact_id = m.id
           JOIN agent_memory.episodes e ON e.id = s.episode_id
           GROUP BY m.id"""
    ).fetchall()
    return {content: (days, clock) for content, days, clock in rows}


async def test_a_model_names_each_facts_episode_and_the_clock_is_its_own(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    fake_llm.reset(facts_answer)  # one fact per user line, naming its episode
    await record_all(llm_settings)
    summary = await run_for_summary(
        consolidation_flow, ConsolidationParams(decay_from="conversation")
    )
    assert (summary["episodes"], summary["facts_created"]) == (3, 3)
    assert "Episode 3" in fake_llm.requests[-1]["messages"][-1]["content"]  # one batch
    assert sources(db) == {
        "User said I'm a nurse at St Mary's.": (["2026-03-02"], "2026-03-02"),
        "User said I prefer tea over coffee.": (["2026-04-06"], "2026-04-06"),
        "User said We use Linux at home.": (["2026-05-11"], "2026-05-11"),
    }


async def test_what_a_model_does_not_say_comes_from_the_whole_batch(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any], caplog: Any
) -> None:
    answer = [
        {"op": "add", "content": "User works in healthcare.", "importance": 0.7},  # no episode
        {"op": "add", "content": "User likes tea.", "importance": 0.6, "episode": 9},  # none such
        {"op": "add", "content": "User runs Linux.", "importance": 0.6, "episodes": [3, "1"]},
    ]
    fake_llm.reset(lambda _request: Reply(json.dumps(answer)))
    await record_all(llm_settings)
    with caplog.at_level(logging.WARNING):
        await run_for_summary(consolidation_flow, ConsolidationParams(decay_from="conversation"))
    every = ["2026-03-02", "2026-04-06", "2026-05-11"]
    assert sources(db) == {
        "User works in healthcare.": (every, "2026-05-11"),
        "User likes tea.": (every, "2026-05-11"),
        "User runs Linux.": (["2026-03-02", "2026-05-11"], "2026-05-11"),
    }
    assert "fact 1: there is no episode 9; sources: the batch" in caplog.text


async def test_the_offline_rules_know_each_facts_episode(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    await record_all(settings)
    await run_for_summary(consolidation_flow, ConsolidationParams(decay_from="conversation"))
    assert sources(db) == {
        "User is a nurse at St Mary's.": (["2026-03-02"], "2026-03-02"),
        "User prefers tea over coffee.": (["2026-04-06"], "2026-04-06"),
        "User uses Linux at home.": (["2026-05-11"], "2026-05-11"),
    }
