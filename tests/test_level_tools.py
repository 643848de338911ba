"""Levels of memory through the tools and MCP (issue 39, item 4): an agent updates and forgets
a fact of any level its scope reads, at that fact's own level, and still cannot reach another
user's or a sibling agent's facts; list_memories says each fact's level."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from langchain_core.messages import ToolMessage
from mcp import ClientSession
from mcp.shared.memory import create_connected_server_and_client_session

from agent_memory import MemoryManager, Scope
from agent_memory.errors import UnknownFactError
from agent_memory.settings import MemorySettings, Settings
from agent_memory_deployments.mcp_server import build_server
from tests.test_memory_tools import agent_graph

ALICE, SUPPORT, BILLING = Scope("alice"), Scope("alice", "support"), Scope("alice", "billing")
BOB = Scope("bob")


def _current(db: psycopg.Connection[Any]) -> list[tuple[str | None, str | None, str]]:
    rows = db.execute(
        "SELECT user_id, agent_id, content FROM agent_memory.memory_items"
        " WHERE superseded_at IS NULL ORDER BY content"
    ).fetchall()
    return [tuple(r) for r in rows]  # type: ignore[misc]


async def _filed(manager: MemoryManager) -> tuple[int, int, int, int]:
    person = await manager.add_fact(ALICE, "Alice wants answers by email", kind="preference")
    note = await manager.add_fact(SUPPORT, "Ticket 4711 waits on Alice", importance=0.9)
    sibling = await manager.add_fact(BILLING, "Invoice 88 is disputed", importance=0.9)
    other = await manager.add_fact(BOB, "Bob wants answers by phone")
    return person.id, note.id, sibling.id, other.id


async def test_the_manager_changes_a_fact_of_a_level_the_scope_reads_at_its_own_level(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    person, note, sibling, other = await _filed(manager)
    # read one by id: the scope's own or a level it reads, never a sibling's or another user's
    assert (await manager.readable_fact(SUPPORT, person)).content == "Alice wants answers by email"
    assert (await manager.readable_fact(SUPPORT, note)).id == note
    for fact_id in (sibling, other):
        with pytest.raises(UnknownFactError, match=f"no current fact with id {fact_id}"):
            await manager.readable_fact(SUPPORT, fact_id)
    updated = await manager.update_fact(person, "Alice wants answers by phone", scope=SUPPORT)
    assert (updated.user_id, updated.agent_id) == ("alice", None)  # the person's level still
    for fact_id in (sibling, other):
        with pytest.raises(UnknownFactError, match=f"no current fact with id {fact_id}"):
            await manager.update_fact(fact_id, "Changed", scope=SUPPORT)
        with pytest.raises(UnknownFactError, match=f"no current fact with id {fact_id}"):
            await manager.forget_fact(fact_id, scope=SUPPORT)
    # the person's level does not read an agent's notes
    with pytest.raises(UnknownFactError):
        await manager.forget_fact(note, scope=ALICE)
    await manager.forget_fact(updated.id, scope=BILLING)
    assert _current(db) == [
        ("bob", None, "Bob wants answers by phone"),
        ("alice", "billing", "Invoice 88 is disputed"),
        ("alice", "support", "Ticket 4711 waits on Alice"),
    ]


async def test_the_forget_tool_reaches_the_persons_level_and_nothing_beside(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    person, _, sibling, other = await _filed(manager)
    script = [[("forget", {"fact_id": fact_id})] for fact_id in (sibling, other, person)]
    out = await agent_graph(manager, script).ainvoke(
        {"messages": [("user", "Forget that.")]},
        {"configurable": {"user_id": "alice", "agent_id": "support"}},
    )
    said = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert said == [
        f"not forgotten: no current fact with id {sibling}",
        f"not forgotten: no current fact with id {other}",
        f"forgot fact {person}: Alice wants answers by email",
    ]
    assert [c for _, _, c in _current(db)] == [
        "Bob wants answers by phone",
        "Invoice 88 is disputed",
        "Ticket 4711 waits on Alice",
    ]


async def test_with_share_exact_the_forget_tool_reaches_its_scope_alone(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    exact = settings.model_copy(update={"memory": MemorySettings(share="exact")})
    manager = await MemoryManager.create(settings=exact, migrate=False)
    try:
        person, *_ = await _filed(manager)
        out = await agent_graph(manager, [[("forget", {"fact_id": person})]]).ainvoke(
            {"messages": [("user", "Forget that.")]},
            {"configurable": {"user_id": "alice", "agent_id": "support"}},
        )
        said = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
        assert said == [f"not forgotten: no current fact with id {person}"]
        with pytest.raises(UnknownFactError):
            await manager.update_fact(person, "Changed", scope=SUPPORT)
    finally:
        await manager.close()


def _data(result: Any) -> Any:
    assert not result.isError, result.content
    if result.structuredContent is not None:
        return result.structuredContent.get("result", result.structuredContent)
    return json.loads(result.content[0].text)


async def _call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    return _data(await session.call_tool(tool, arguments))


async def test_mcp_lists_levels_and_updates_and_deletes_the_persons_facts(
    manager: MemoryManager, settings: Settings, db: psycopg.Connection[Any]
) -> None:
    person, note, sibling, other = await _filed(manager)
    server = build_server(settings, SUPPORT)
    async with create_connected_server_and_client_session(server) as session:
        listed = await _call(session, "list_memories")
        assert [(m["id"], m["level"]) for m in listed] == [
            (note, "user_agent"),
            (person, "user"),
        ]
        got = await _call(session, "get_memory", fact_id=person)
        assert got["level"] == "user"
        updated = await _call(
            session, "update_memory", fact_id=person, content="Alice wants answers by phone"
        )
        assert updated["level"] == "user"
        for fact_id in (sibling, other):
            for tool, arguments in (
                ("update_memory", {"content": "Changed"}),
                ("delete_memory", {}),
                ("get_memory", {}),
            ):
                refused = await session.call_tool(tool, {"fact_id": fact_id, **arguments})
                assert refused.isError
                assert f"no current memory with id {fact_id}" in refused.content[0].text
        deleted = await _call(session, "delete_memory", fact_id=updated["id"])
        assert deleted == f"deleted memory {updated['id']}: Alice wants answers by phone"
    assert _current(db) == [
        ("bob", None, "Bob wants answers by phone"),
        ("alice", "billing", "Invoice 88 is disputed"),
        ("alice", "support", "Ticket 4711 waits on Alice"),
    ]
