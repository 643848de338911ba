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
from agent_memory_flows.prefect_server import free_port
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
    assert deleted.endswith("in 2 scope(s); 0 memories learned from them at other levels"), deleted
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
async def http_server(
    database_url: str, *extra: str, env: dict[str, str] | None = None
) -> AsyncIterator[str]:
    port = free_port()
    args = ["-m", "agent_memory_deployments.cli", "mcp", "--user", "mcp-user", "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, *args, *extra],
        cwd=ROOT,
        env={**server_env(database_url), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


async def listening(url: str) -> None:
    """Once the server at ``url`` answers (within the caller's deadline)."""
    async with httpx.AsyncClient() as http:
        while True:
            try:
                await http.get(url)
                return
            except httpx.ConnectError:
                await asyncio.sleep(0.5)


@asynccontextmanager
async def session_on(
    url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """The SDK client's session with the server at ``url``, sending ``headers``."""
    await listening(url)
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        yield session


async def test_the_mcp_server_over_streamable_http(
    database_url: str, db: psycopg.Connection[Any], manager: MemoryManager
) -> None:
    seed(db)
    async with (
        asyncio.timeout(180),
        http_server(database_url) as url,
        session_on(url) as session,
    ):
        await exercise(session, db, manager)


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


# ---- a bearer token, required off loopback -------------------------------------------------

TOKEN = "s3cret-token-of-the-test-0123456789"


def refusal(*args: str, env: dict[str, str] | None = None) -> str:
    """What ``agent-memory mcp ARGS`` says when it refuses to start (it must exit, not serve)."""
    done = subprocess.run(
        [sys.executable, "-m", "agent_memory_deployments.cli", "mcp", "--user", "u", *args],
        cwd=ROOT,
        env={**server_env("postgresql://nobody@127.0.0.1:1/none"), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    return " ".join(done.stderr.split())


def test_a_server_off_loopback_without_a_token_refuses_to_start_naming_the_flag() -> None:
    port = str(free_port())
    for host in ("0.0.0.0", "::", "192.0.2.7", "memory.example.com"):
        said = refusal("--port", port, "--host", host)
        assert "--auth-token" in said and "AGENT_MEMORY_MCP_AUTH_TOKEN" in said, said
        assert f"--host {host} would serve its memory to the network" in said
    said = refusal("--port", port, "--host", "0.0.0.0", "--allow-any-user")
    assert "every user's memory (--allow-any-user)" in said and "--auth-token" in said
    said = refusal("--port", port, "--host", "0.0.0.0", "--auth-token", "short")
    assert "5 characters long; use 16 at least" in said and "short" not in said.split("long")[1]
    # a set variable that is too short is refused the same way
    said = refusal(
        "--port", port, "--host", "127.0.0.1", env={"AGENT_MEMORY_MCP_AUTH_TOKEN": "tiny"}
    )
    assert "4 characters long" in said


async def _refused(url: str, headers: dict[str, str] | None) -> None:
    async with httpx.AsyncClient(headers=headers) as http:
        answer = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"].startswith("Bearer")
    with pytest.raises(Exception) as caught:  # the SDK client fails on the 401 too
        async with session_on(url, headers) as session:
            await session.initialize()
    assert "401" in repr(caught.value)


@pytest.mark.parametrize(
    ("extra", "env"),
    [
        ((), {"AGENT_MEMORY_MCP_AUTH_TOKEN": TOKEN}),  # on loopback, from the environment
        (("--host", "0.0.0.0", "--auth-token", TOKEN), {}),  # off loopback, by the flag
    ],
    ids=["loopback-variable", "all-interfaces-flag"],
)
async def test_with_a_token_every_request_must_carry_it(
    database_url: str,
    db: psycopg.Connection[Any],
    manager: MemoryManager,
    extra: tuple[str, ...],
    env: dict[str, str],
) -> None:
    seed(db)
    async with asyncio.timeout(180), http_server(database_url, *extra, env=env) as url:
        async with session_on(url, {"Authorization": f"Bearer {TOKEN}"}) as session:
            await exercise(session, db, manager)
        for headers in (
            None,
            {"Authorization": "Bearer wrong-token-of-the-same-length-012"},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": f"Bearer {TOKEN}x"},
        ):
            await _refused(url, headers)
