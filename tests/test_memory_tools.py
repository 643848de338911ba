"""remember, recall and forget as tools in a real LangGraph agent loop (a scripted model calls
them through langgraph's ToolNode); their scope comes from the run's config, so the model cannot
reach another scope's facts."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from agent_memory import MemoryManager, Scope

ALEX, BLAIR = Scope(user_id="alex"), Scope(user_id="blair")


def scripted_agent(script: list[Any]) -> Any:
    """A model that makes the calls of ``script`` in turn (each a list of (tool, args), or a
    callable of the messages so far returning one), then answers."""

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        if turn >= len(script):
            return {"messages": [AIMessage("Done.")]}
        calls = script[turn](state["messages"]) if callable(script[turn]) else script[turn]
        tool_calls = [
            {"name": name, "args": args, "id": f"call-{turn}-{n}", "type": "tool_call"}
            for n, (name, args) in enumerate(calls)
        ]
        return {"messages": [AIMessage("", tool_calls=tool_calls)]}

    return agent


def agent_graph(manager: MemoryManager, script: list[Any]) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", scripted_agent(script))
    builder.add_node("tools", ToolNode(manager.tools()))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges(
        "agent", lambda s: "tools" if s["messages"][-1].tool_calls else END
    )
    builder.add_edge("tools", "agent")
    return builder.compile()


def last_fact_id(messages: list[Any]) -> int:
    said = [m.content for m in messages if isinstance(m, ToolMessage)][-1]
    match = re.search(r"\[(\d+)\]", said)
    assert match, said
    return int(match.group(1))


async def test_an_agent_remembers_recalls_and_forgets_in_its_own_scope(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    other = await manager.add_fact(BLAIR, "User lives in Oslo.")
    script = [
        [("remember", {"content": "User prefers answers by email.", "importance": 0.8})],
        [("recall", {"query": "How does the user like to be contacted?"})],
        lambda messages: [("forget", {"fact_id": last_fact_id(messages)})],
        [("forget", {"fact_id": other.id})],  # another scope's fact: out of reach
    ]
    out = await agent_graph(manager, script).ainvoke(
        {"messages": [("user", "Please use email from now on.")]},
        {"configurable": {"user_id": "alex"}},
    )
    said = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert said[0].startswith("remembered fact ") and "email" in said[0]
    assert "User prefers answers by email." in said[1]
    assert said[2].startswith("forgot fact ")
    assert said[3] == f"not forgotten: no current fact with id {other.id}"
    assert await manager.facts(ALEX) == []
    assert len(await manager.facts(ALEX, history=True)) == 1
    assert [f.content for f in await manager.facts(BLAIR)] == ["User lives in Oslo."]


async def test_a_bad_fact_is_refused_to_the_model_by_name(manager: MemoryManager) -> None:
    script = [[("remember", {"content": "", "importance": 0.5})]]
    out = await agent_graph(manager, script).ainvoke(
        {"messages": [("user", "Remember nothing.")]}, {"configurable": {"user_id": "alex"}}
    )
    said = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert said == ["not remembered: fact content '' is empty; a fact needs words"]
    assert await manager.facts(ALEX) == []
