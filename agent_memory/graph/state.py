"""What the two nodes read from and write to a graph's state.

``inject_memory`` puts a `agent_memory.models.WorkingMemoryFrame` in
``state["working_memory"]``; ``record_memory`` stores ``state["messages"]`` as one episode.
Both take the scope from the state's ``user_id`` / ``agent_id`` / ``workflow_id`` keys, or from
``config["configurable"]`` when the state has none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph

from agent_memory.models import SCOPE_FIELDS, Scope


class MemoryState(MessagesState, total=False):
    """A ready-made state schema: LangGraph's ``MessagesState`` plus the memory keys."""

    user_id: str | None
    agent_id: str | None
    workflow_id: str | None
    working_memory: dict[str, Any]


def scope_from(state: Mapping[str, Any], config: RunnableConfig | None) -> Scope:
    """The scope of a node call: from the state's keys, else ``config["configurable"]``."""
    if any(state.get(name) is not None for name in SCOPE_FIELDS):
        return Scope.from_mapping(state)
    configurable = (config or {}).get("configurable") or {}
    return Scope.from_mapping(configurable)


def latest_messages(state: Mapping[str, Any]) -> list[Any]:
    messages = state.get("messages") or []
    if not isinstance(messages, list | tuple):
        from agent_memory.errors import InvalidMessageError

        raise InvalidMessageError(
            f"state['messages'] is a {type(messages).__name__}, expected a list of messages"
        )
    return list(messages)


def latest_user_text(state: Mapping[str, Any]) -> str | None:
    """The text of the latest user message in the state (what relevance is measured against)."""
    from langchain_core.messages import BaseMessage

    from agent_memory.messages import message_to_json, role_and_text

    for message in reversed(latest_messages(state)):
        if isinstance(message, BaseMessage):
            message = message_to_json(message)
        if isinstance(message, dict):
            role, text = role_and_text(message)
            if role in ("user", "human"):
                return text or None
    return None


def memory_graph(
    inject_node: Any, agent: Any, record_node: Any, state_schema: Any = MemoryState
) -> StateGraph[Any]:
    """The seed's wiring, uncompiled: ``inject_memory -> agent -> record_memory -> END``.

    Example::

        app = memory_graph(manager.inject_node, my_agent, manager.record_node).compile()
    """
    graph: StateGraph[Any] = StateGraph(state_schema)
    graph.add_node("inject_memory", inject_node)
    graph.add_node("agent", agent)
    graph.add_node("record_memory", record_node)
    graph.add_edge(START, "inject_memory")
    graph.add_edge("inject_memory", "agent")
    graph.add_edge("agent", "record_memory")
    graph.add_edge("record_memory", END)
    return graph
