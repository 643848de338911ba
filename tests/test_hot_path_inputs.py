"""Bad input on the hot path never raises: whatever the latest user message is, inject gives a
sensible ranking (relevance where there is something to match) or the no-question fallback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from agent_memory import MemoryManager
from agent_memory.db import fusion
from agent_memory.db import recall as recall_repo
from agent_memory.decay import today
from agent_memory.models import Scope
from agent_memory.settings import MemorySettings, Settings
from benchmarks.retrieval import load_facts
from tests.vectors import embed_all

ALEX = Scope("alex", "assistant")
FACTS = {
    "User works at a logistics company.": 0.9,
    "User's daughter plays the violin.": 0.4,
    "User prefers tea over coffee.": 0.5,
}
VIOLIN = "User's daughter plays the violin."


@pytest.fixture
async def stored(
    settings: Settings, db: psycopg.Connection[Any]
) -> AsyncIterator[dict[str, MemoryManager]]:
    """The facts stored and embedded with the bundled model; a manager for each ranking."""
    load_facts(db, ALEX, [{"content": c, "importance": i} for c, i in FACTS.items()])
    managers = {}
    for ranking in ("hybrid", "text", "vector", "importance"):
        memory = MemorySettings(**{**settings.memory.model_dump(), "inject_ranking": ranking})
        managers[ranking] = await MemoryManager.create(
            settings=settings.model_copy(update={"memory": memory}), migrate=False
        )
    assert await embed_all(managers["hybrid"]) == len(FACTS)
    yield managers
    for manager in managers.values():
        await manager.close()


NOTHING_TO_MATCH = [
    "",
    "   \n\t ",
    "the and of to a",  # stop words only: an empty full-text query
    "?!... ;-) ***",  # punctuation only
    "\x00\x00",  # NUL characters, which PostgreSQL text cannot hold
    "\ud800 lone surrogate",
]


@pytest.mark.parametrize("question", NOTHING_TO_MATCH)
async def test_a_question_with_nothing_to_match_falls_back_to_the_priors(
    stored: dict[str, MemoryManager], question: str
) -> None:
    for ranking, manager in stored.items():
        frame = await manager.inject(ALEX, query=question)
        assert len(frame.injected_facts) == len(FACTS), ranking
        sync = manager.inject_sync(ALEX, query=question)
        assert sync.injected_facts == frame.injected_facts, ranking
    # nothing to search for at all: the prior orders (importance first, all said today)
    frame = await stored["text"].inject(ALEX, query="the and of to a")
    assert frame.injected_facts[0] == "User works at a logistics company."


@pytest.mark.parametrize(
    "question",
    [
        "violin " * 150_000,  # 1 MB: its start is what is matched
        "violin\x00 lessons?",
        "Скрипка? violin 小提琴 🎻",  # words the English stemmer does not know, and emoji
        "VIOLIN!!!",
    ],
)
async def test_an_odd_question_still_finds_what_it_asks_about(
    stored: dict[str, MemoryManager], question: str
) -> None:
    for ranking in ("hybrid", "text"):
        frame = await stored[ranking].inject(ALEX, query=question)
        assert frame.injected_facts[0] == VIOLIN, ranking
        assert frame.ranking == ranking


async def test_a_latest_message_that_is_not_text_is_no_question(
    stored: dict[str, MemoryManager],
) -> None:
    manager = stored["hybrid"]

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [AIMessage("ok")]}

    app = manager.graph(agent).compile()
    image_only = HumanMessage(
        content=[{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    )
    out = await app.ainvoke({"user_id": "alex", "agent_id": "assistant", "messages": [image_only]})
    assert out["working_memory"]["ranking"] == "priors"
    assert len(out["working_memory"]["injected_facts"]) == len(FACTS)
    mixed = HumanMessage(
        content=[
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "Is this a good violin?"},
        ]
    )
    out = await app.ainvoke({"user_id": "alex", "agent_id": "assistant", "messages": [mixed]})
    assert out["working_memory"]["injected_facts"][0] == VIOLIN


async def test_a_question_vector_of_another_dimension_ranks_by_text(
    stored: dict[str, MemoryManager], db: psycopg.Connection[Any]
) -> None:
    params = fusion.ranked_params(
        ALEX, "violin", on=today(), min_importance=0.0, limit=5, candidates=100
    )
    params["model"] = stored["hybrid"].settings.embedding.active_model
    rows = recall_repo.ranked_sync(db, params, [1.0] * 8)  # stored vectors have 256
    assert rows[0][1] == VIOLIN
    assert len(rows) == len(FACTS)
