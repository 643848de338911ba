"""The LangGraph side: the state schema and the inject / record nodes."""

from agent_memory.graph.state import MemoryState, memory_graph, scope_from

__all__ = ["MemoryState", "memory_graph", "scope_from"]
