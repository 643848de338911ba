"""Memory as tools an agent calls: ``remember``, ``recall`` and ``forget``, LangChain tools whose
scope comes from the run's config (``config["configurable"]``'s ``user_id``, ``agent_id`` and
``workflow_id``), never from the model's arguments, so an agent cannot reach another scope.

Each tool has a sync face (``func``) and an async one (``coroutine``) over the same statements
(`agent_memory.db.fact_edits`), so they run in sync graphs (``invoke``) and async ones
(``ainvoke``) alike. What the tool cannot do (a fact with no words, a NUL character, too long;
an unknown id) comes back to the model as the tool's answer, ``not remembered: ...``, in a few
hundred characters at most, never as an exception that ends the agent's run.

Example::

    tools = manager.tools()
    graph.add_node("tools", ToolNode(tools))          # langgraph.prebuilt
    model = model.bind_tools(tools)
    app.invoke(state, {"configurable": {"user_id": "alex"}})   # or await app.ainvoke(...)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool

from agent_memory.backend import Backend
from agent_memory.db import fact_edits
from agent_memory.errors import AgentMemoryError, UnknownFactError
from agent_memory.fact_text import fact_of
from agent_memory.graph.state import scope_from
from agent_memory.inject import Injector
from agent_memory.models import Fact, Scope, WorkingMemoryFrame

# the most of an error the model is shown
MAX_ERROR_CHARS = 300


def _scope(config: RunnableConfig) -> Scope:
    return scope_from({}, config)


def _refused(verb: str, exc: BaseException) -> str:
    said = f"not {verb}: {exc}"
    return said if len(said) <= MAX_ERROR_CHARS else said[: MAX_ERROR_CHARS - 3] + "..."


def _recalled(frame: WorkingMemoryFrame) -> str:
    lines = [f"[{i}] {c}" for i, c in zip(frame.fact_ids, frame.injected_facts, strict=True)]
    lines += [f"(said {s.occurred_at:%Y-%m-%d}) {s.content}" for s in frame.snippets]
    return "\n".join(lines) or "nothing relevant is remembered"


def _forgotten(fact_id: int, content: str | None) -> str:
    if content is None:  # another scope's fact is as unknown as a missing one
        return _refused("forgotten", UnknownFactError(f"no current fact with id {fact_id}"))
    return f"forgot fact {fact_id}: {content}"


def memory_tools(backend: Backend, injector: Injector) -> list[BaseTool]:
    """The three tools over ``backend``'s pools, recalling with ``injector``, for sync and
    async graphs (see the module); ``manager.tools()`` gives them."""

    def levels(config: RunnableConfig) -> tuple[Scope, ...]:
        """What ``forget`` may invalidate: the scope's facts and those of the levels it reads,
        each at its own level."""
        return _scope(config).levels(backend.settings.memory.share)

    def checked(content: str, importance: float) -> Fact:
        return fact_of(content, importance, "general")

    async def aremember(content: str, config: RunnableConfig, importance: float = 0.5) -> str:
        try:
            fact = checked(content, importance)
            pool = await backend.apool()
            async with pool.connection() as conn:
                fact_id = await fact_edits.add(conn, _scope(config), fact, datetime.now(UTC))
        except AgentMemoryError as exc:
            return _refused("remembered", exc)
        return f"remembered fact {fact_id}: {fact.content}"

    def remember(content: str, config: RunnableConfig, importance: float = 0.5) -> str:
        """Remember a fact about the user for later sessions, in one short sentence in the
        third person (for example "User prefers answers by email."). importance: 0 to 1."""
        try:
            fact = checked(content, importance)
            with backend.spool().connection() as conn:
                fact_id = fact_edits.add_sync(conn, _scope(config), fact, datetime.now(UTC))
        except AgentMemoryError as exc:
            return _refused("remembered", exc)
        return f"remembered fact {fact_id}: {fact.content}"

    async def arecall(query: str, config: RunnableConfig) -> str:
        try:
            return _recalled(await injector.inject(_scope(config), query=query))
        except AgentMemoryError as exc:
            return _refused("recalled", exc)

    def recall(query: str, config: RunnableConfig) -> str:
        """Recall what memory knows that is relevant to query: facts (with their ids) and past
        messages."""
        try:
            return _recalled(injector.inject_sync(_scope(config), query=query))
        except AgentMemoryError as exc:
            return _refused("recalled", exc)

    async def aforget(fact_id: int, config: RunnableConfig) -> str:
        pool = await backend.apool()
        async with pool.connection() as conn:
            return _forgotten(fact_id, await fact_edits.forget(conn, levels(config), fact_id))

    def forget(fact_id: int, config: RunnableConfig) -> str:
        """Forget a fact that is no longer true, by the id recall gave it (a fact about the
        user shared by their other agents is forgotten for them too)."""
        with backend.spool().connection() as conn:
            return _forgotten(fact_id, fact_edits.forget_sync(conn, levels(config), fact_id))

    return [
        _tool(remember, aremember),
        _tool(recall, arecall),
        _tool(forget, aforget),
    ]


def _tool(func: Callable[..., str], coroutine: Callable[..., Awaitable[str]]) -> BaseTool:
    """A tool named after ``func`` and described by its docstring on one line: the model reads
    the description, and a docstring's line breaks and indentation are not words."""
    description = " ".join((func.__doc__ or "").split())
    return StructuredTool.from_function(
        func=func, coroutine=coroutine, name=func.__name__, description=description
    )
