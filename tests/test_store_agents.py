"""AgentMemoryStore in real agents: LangMem's memory tools (create_manage_memory_tool,
create_search_memory_tool) called by a scripted chat model inside LangChain's create_agent
loop, and get_store() in a LangGraph node. What the tools write are facts inject gives back."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.config import get_store
from langgraph.graph import END, START, MessagesState, StateGraph
from langmem import create_manage_memory_tool, create_search_memory_tool

from agent_memory import MemoryManager, Scope
from agent_memory.settings import Settings
from agent_memory.store import AgentMemoryStore

Turn = Callable[[list[BaseMessage]], AIMessage]


class ScriptedModel(BaseChatModel):
    """A chat model that plays ``script``: its n-th answer is ``script[n](messages)``."""

    script: list[Any]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        message = self.script[turn](messages) if turn < len(self.script) else AIMessage("Done.")
        return ChatResult(generations=[ChatGeneration(message=message)])


def call(name: str, **args: Any) -> Turn:
    return lambda _: AIMessage(
        "", tool_calls=[{"name": name, "args": args, "id": f"call-{name}", "type": "tool_call"}]
    )


def said(messages: list[BaseMessage]) -> str:
    return str([m for m in messages if isinstance(m, ToolMessage)][-1].content)


def memory_id(messages: list[BaseMessage]) -> str:
    match = re.search(r"\"key\":\"([0-9a-f-]{36})\"", said(messages))
    assert match, said(messages)
    return match.group(1)


@pytest.fixture
def store(settings: Settings) -> Iterator[AgentMemoryStore]:
    with AgentMemoryStore.from_conn_string(settings=settings) as s:
        yield s


TOOLS_NS = ("memories", "{langgraph_user_id}")


def agent(store: AgentMemoryStore, script: list[Any]) -> Any:
    tools = [create_manage_memory_tool(TOOLS_NS), create_search_memory_tool(TOOLS_NS)]
    return create_agent(ScriptedModel(script=script), tools=tools, store=store)


def test_langmem_tools_in_an_agent_write_facts_inject_gives_back(
    store: AgentMemoryStore, db: psycopg.Connection[Any]
) -> None:
    config = {"configurable": {"langgraph_user_id": "alice"}}
    create = agent(store, [call("manage_memory", content="Alice's favourite colour is teal")])
    create.invoke({"messages": [("user", "my favourite colour is teal")]}, config)
    frame = store.manager.inject_sync(Scope(user_id="alice"), query="favourite colour?")
    assert frame.injected_facts == ["Alice's favourite colour is teal"]

    found: list[str] = []

    def answer(messages: list[BaseMessage]) -> AIMessage:
        found.append(said(messages))
        return AIMessage("Teal.")

    search = agent(store, [call("search_memory", query="what colour does she like"), answer])
    search.invoke({"messages": [("user", "what is my favourite colour?")]}, config)
    assert "Alice's favourite colour is teal" in found[0]

    # the model updates the memory by its id, then deletes it; history stays in the facts
    def update(messages: list[BaseMessage]) -> AIMessage:
        key = memory_id(messages)
        return call("manage_memory", action="update", id=key, content="Alice now likes amber")(
            messages
        )

    def delete(messages: list[BaseMessage]) -> AIMessage:
        return call("manage_memory", action="delete", id=memory_id(messages))(messages)

    agent(store, [call("search_memory", query="colour"), update]).invoke(
        {"messages": [("user", "I like amber now")]}, config
    )
    assert store.manager.inject_sync(Scope(user_id="alice")).injected_facts == [
        "Alice now likes amber"
    ]
    agent(store, [call("search_memory", query="amber"), delete]).invoke(
        {"messages": [("user", "forget my colour")]}, config
    )
    assert store.search(("memories", "alice")) == []
    assert db.execute(
        "SELECT count(*) FROM agent_memory.memory_items WHERE user_id = 'alice'"
    ).fetchone() == (2,)  # both wordings kept, superseded
    # another user's run sees nothing of alice's
    other: list[str] = []
    agent(
        store,
        [call("search_memory", query="colour"), lambda m: other.append(said(m)) or AIMessage("?")],
    ).invoke(  # type: ignore[func-returns-value]
        {"messages": [("user", "what do you know?")]},
        {"configurable": {"langgraph_user_id": "bob"}},
    )
    assert other == ["[]"]


async def test_langmem_tools_run_async_on_the_store(settings: Settings) -> None:
    async with AgentMemoryStore.afrom_conn_string(settings=settings) as store:
        config = {"configurable": {"langgraph_user_id": "carol"}}
        found: list[str] = []
        script = [
            call("manage_memory", content="Carol is learning Portuguese"),
            call("search_memory", query="which language is carol learning"),
            lambda m: found.append(said(m)) or AIMessage("Portuguese."),
        ]
        await agent(store, script).ainvoke({"messages": [("user", "hi")]}, config)
        assert "Carol is learning Portuguese" in found[0]
        facts = await store.manager.facts(Scope(user_id="carol"))
        assert [f.content for f in facts] == ["Carol is learning Portuguese"]


async def test_get_store_in_a_node_reads_what_memory_holds(
    manager: MemoryManager,
) -> None:
    await manager.add_fact(Scope(user_id="dana"), "Dana is vegetarian")

    def plan_dinner(state: MessagesState) -> dict[str, Any]:
        found = get_store().search(("memories", "dana"), query="what does dana eat?", limit=3)
        return {"messages": [AIMessage(f"Keep in mind: {found[0].value['content']}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("plan", plan_dinner)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", END)
    graph = builder.compile(store=manager.store())
    result = await graph.ainvoke({"messages": [("user", "plan dinner")]})
    assert result["messages"][-1].content == "Keep in mind: Dana is vegetarian"
