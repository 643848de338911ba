"""An MCP server for memory, on the official ``mcp`` SDK's FastMCP: any MCP client (a desktop
assistant, an IDE) adds, searches, lists, gets, updates and deletes memories, deletes all of
them, and searches past conversations.

The server serves one scope, given when it starts (``agent-memory mcp --user U [--agent A]``);
no tool takes a scope, so a client cannot reach another one. A server started with
``--allow-user V`` (repeatable) or ``--allow-any-user`` lets its tools take a ``user_id`` too:
the same scope with that user instead, and only those users. Over stdio by default; over
streamable HTTP with ``--port`` (on loopback unless ``--host`` says otherwise).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from typing import Any, Literal, TypeVar

from mcp.server.fastmcp import Context, FastMCP

from agent_memory.errors import InvalidScopeError, UnknownFactError, UnknownScopeError
from agent_memory.management import filed_under
from agent_memory.manager import MemoryManager
from agent_memory.models import MemoryItem, Scope
from agent_memory.settings import Settings
from agent_memory_deployments.mcp_arguments import StrictFastMCP

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
        # where it is filed: "user" (about the person, shared by their agents), "user_agent",
        # "workflow", "agent" (docs/guide.md, "Levels of memory")
        "level": filed_under(fact).level,
        "importance": round(fact.importance, 4),
        "since": fact.valid_from.isoformat() if fact.valid_from else None,
    }


F = TypeVar("F", bound=Callable[..., Any])

# the argument a tool names another user by, where the server allows it
_USER_ARG = "user_id"


def without_user(tool: F) -> F:
    """``tool`` as a client sees it when the scope is fixed: with no ``user_id`` argument."""
    signature = inspect.signature(tool, eval_str=True)
    tool.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for p in signature.parameters.values() if p.name != _USER_ARG]
    )
    return tool


ScopeOf = Callable[[str | None], Scope]


def build_server(
    settings: Settings,
    scope: Scope,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    other_users: Collection[str] | Literal["any"] = (),
) -> FastMCP[MemoryManager]:
    """The server for ``scope``; its manager opens when the server starts. ``other_users``:
    the users its tools may name instead of ``scope``'s (``"any"``: every user); none by
    default, and then no tool takes a user at all."""
    widened = other_users == "any" or bool(other_users)
    # refuses arguments a tool does not take (a user_id here when no other user is allowed)
    server: FastMCP[MemoryManager] = StrictFastMCP(
        "agent-memory",
        instructions=INSTRUCTIONS,
        lifespan=_lifespan(settings),
        host=host,
        port=port,
    )
    scope_of = _scope_of(scope, other_users, widened=widened)
    tools = (
        *_adding_and_reading(scope_of),
        *_correcting_and_erasing(scope_of),
        _conversation_search(scope_of),
    )
    for fn in tools:  # in this order: the order a client lists them in
        server.tool()(fn if widened else without_user(fn))
    return server


def _lifespan(
    settings: Settings,
) -> Callable[[FastMCP[MemoryManager]], AbstractAsyncContextManager[MemoryManager]]:
    """The server's manager: opened when the server starts, closed when it stops."""

    @asynccontextmanager
    async def lifespan(_: FastMCP[MemoryManager]) -> AsyncIterator[MemoryManager]:
        manager = await MemoryManager.create(settings=settings)
        try:
            yield manager
        finally:
            await manager.close()

    return lifespan


def _scope_of(
    scope: Scope, other_users: Collection[str] | Literal["any"], *, widened: bool
) -> ScopeOf:
    """How a tool call's ``user_id`` picks its scope (see :func:`build_server`)."""

    def scope_of(user_id: str | None) -> Scope:
        """The scope a tool call reaches: the server's, or that user's where it allows."""
        if user_id is None or user_id == scope.user_id:
            return scope
        if not widened:  # unreachable through a client: StrictFastMCP refuses the argument
            raise InvalidScopeError("this server serves one user; it takes no user_id")
        if other_users != "any" and user_id not in other_users:
            raise InvalidScopeError(
                f"user {user_id!r} is not one this server serves"
                f" ({', '.join(sorted({str(scope.user_id), *other_users}))})"
            )
        return replace(scope, user_id=user_id)

    return scope_of


def _manager_of(ctx: Context[Any, MemoryManager, Any]) -> MemoryManager:
    return ctx.request_context.lifespan_context


async def _owned(manager: MemoryManager, at: Scope, fact_id: int) -> MemoryItem:
    """The current fact ``fact_id`` of the scope or of a level of memory it reads; another
    user's or a sibling scope's is as unknown as none."""
    try:
        return await manager.readable_fact(at, fact_id)  # one read, whatever the scope holds
    except UnknownFactError:
        raise UnknownFactError(f"no current memory with id {fact_id}") from None


