"""Memory as tools an agent calls: ``remember``, ``recall`` and ``forget``, LangChain tools whose
scope comes from the run's config (``config["configurable"]``'s ``user_id``, ``agent_id`` and
``workflow_id``), never from the model's arguments, so an agent cannot reach another scope.

Example::

    tools = manager.tools()
    graph.add_node("tools", ToolNode(tools))          # langgraph.prebuilt
    model = model.bind_tools(tools)
    await app.ainvoke(state, {"configurable": {"user_id": "alex"}})
"""

from typing import TYPE_CHECKING

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool

from agent_memory.errors import AgentMemoryError, UnknownFactError
from agent_memory.graph.state import scope_from
from agent_memory.models import Scope

if TYPE_CHECKING:
    from agent_memory.manager import MemoryManager


def _scope(config: RunnableConfig) -> Scope:
    return scope_from({}, config)


def memory_tools(manager: "MemoryManager") -> list[BaseTool]:
    """The three tools over ``manager`` (async: for ``ainvoke`` and async graphs)."""

    async def remember(content: str, config: RunnableConfig, importance: float = 0.5) -> str:
        """Remember a fact about the user for later sessions, in one short sentence in the
        third person (for example "User prefers answers by email."). importance: 0 to 1."""
        try:
            fact = await manager.add_fact(_scope(config), content, importance=importance)
        except AgentMemoryError as exc:
            return f"not remembered: {exc}"
        return f"remembered fact {fact.id}: {fact.content}"

    async def recall(query: str, config: RunnableConfig) -> str:
        """Recall what memory knows that is relevant to query: facts (with their ids) and past
        messages."""
        frame = await manager.inject(_scope(config), query=query)
        lines = [f"[{i}] {c}" for i, c in zip(frame.fact_ids, frame.injected_facts, strict=True)]
        lines += [f"(said {s.occurred_at:%Y-%m-%d}) {s.content}" for s in frame.snippets]
        return "\n".join(lines) or "nothing relevant is remembered"

    async def forget(fact_id: int, config: RunnableConfig) -> str:
        """Forget a fact that is no longer true, by the id recall gave it."""
        scope = _scope(config)
        known = {f.id for f in await manager.facts(scope)}
        if fact_id not in known:  # another scope's fact is as unknown as a missing one
            return f"not forgotten: {UnknownFactError(f'no current fact with id {fact_id}')}"
        fact = await manager.forget_fact(fact_id)
        return f"forgot fact {fact.id}: {fact.content}"

    return [
        StructuredTool.from_function(coroutine=remember, name="remember"),
        StructuredTool.from_function(coroutine=recall, name="recall"),
        StructuredTool.from_function(coroutine=forget, name="forget"),
    ]
