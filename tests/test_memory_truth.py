"""Memory that stays true: operations (add / update / delete) against the scope's current
facts, superseded facts kept as history and never injected, through a real LLM call and
through the offline extractor."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.extraction.parse import parse_operations
from agent_memory.models import KnownFact
from agent_memory.settings import Settings
from tests.fake_llm import FakeLLM, Reply

pytestmark = pytest.mark.usefixtures("prefect_harness")


def say(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_offline_switch_updates_and_no_longer_invalidates(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    scope = Scope(user_id="truth")
    await manager.record(scope, say("We use PostgreSQL for everything. I prefer async code."))
    await manager.consolidate()
    await manager.record(
        scope, say("We switched from PostgreSQL to MySQL. I no longer prefer async code.")
    )
    summary = await manager.consolidate()
    assert summary["results"][0]["facts_updated"] == 1
    assert summary["results"][0]["facts_invalidated"] == 1
    assert (await manager.inject(scope)).injected_facts == ["User uses MySQL for everything."]
    history = {f.content: f for f in await manager.facts(scope, history=True)}
    new = history["User uses MySQL for everything."]
    assert history["User uses PostgreSQL for everything."].superseded_by == new.id
    old_async = history["User prefers async code."]
    assert old_async.superseded_at is not None and old_async.superseded_by is None
    assert db.execute(
        "SELECT facts_updated, facts_invalidated FROM agent_memory."
        "consolidation_jobs ORDER BY id DESC LIMIT 1"
    ).fetchone() == (1, 1)
    # said again: true again
    await manager.record(scope, say("I prefer async code."))
    await manager.consolidate()
    assert "User prefers async code." in (await manager.inject(scope)).injected_facts


async def test_llm_operations_use_short_ids_mapped_back(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    def handler(request: dict[str, Any]) -> Reply:
        prompt = request["messages"][-1]["content"]
        numbers = {
            m[2]: int(m[1]) for m in re.finditer(r"\[(\d+)\] (.+?) \(\w+, importance", prompt)
        }
        if not numbers:
            return Reply(
                json.dumps(
                    [
                        {"content": "User lives in Berlin.", "importance": 0.6},
                        {"content": "User has a cat.", "importance": 0.5},
                    ]
                )
            )
        return Reply(
            json.dumps(
                [
                    {
                        "op": "update",
                        "id": numbers["User lives in Berlin."],
                        "content": "User lives in Munich.",
                    },
                    {"op": "delete", "id": numbers["User has a cat."]},
                    {"op": "delete", "id": 999},  # invented: must not touch anything
                    {"op": "none"},
                ]
            )
        )

    fake_llm.reset(handler)
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        scope = Scope(user_id="mover")
        await manager.record(scope, say("I live in Berlin and I have a cat."))
        await manager.consolidate()
        ids_before = {f.content: f.id for f in await manager.facts(scope)}
        await manager.record(scope, say("I moved to Munich; the cat stayed with my sister."))
        summary = await manager.consolidate()
        frame = await manager.inject(scope)
    finally:
        await manager.close()
    assert frame.injected_facts == ["User lives in Munich."]
    assert frame.importances == [pytest.approx(0.6)]  # an update keeps the importance it had
    (result,) = summary["results"]
    assert (result["facts_created"], result["facts_updated"], result["facts_invalidated"]) == (
        1,
        1,
        1,
    )
    prompt = fake_llm.requests[-1]["messages"][-1]["content"]
    shown = {int(n) for n in re.findall(r"^\[(\d+)\]", prompt, re.M)}
    assert shown == {1, 2}  # the model sees short numbers, not the facts' ids
    assert ids_before.keys() == {"User lives in Berlin.", "User has a cat."}
    rows = dict(
        db.execute(
            "SELECT content, superseded_by IS NOT NULL FROM agent_memory."
            "memory_items WHERE superseded_at IS NOT NULL"
        ).fetchall()
    )
    assert rows == {"User lives in Berlin.": True, "User has a cat.": False}


def test_parse_operations_maps_numbers_and_drops_inventions() -> None:
    known = [
        KnownFact(1, 501, "User lives in Berlin.", 0.6),
        KnownFact(2, 502, "User has a cat.", 0.5),
    ]
    ops, repairs = parse_operations(
        json.dumps(
            [
                {"op": "UPDATE", "id": "1", "content": "User lives in Munich."},
                {"event": "DELETE", "id": 2},
                {"op": "delete", "id": 7},
                {"op": "update", "id": "one", "content": "x"},
                {"content": "User likes jazz.", "importance": 0.4},
                {"op": "NONE"},
            ]
        ),
        known,
    )
    assert [(o.op, o.target, o.content) for o in ops] == [
        ("update", 501, "User lives in Munich."),
        ("delete", 502, None),
        ("add", None, "User likes jazz."),
    ]
    assert ops[0].importance == 0.6
    assert any("fact 7" in r for r in repairs) and any("'one'" in r for r in repairs)
    # an operation not understood is dropped with a note; the others stand
    ops, repairs = parse_operations(
        '[{"op": "merge", "content": "x"}, {"content": "User likes jazz."}]', known
    )
    assert [(o.op, o.content) for o in ops] == [("add", "User likes jazz.")]
    assert "fact 0: dropped, its operation 'merge' is not add/update/delete/summary" in repairs
