"""The LangGraph nodes in real graphs: async and sync, scope from state or config, and the
seed's two-session E2E (turn 1 empty, consolidate, turn 2 sees the facts)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from agent_memory import MemoryManager
from agent_memory.settings import Settings


def agent(state: dict[str, Any]) -> dict[str, Any]:
    """A deterministic agent: answers with what it remembers."""
    facts = state.get("working_memory", {}).get("injected_facts", [])
    reply = "I remember: " + "; ".join(facts) if facts else "Nice to meet you."
    return {"messages": [AIMessage(content=reply)]}


def build(manager: MemoryManager) -> Any:
    return manager.graph(agent).compile()


@pytest.mark.usefixtures("prefect_harness")
async def test_two_sessions_remember_across_consolidation(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    graph = build(manager)
    who = {"user_id": "alex", "agent_id": "assistant"}
    turn1 = await graph.ainvoke(
        {**who, "messages": [HumanMessage("I'm a Python developer working on SAP integrations.")]}
    )
    assert turn1["working_memory"]["injected_facts"] == []
    assert turn1["working_memory"]["recorded_episode_id"] is not None
    summary = await manager.consolidate()
    assert summary["facts_created"] == 1
    turn2 = await graph.ainvoke({**who, "messages": [HumanMessage("Which language for my API?")]})
    facts = turn2["working_memory"]["injected_facts"]
    assert facts == ["User is a Python developer working on SAP integrations."]
    assert "Python developer" in turn2["messages"][-1].content
    # another user of the same agent sees none of it
    other = await graph.ainvoke(
        {"user_id": "someone-else", "agent_id": "assistant", "messages": [HumanMessage("hi")]}
    )
    assert other["working_memory"]["injected_facts"] == []
    assert db.execute("SELECT count(*) FROM agent_memory.episodes").fetchone() == (3,)


async def test_scope_comes_from_config_when_state_has_none(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    graph = build(manager)
    config = {"configurable": {"user_id": "cfg-user", "workflow_id": "wf-1"}}
    await graph.ainvoke({"messages": [HumanMessage("hello")]}, config)
    row = db.execute("SELECT user_id, agent_id, workflow_id FROM agent_memory.episodes").fetchone()
    assert row == ("cfg-user", None, "wf-1")


async def test_state_scope_wins_over_config(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    graph = build(manager)
    await graph.ainvoke(
        {"user_id": "state-user", "messages": [HumanMessage("hello")]},
        {"configurable": {"user_id": "cfg-user", "agent_id": "cfg-agent"}},
    )
    row = db.execute("SELECT user_id, agent_id FROM agent_memory.episodes").fetchone()
    assert row == ("state-user", None)


def test_sync_graph_records_and_injects(settings: Settings, db: psycopg.Connection[Any]) -> None:
    manager = MemoryManager.create_sync(settings=settings, migrate=False)
    try:
        graph = build(manager)
        out = graph.invoke({"user_id": "sync", "messages": [HumanMessage("I prefer tea.")]})
        assert out["working_memory"]["injected_facts"] == []
        assert db.execute("SELECT count(*) FROM agent_memory.episodes").fetchone() == (1,)
        db.execute(
            """INSERT INTO agent_memory.memory_items
                 (user_id, content, content_hash, importance, importance_at, half_life,
                  expires_day)
               SELECT 'sync', 'User prefers tea.', '\\x00', 0.8, now(), 13.5,
                      agent_memory.expiry(0.8, agent_memory.day_index(now()), 13.5, purge_below)
               FROM agent_memory.decay_policy"""
        )
        out = graph.invoke({"user_id": "sync", "messages": [HumanMessage("hi again")]})
        assert out["working_memory"]["injected_facts"] == ["User prefers tea."]
    finally:
        manager.close_sync()


async def test_no_messages_records_nothing(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    out = await manager.record_node.ainvoke({"user_id": "quiet", "messages": []})
    assert out == {"working_memory": {"recorded_episode_id": None, "recorded_upto": 0}}
    assert db.execute("SELECT count(*) FROM agent_memory.episodes").fetchone() == (0,)


async def test_with_a_checkpointer_each_turn_records_only_its_new_messages(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    app = manager.graph(agent).compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    await app.ainvoke({"user_id": "threaded", "messages": [HumanMessage("first")]}, config)
    out = await app.ainvoke({"messages": [HumanMessage("second")]}, config)
    assert len(out["messages"]) == 4  # the thread holds both turns
    rows = db.execute(
        "SELECT user_id, jsonb_array_length(messages), messages->0->>'content' "
        "FROM agent_memory.episodes ORDER BY id"
    ).fetchall()
    assert rows == [("threaded", 2, "first"), ("threaded", 2, "second")]