def _adding_and_reading(scope_of: ScopeOf) -> tuple[Callable[..., Any], ...]:
    """The tools that add and read memories."""

    async def add_memory(
        content: str,
        ctx: Context[Any, MemoryManager, Any],
        importance: float = 0.5,
        user_id: str | None = None,
    ) -> dict[str, Any]:
        """Add a memory (a known one, reworded or not, is reinforced instead of copied)."""
        at = scope_of(user_id)
        return _item(await _manager_of(ctx).add_fact(at, content, importance=importance))

    async def search_memories(
        query: str,
        ctx: Context[Any, MemoryManager, Any],
        limit: int = 10,
        user_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The memories that match query, best first."""
        found = await _manager_of(ctx).search(scope_of(user_id), query, limit=limit)
        return [{**_item(f), "score": round(f.score, 4)} for f in found]

    async def list_memories(
        ctx: Context[Any, MemoryManager, Any], user_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Every current memory, most important first, each with its level ("user": about
        the person, shared by all their agents; "user_agent", "workflow": this agent's or
        task's own)."""
        return [_item(f) for f in await _manager_of(ctx).readable_facts(scope_of(user_id))]

    async def get_memory(
        fact_id: int, ctx: Context[Any, MemoryManager, Any], user_id: str | None = None
    ) -> dict[str, Any]:
        """One memory by its id."""
        return _item(await _owned(_manager_of(ctx), scope_of(user_id), fact_id))

    return add_memory, search_memories, list_memories, get_memory


def _correcting_and_erasing(scope_of: ScopeOf) -> tuple[Callable[..., Any], ...]:
    """The tools that correct, delete and erase memories."""

    async def update_memory(
        fact_id: int,
        content: str,
        ctx: Context[Any, MemoryManager, Any],
        user_id: str | None = None,
    ) -> dict[str, Any]:
        """Correct a memory: the new wording replaces it (the old one is kept as history)."""
        try:
            fact = await _manager_of(ctx).update_fact(fact_id, content, scope=scope_of(user_id))
        except UnknownFactError:
            raise UnknownFactError(f"no current memory with id {fact_id}") from None
        return _item(fact)

    async def delete_memory(
        fact_id: int, ctx: Context[Any, MemoryManager, Any], user_id: str | None = None
    ) -> str:
        """Delete a memory that is no longer true (kept as history, never recalled again)."""
        try:
            fact = await _manager_of(ctx).forget_fact(fact_id, scope=scope_of(user_id))
        except UnknownFactError:
            raise UnknownFactError(f"no current memory with id {fact_id}") from None
        return f"deleted memory {fact.id}: {fact.content}"

    async def delete_all_memories(
        ctx: Context[Any, MemoryManager, Any], user_id: str | None = None
    ) -> str:
        """Erase everything memory holds about this user, for good: every memory, past
        conversation and conversation thread (of this server's agent or workflow only, where
        it serves one). Nothing can be recovered."""
        at = scope_of(user_id)
        return await _erase(_manager_of(ctx), at)

    return update_memory, delete_memory, delete_all_memories


async def _erase(manager: MemoryManager, at: Scope) -> str:
    """``delete_all_memories``: what it erased, said for the client."""
    try:
        if at.user_id is None:  # a server of an agent or workflow with no user
            summary = await manager.erase_scope(at)
        else:
            summary = await manager.erase_user(
                at.user_id, agent_id=at.agent_id, workflow_id=at.workflow_id
            )
    except UnknownScopeError:
        return f"memory holds nothing about {at.label}: nothing deleted"
    removed, derived = summary.removed, summary.derived.counts()
    return (
        f"erased {at.label}: {removed.get('memory_items', 0)} memories,"
        f" {removed.get('episodes', 0)} conversations,"
        f" {removed.get('checkpoints', 0)} checkpoints in {len(summary.scopes)} scope(s);"
        f" {derived['derived_facts']} memories learned from them at other levels"
    )


def _conversation_search(scope_of: ScopeOf) -> Callable[..., Any]:
    """The tool that searches past conversations."""

    async def search_conversations(
        query: str,
        ctx: Context[Any, MemoryManager, Any],
        limit: int = 10,
        user_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The messages of past conversations most relevant to query, with when and who."""
        found = await _manager_of(ctx).search_conversations(scope_of(user_id), query, limit=limit)
        return [
            {"said_at": s.occurred_at.isoformat(), "speaker": s.speaker, "text": s.content}
            for s in found
        ]

    return search_conversations
