"""The MCP server's ``delete_all_memories`` within an agent (issue 51): a client of the server
of ``erase-me``'s bar agent erases that agent's conversations and the facts they alone taught
the person's level, through the official SDK's client over stdio; the other user's stay."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import psycopg
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from agent_memory import MemoryManager
from tests.processes import ROOT
from tests.test_derived_erasure import MARK, OTHER, told
from tests.test_erasure import holding
from tests.test_mcp import call, server_env

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("prefect_harness")]


async def test_delete_all_memories_of_an_agent_takes_what_it_taught_the_person(
    database_url: str, db: psycopg.Connection[Any], manager: MemoryManager
) -> None:
    await told(manager)
    assert "agent_memory.memory_items.content" in holding(db, MARK)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agent_memory_deployments.cli", "mcp", "--user", "erase-me", "--agent", "bar"],
        env=server_env(database_url),
        cwd=str(ROOT),
    )
    async with asyncio.timeout(180):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            deleted = await call(session, "delete_all_memories")
    assert deleted.startswith("erased user=erase-me agent=bar: 0 memories, 1 conversations,")
    assert deleted.endswith("; 2 memories learned from them at other levels"), deleted
    assert holding(db, MARK) == {}
    assert holding(db, OTHER)
