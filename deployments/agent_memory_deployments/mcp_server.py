"""An MCP server for memory, on the official ``mcp`` SDK's FastMCP: any MCP client (a desktop
assistant, an IDE) adds, searches, lists, gets, updates and deletes memories, deletes all of
them, and searches past conversations.

The server serves one scope, given when it starts (``agent-memory mcp --user U [--agent A]``);
no tool takes a scope, so a client cannot reach another one. Over stdio by default; over
streamable HTTP with ``--port`` (on loopback unless ``--host`` says otherwise).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.fastmcp import Context, FastMCP

from agent_memory.errors import UnknownFactError
from agent_memory.manager import MemoryManager
from agent_memory.models import MemoryItem, Scope
from agent_memory.settings import Settings

INSTRUCTIONS = (
    "Long-term memory of one user. Search it before answering; add a memory when the user "
    "says something worth keeping across sessions (one short sentence in the third person, "
    "e.g. 'User prefers answers by email.'); update or delete one that is no longer true."
)


def _item(fact: MemoryItem) -> dict[str, Any]:
    return {
        "id": fact.id,
        "memory": fact.content,
        "kind": fact.kind,
        "importance": round(fact.importance, 4),
        "since": fact.valid_from.isoformat() if fact.valid_from else None,
    }


def build_server(
    settings: Settings, scope: Scope, *, host: str = "127.0.0.1", port: int = 8000
) -> FastMCP[MemoryManager]:
    """The server for ``scope``; its manager opens when the server starts."""

    @asynccontextmanager
    async def lifespan(_: FastMCP[MemoryManager]) -> AsyncIterator[MemoryManager]:
        manager = await MemoryManager.create(settings=settings)
        try:
            yield manager
        finally:
            await manager.close()

    server: FastMCP[MemoryManager] = FastMCP(
        "agent-memory", instructions=INSTRUCTIONS, lifespan=lifespan, host=host, port=port
    )

    def manager_of(ctx: Context[Any, MemoryManager, Any]) -> MemoryManager:
        return ctx.request_context.lifespan_context

    async def owned(manager: MemoryManager, fact_id: int) -> MemoryItem:
        """The scope's current fact ``fact_id``; another scope's is as unknown as none."""
        for fact in await manager.facts(scope):
            if fact.id == fact_id:
                return fact
        raise UnknownFactError(f"no current memory with id {fact_id}")

    @server.tool()
    async def add_memory(
        content: str, ctx: Context[Any, MemoryManager, Any], importance: float = 0.5
    ) -> dict[str, Any]:
        """Add a memory (a known one, reworded or not, is reinforced instead of copied)."""
        return _item(await manager_of(ctx).add_fact(scope, content, importance=importance))

    @server.tool()
    async def search_memories(
        query: str, ctx: Context[Any, MemoryManager, Any], limit: int = 10
    ) -> list[dict[str, Any]]:
        """The memories most relevant to query, best first."""
        manager = manager_of(ctx)
        frame = await manager.inject(scope, query=query)
        by_id = {f.id: f for f in await manager.facts(scope)}
        return [_item(by_id[i]) for i in frame.fact_ids[:limit] if i in by_id]

    @server.tool()
    async def list_memories(ctx: Context[Any, MemoryManager, Any]) -> list[dict[str, Any]]:
        """Every current memory, most important first."""
        return [_item(f) for f in await manager_of(ctx).facts(scope)]

    @server.tool()
    async def get_memory(fact_id: int, ctx: Context[Any, MemoryManager, Any]) -> dict[str, Any]:
        """One memory by its id."""
        return _item(await owned(manager_of(ctx), fact_id))

    @server.tool()
    async def update_memory(
        fact_id: int, content: str, ctx: Context[Any, MemoryManager, Any]
    ) -> dict[str, Any]:
        """Correct a memory: the new wording replaces it (the old one is kept as history)."""
        manager = manager_of(ctx)
        await owned(manager, fact_id)
        return _item(await manager.update_fact(fact_id, content))

    @server.tool()
    async def delete_memory(fact_id: int, ctx: Context[Any, MemoryManager, Any]) -> str:
        """Delete a memory that is no longer true (kept as history, never recalled again)."""
        manager = manager_of(ctx)
        await owned(manager, fact_id)
        fact = await manager.forget_fact(fact_id)
        return f"deleted memory {fact.id}: {fact.content}"

    @server.tool()
    async def delete_all_memories(ctx: Context[Any, MemoryManager, Any]) -> str:
        """Delete every memory of this user (kept as history, never recalled again)."""
        manager = manager_of(ctx)
        facts = await manager.facts(scope)
        for fact in facts:
            await manager.forget_fact(fact.id)
        return f"deleted {len(facts)} memories"

    @server.tool()
    async def search_conversations(
        query: str, ctx: Context[Any, MemoryManager, Any], limit: int = 10
    ) -> list[dict[str, Any]]:
        """The messages of past conversations most relevant to query, with when and who."""
        found = await manager_of(ctx).search_conversations(scope, query, limit=limit)
        return [
            {"said_at": s.occurred_at.isoformat(), "speaker": s.speaker, "text": s.content}
            for s in found
        ]

    return server
