"""The MCP server, through the official SDK's client over stdio, refuses what it cannot take in
its own short words: an argument a tool does not take (a user_id on a server that serves one
user), a megabyte of content (not echoed back), content with a NUL character (not psycopg's
message); and nothing is written."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import psycopg
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.processes import ROOT
from tests.test_mcp import call, server_env

pytestmark = pytest.mark.system


def refused(result: Any) -> str:
    assert result.isError, result.content
    text = str(result.content[0].text)
    assert len(text) <= 500, text[:600]
    return text


async def test_the_server_refuses_bad_calls_in_its_own_short_words(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agent_memory_deployments.cli", "mcp", "--user", "mcp-user"],
        env=server_env(database_url),
        cwd=str(ROOT),
    )
    async with asyncio.timeout(180):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            said = refused(
                await session.call_tool(
                    "add_memory", {"content": "Ana likes tea.", "user_id": "ana"}
                )
            )
            assert "add_memory takes no argument 'user_id'" in said
            assert "serves one user" in said
            said = refused(await session.call_tool("list_memories", {"colour": "red"}))
            assert "list_memories takes no argument 'colour'" in said

            huge = "x" * 1_000_000
            said = refused(await session.call_tool("add_memory", {"content": huge}))
            assert "1000000 characters long, over the limit of 4000" in said
            said = refused(await session.call_tool("add_memory", {"content": "tea\x00"}))
            assert "holds a NUL character" in said and "0x00" not in said
            kept = await call(session, "add_memory", content="User drinks tea.")
            for content, named in ((huge, "over the limit"), ("tea\x00", "NUL character")):
                said = refused(
                    await session.call_tool(
                        "update_memory", {"fact_id": kept["id"], "content": content}
                    )
                )
                assert named in said
    assert db.execute("SELECT user_id, content FROM agent_memory.memory_items").fetchall() == [
        ("mcp-user", "User drinks tea.")
    ]
