"""Structured answers: a model that litellm says takes a response schema is asked for its
operations with ``response_format`` holding the JSON schema; any other model's answer is read
by the tolerant parser as before. Both over real HTTP to the loopback server, through the
consolidation flow. One operation the parser does not understand is dropped with a note,
never the whole answer."""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.extraction.prompt import OPERATIONS_FORMAT
from agent_memory.settings import LLMSettings, Settings, use_settings
from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
from agent_memory_flows.outcome import run_for_summary
from tests.fake_llm import FakeLLM, Reply

pytestmark = pytest.mark.usefixtures("prefect_harness")

BEA = Scope("bea")


def nulls(**given: Any) -> dict[str, Any]:
    """An operation as a strict schema has it: every key, null where it does not apply."""
    return {"op": "add", "id": None, "content": None, "importance": None, "episode": None,
            "summary": None, **given}  # fmt: skip


async def consolidate(settings: Settings, model: str, fake_llm: FakeLLM) -> dict[str, Any]:
    tuned = settings.model_copy(
        update={
            "llm": LLMSettings(
                model=model, api_base=fake_llm.api_base, api_key="sk-test", timeout=5
            )
        }
    )
    use_settings(tuned)
    manager = await MemoryManager.create(settings=tuned, migrate=False)
    try:
        await manager.record(BEA, [{"role": "user", "content": "I drink green tea daily."}])
        return await run_for_summary(consolidation_flow, ConsolidationParams())
    finally:
        await manager.close()
        use_settings(settings)


def facts(db: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in db.execute("SELECT content FROM agent_memory.memory_items ORDER BY 1")]


async def test_a_model_that_takes_a_schema_is_asked_for_one_and_its_answer_is_read(
    settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    answer = {
        "operations": [
            nulls(content="User drinks green tea daily.", importance=0.7, episode=1),
            nulls(op="summary", episode=1, summary="User talked about their tea."),
        ]
    }
    fake_llm.reset(lambda _request: Reply(json.dumps(answer)))
    summary = await consolidate(settings, "openai/gpt-4o-mini", fake_llm)
    assert (summary["completed"], summary["failed"]) == (1, 0)
    (request,) = fake_llm.requests
    assert request["response_format"] == OPERATIONS_FORMAT
    assert facts(db) == ["User drinks green tea daily."]
    assert db.execute("SELECT summary FROM agent_memory.episodes").fetchone() == (
        "User talked about their tea.",
    )


async def test_any_other_model_is_read_by_the_tolerant_parser_and_keeps_what_it_understands(
    settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any], caplog: Any
) -> None:
    answer = (
        "Here you go:\n```json\n"
        + json.dumps(
            [
                {"op": "merge", "content": "User merges things."},  # not an operation
                {"content": "User drinks green tea daily.", "importance": 0.7, "episode": 1},
                {"op": "add", "content": "User likes mornings.", "importance": "high"},
            ]
        )
        + "\n```"
    )
    fake_llm.reset(lambda _request: Reply(answer))
    with caplog.at_level(logging.WARNING):
        summary = await consolidate(settings, "openai/test-model", fake_llm)
    assert (summary["completed"], summary["failed"]) == (1, 0)
    (request,) = fake_llm.requests
    assert "response_format" not in request
    assert facts(db) == ["User drinks green tea daily.", "User likes mornings."]
    # the repair in the project's words; the value the model gave, by its size only (Prefect
    # keeps the log, and a model's words may quote the conversation)
    assert "fact 0: dropped, its operation (5 characters) is not add/update/delete/summary" in (
        caplog.text
    )
    assert "merge" not in caplog.text
