"""remember, recall and forget in a sync LangGraph graph (``invoke``, langgraph's ToolNode) on
the real database; and bad content comes back to the model as the tool's answer, short, in
sync and async graphs alike, never as an exception that ends the run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import ToolMessage

from agent_memory import MemoryManager, Scope
from agent_memory.settings import Settings
from tests.test_memory_tools import agent_graph, last_fact_id

ALEX, BLAIR = Scope(user_id="alex"), Scope(user_id="blair")
CONFIG = {"configurable": {"user_id": "alex"}}


@pytest.fixture
def sync_manager(settings: Settings) -> Iterator[MemoryManager]:
    manager = MemoryManager.create_sync(settings=settings, migrate=False)
    yield manager
    manager.close_sync()


def said(out: dict[str, Any]) -> list[str]:
    return [str(m.content) for m in out["messages"] if isinstance(m, ToolMessage)]


def test_the_tools_run_in_a_sync_graph(
    sync_manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    sync_manager.store().put(("memories", "blair"), "home", {"content": "User lives in Oslo."})
    other = db.execute("SELECT id FROM agent_memory.memory_items").fetchone()
    assert other is not None
    script = [
        [("remember", {"content": "User prefers answers by email.", "importance": 0.8})],
        [("recall", {"query": "How does the user like to be contacted?"})],
        lambda messages: [("forget", {"fact_id": last_fact_id(messages)})],
        [("forget", {"fact_id": other[0]})],  # another scope's fact: out of reach
    ]
    out = agent_graph(sync_manager, script).invoke(
        {"messages": [("user", "Please use email from now on.")]}, CONFIG
    )
    answers = said(out)
    assert answers[0].startswith("remembered fact ") and "email" in answers[0]
    assert "User prefers answers by email." in answers[1]
    assert answers[2].startswith("forgot fact ")
    assert answers[3] == f"not forgotten: no current fact with id {other[0]}"
    rows = db.execute(
        "SELECT content, superseded_at IS NULL FROM agent_memory.memory_items ORDER BY id"
    ).fetchall()
    assert rows == [("User lives in Oslo.", True), ("User prefers answers by email.", False)]


BAD = [
    ("Erin is allergic\x00 to peanuts", "holds a NUL character"),
    ("x" * 1_000_000, "is 1000000 characters long, over the limit of 4000"),
    ("\ud83d lone", "holds a lone surrogate"),
]


def test_bad_content_is_the_tools_short_answer_in_a_sync_graph(
    sync_manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    script = [[("remember", {"content": content})] for content, _ in BAD]
    out = agent_graph(sync_manager, script).invoke({"messages": [("user", "Hi")]}, CONFIG)
    for answer, (_, named) in zip(said(out), BAD, strict=True):
        assert answer.startswith("not remembered: fact content ") and named in answer, answer
        assert len(answer) <= 300
    assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (0,)


async def test_bad_content_is_the_tools_short_answer_in_an_async_graph(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    script = [[("remember", {"content": content})] for content, _ in BAD]
    out = await agent_graph(manager, script).ainvoke({"messages": [("user", "Hi")]}, CONFIG)
    for answer, (_, named) in zip(said(out), BAD, strict=True):
        assert answer.startswith("not remembered: fact content ") and named in answer, answer
        assert len(answer) <= 300
    assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (0,)
