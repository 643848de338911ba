"""Contradictions: when a later conversation changes a fact (a new job, a move, a new habit),
inject gives the current value and not the superseded one, whether the change comes in a
later batch or in the same one, from a model's operations or from the offline rules; and the
evaluation harness measures it on the built-in set."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agent_memory import MemoryManager, Scope
from agent_memory.decay import today
from agent_memory.extraction.offline import operations_from_text
from agent_memory.extraction.parse import parse_operations
from agent_memory.models import KnownFact
from agent_memory.settings import LLMSettings, Settings
from benchmarks import recall
from tests.fake_llm import FakeLLM

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

CHANGES = [
    (
        "I work as a nurse at St Mary's.",
        "Big news: I just started a new role as a paramedic at City Ambulance!",
        "Where do I work now?",
        "User works as a paramedic at City Ambulance.",
        "User works as a nurse at St Mary's.",
    ),
    (
        "We rent a small flat in Porto.",
        "We finally moved to Lisbon last week, the boxes are everywhere.",
        "Which city do I live in now?",
        "User lives in Lisbon.",
        "User rents a small flat in Porto.",
    ),
    (
        "My usual order is a flat white every morning.",
        "These days I've switched to green tea instead of my old order.",
        "What is my usual order these days?",
        "User has switched to green tea instead of their old order.",
        "User's usual order is a flat white every morning.",
    ),
]


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("same_batch", [True, False], ids=["one batch", "two batches"])
async def test_the_offline_rules_supersede_what_changed(
    manager: MemoryManager, same_batch: bool
) -> None:
    scope = Scope("changer")
    for n, (before, *_rest) in enumerate(CHANGES):
        await manager.record(scope, [HumanMessage(before)], occurred_at=START + timedelta(n))
    if not same_batch:
        await manager.consolidate()
    for n, (_, after, *_rest) in enumerate(CHANGES):
        await manager.record(scope, [HumanMessage(after)], occurred_at=START + timedelta(30 + n))
    await manager.consolidate()
    current = {f.content for f in await manager.facts(scope)}
    for n, (_, _, question, now, then) in enumerate(CHANGES):
        assert now in current and then not in current, (now, current)
        frame = await manager.inject(scope, query=question)
        assert now in frame.injected_facts and then not in frame.injected_facts, question
        # what it was stays in the history, until the conversation that changed it
        (old,) = [f for f in await manager.facts(scope, history=True) if f.content == then]
        assert old.valid_to == START + timedelta(30 + n)


@pytest.mark.usefixtures("prefect_harness")
async def test_a_new_job_keeps_the_half_life_of_the_job_it_replaces(manager: MemoryManager) -> None:
    """The offline rules' new job is who the user is, like the job it replaces, not an event:
    weeks later it is still known, while an event said with it has faded and been purged."""
    scope = Scope("mover")
    await manager.record(
        scope, [HumanMessage("I work as a nurse at St Mary's.")], occurred_at=START
    )
    await manager.consolidate()
    await manager.record(
        scope,
        [HumanMessage("Big news: I just started a new role as a paramedic at City Ambulance!"),
         HumanMessage("We adopted a kitten.")],
        occurred_at=START + timedelta(30),
    )  # fmt: skip
    await manager.consolidate()
    kinds = {f.content: f.kind for f in await manager.facts(scope)}
    assert kinds["User works as a paramedic at City Ambulance."] == "identity", kinds
    assert kinds["User adopted a kitten."] == "event"
    later = today() + timedelta(70)  # facts fade from when they were consolidated
    await manager.decay(scope, as_of=later)
    kept = {f.content for f in await manager.facts(scope, on=later)}
    assert "User works as a paramedic at City Ambulance." in kept
    assert "User adopted a kitten." not in kept  # a 14-day half-life, 70 days on


def test_a_switch_with_nothing_to_replace_adds_nothing_and_a_car_is_not_a_home() -> None:
    # "instead of" something memory does not hold: nothing to update, and no fact made of it
    assert operations_from_text("These days I've switched to green tea instead of coffee.") == []
    known = [KnownFact(1, 7, "User rents a small flat in Porto.", 0.8, "identity")]
    (op,) = operations_from_text("We rent a car in Spain.", known)
    assert (op.op, op.content) == ("add", "User rents a car in Spain.")


def test_a_model_may_replace_a_fact_it_adds_in_the_same_answer() -> None:
    ops, repairs = parse_operations(
        """[{"op": "add", "content": "User lives in Paris.", "episode": 1, "importance": 0.8},
            {"op": "update", "replaces": "User lives in Paris.", "content": "User lives in Lyon.",
             "importance": 0.8, "episode": 2},
            {"op": "delete", "replaces": "User has a cat.", "episode": 2},
            {"op": "update", "replaces": 42, "content": "User is tall.", "importance": 0.5}]""",
        episodes=2,
    )
    assert [(o.op, o.target, o.replaces, o.sources) for o in ops] == [
        ("add", None, None, [1]),
        ("update", None, "User lives in Paris.", [2]),
        ("delete", None, "User has a cat.", [2]),
    ]
    assert repairs == [
        "fact 3: 'replaces' 42 is not a fact's content; ignored",
        "fact 3: dropped, its id None is not a number",
    ]


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("extractor", ["oracle", "offline"])
async def test_on_the_evaluation_set_inject_gives_the_current_answer_not_the_old_one(
    settings: Settings, fake_llm: FakeLLM, tmp_path: Path, extractor: str
) -> None:
    conversations = recall.read_dataset(None)[:2]
    if extractor == "oracle":
        fake_llm.reset(recall.oracle(conversations))
        settings = settings.model_copy(
            update={
                "llm": LLMSettings(model="openai/oracle", api_base=fake_llm.api_base, api_key="x")
            }
        )
    result: dict[str, Any] = await recall.evaluate(
        settings, conversations, "facts", tmp_path, rankings={"default": {}}
    )
    changed = result["rankings"]["default"]["changed_answers"]
    assert changed["questions"] == sum(
        1 for c in conversations for q in c["questions"] if q.get("superseded")
    )
    assert changed["stale"] == 0.0  # no superseded value is ever given as a fact
    assert changed["current_not_stale"] >= 0.95, changed
    # a question about when is answered with the date of the conversation that said it
    temporal = result["rankings"]["default"]["by_category"]["temporal"]
    assert temporal["answer_fact_dated"] == 1.0, temporal
