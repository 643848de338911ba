"""The MCP server through the official SDK's client, over stdio and streamable HTTP: every tool
on one scope, which no tool's arguments can widen, and bad input named."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import psycopg
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from psycopg.types.json import Jsonb

from agent_memory import MemoryManager, Scope
from agent_memory_deployments.server import free_port
from tests.processes import ROOT

pytestmark = pytest.mark.system

TOOLS = {
    "add_memory",
    "search_memories",
    "list_memories",
    "get_memory",
    "update_memory",
    "delete_memory",
    "delete_all_memories",
    "search_conversations",
}


def server_env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    env["DATABASE_URL"] = database_url
    return env


def data(result: Any) -> Any:
    assert not result.isError, result.content
    if result.structuredContent is not None:
        return result.structuredContent.get("result", result.structuredContent)
    return json.loads(result.content[0].text)


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    return data(await session.call_tool(tool, arguments))


async def exercise(
    session: ClientSession, db: psycopg.Connection[Any], manager: MemoryManager
) -> None:
    await session.initialize()
    assert {t.name for t in (await session.list_tools()).tools} == TOOLS
    # no tool takes a scope: the server's is the only one
    for tool in (await session.list_tools()).tools:
        assert not {"user_id", "agent_id", "workflow_id"} & set(tool.inputSchema["properties"])
    added = await call(session, "add_memory", content="User prefers email.", importance=0.8)
    assert added["memory"] == "User prefers email."
    found = await call(session, "search_memories", query="How to contact them? email")
    assert [m["id"] for m in found] == [added["id"]]
    assert [m["id"] for m in await call(session, "list_memories")] == [added["id"]]
    assert (await call(session, "get_memory", fact_id=added["id"]))["id"] == added["id"]
    updated = await call(
        session, "update_memory", fact_id=added["id"], content="User prefers phone calls."
    )
    assert updated["memory"] == "User prefers phone calls."
    other = await manager.add_fact(Scope(user_id="somebody-else"), "User lives in Oslo.")
    refused = await session.call_tool("get_memory", {"fact_id": other.id})
    assert refused.isError and f"no current memory with id {other.id}" in refused.content[0].text
    bad = await session.call_tool("add_memory", {"content": ""})
    assert bad.isError and "content ''" in bad.content[0].text
    said = await call(session, "search_conversations", query="garden")
    assert [s["text"] for s in said] == ["I planted basil in the garden."]
    # everything of the user goes, for good: the memory and its history, the conversations,
    # and those of the user's scope with another agent too
    deleted = await call(session, "delete_all_memories")
    assert deleted.startswith("erased user=mcp-user: 2 memories, 2 conversations,"), deleted
    assert deleted.endswith("in 2 scope(s)"), deleted
    assert await call(session, "list_memories") == []
    assert await call(session, "search_conversations", query="garden") == []
    assert db.execute(
        "SELECT count(*) FROM agent_memory.episodes WHERE user_id = 'mcp-user'"
    ).fetchone() == (0,)
    assert db.execute(
        "SELECT content FROM agent_memory.memory_items WHERE user_id <> 'mcp-user'"
    ).fetchall() == [("User lives in Oslo.",)]
    again = await call(session, "delete_all_memories")
    assert again == "memory holds nothing about user=mcp-user: nothing deleted"


def seed(db: psycopg.Connection[Any]) -> None:
    said = [{"role": "user", "content": "I planted basil in the garden."}]
    db.execute(
        "INSERT INTO agent_memory.episodes (user_id, messages, message_count)"
        " VALUES ('mcp-user', %s, 1)",
        (Jsonb(said),),
    )
    # the same person with another agent: theirs too, for delete_all_memories
    db.execute(
        "INSERT INTO agent_memory.episodes (user_id, agent_id, messages, message_count)"
        " VALUES ('mcp-user', 'support', %s, 1)",
        (Jsonb([{"role": "user", "content": "My card ends in 4242."}]),),
    )


async def test_the_mcp_server_over_stdio(
    database_url: str, db: psycopg.Connection[Any], manager: MemoryManager
) -> None:
    seed(db)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agent_memory_deployments.cli", "mcp", "--user", "mcp-user"],
        env=server_env(database_url),
        cwd=str(ROOT),
    )
    async with asyncio.timeout(180):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await exercise(session, db, manager)


@asynccontextmanager
async def http_server(database_url: str) -> AsyncIterator[str]:
    port = free_port()
    args = ["-m", "agent_memory_deployments.cli", "mcp", "--user", "mcp-user", "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=server_env(database_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


async def test_the_mcp_server_over_streamable_http(
    database_url: str, db: psycopg.Connection[Any], manager: MemoryManager
) -> None:
    seed(db)
    async with asyncio.timeout(180), http_server(database_url) as url:
        while True:  # until the server listens (within the deadline above)
            try:
                client = streamable_http_client(url)
                async with client as (read, write, _), ClientSession(read, write) as session:
                    await exercise(session, db, manager)
                    return
            except* httpx.ConnectError:  # not listening yet
                await asyncio.sleep(0.5)


async def test_a_server_that_allows_it_lets_its_tools_name_those_users_only(
    database_url: str, db: psycopg.Connection[Any], manager: MemoryManager
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "agent_memory_deployments.cli", "mcp", "--user", "desk"),
            *("--allow-user", "ana", "--allow-user", "ben"),
        ],
        env=server_env(database_url),
        cwd=str(ROOT),
    )
    async with asyncio.timeout(180):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for tool in (await session.list_tools()).tools:
                assert "user_id" in tool.inputSchema["properties"], tool.name
            await call(session, "add_memory", content="Ana likes jazz.", user_id="ana")
            await call(session, "add_memory", content="The desk is shared.")
            found = await call(session, "search_memories", query="jazz", user_id="ana")
            assert [m["memory"] for m in found] == ["Ana likes jazz."]
            assert await call(session, "list_memories", user_id="ben") == []
            refused = await session.call_tool("list_memories", {"user_id": "eve"})
            assert refused.isError and "user 'eve' is not one this server serves" in str(
                refused.content[0].text
            )
    rows = db.execute(
        "SELECT user_id, content FROM agent_memory.memory_items ORDER BY id"
    ).fetchall()
    assert rows == [("ana", "Ana likes jazz."), ("desk", "The desk is shared.")]
