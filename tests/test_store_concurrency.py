"""Store keys under concurrent writers in separate OS processes: however many processes put to
(or delete) one key, the key ends as one item showing one current fact, never a fact that no
item shows any more (which the store would list as an item of its own, a ghost key)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from agent_memory.settings import Settings
from agent_memory.store import AgentMemoryStore
from tests.processes import ROOT

pytestmark = [pytest.mark.system, pytest.mark.slow]

NS = ("memories", "alice")
PUTS = 100

# Each writer opens its store, says it is ready, waits for the go (so that the writers overlap
# instead of one finishing while the next still imports), then puts PUTS new wordings to one key
# (each a new fact that supersedes the one before) and, with a delete every DELETE_EVERY puts,
# takes the item away and back.
WRITER = """
import asyncio, sys
from agent_memory.store import AgentMemoryStore

NS, KEY, NAME, PUTS, DELETE_EVERY = ("memories", "alice"), "counter", sys.argv[1], {puts}, {every}

async def main() -> None:
    async with AgentMemoryStore.afrom_conn_string() as store:
        await store.aget(NS, KEY)  # connected
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(PUTS):
            if DELETE_EVERY and i % DELETE_EVERY == DELETE_EVERY - 1:
                await store.adelete(NS, KEY)
            await store.aput(NS, KEY, {{"content": f"Alice's counter is at {{NAME}}-{{i}}"}})

asyncio.run(main())
"""


def _writers(database_url: str, count: int, delete_every: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    env["DATABASE_URL"] = database_url
    code = WRITER.format(puts=PUTS, every=delete_every)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, f"p{n}"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == "ready\n", (line, proc.stderr.read() if proc.stderr else "")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _assert_one_item_one_fact(settings: Settings, db: psycopg.Connection[Any], count: int) -> None:
    rows = db.execute(
        "SELECT s.key, s.value ->> 'content', f.content, f.superseded_at IS NULL"
        " FROM agent_memory.store_items s"
        " LEFT JOIN agent_memory.memory_items f ON f.id = s.fact_id"
    ).fetchall()
    assert len(rows) == 1, rows
    key, value, fact, fact_current = rows[0]
    assert key == "counter" and fact_current and fact == value
    assert value in {f"Alice's counter is at p{n}-{PUTS - 1}" for n in range(count)}
    current = db.execute(
        "SELECT content FROM agent_memory.memory_items"
        " WHERE user_id = 'alice' AND superseded_at IS NULL"
    ).fetchall()
    assert current == [(value,)]
    with AgentMemoryStore.from_conn_string(settings=settings) as store:
        items = store.search(NS, limit=1000)
        assert [(i.key, i.value["content"]) for i in items] == [("counter", value)]
        assert store.list_namespaces() == [NS]


def test_two_processes_putting_to_one_key_leave_one_item_and_one_current_fact(
    database_url: str, settings: Settings, db: psycopg.Connection[Any]
) -> None:
    _writers(database_url, 2, delete_every=0)
    _assert_one_item_one_fact(settings, db, 2)
    # every wording but the last is history, superseded, not lost
    assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (2 * PUTS,)


def test_processes_putting_and_deleting_one_key_leave_one_item_and_one_current_fact(
    database_url: str, settings: Settings, db: psycopg.Connection[Any]
) -> None:
    _writers(database_url, 3, delete_every=7)
    _assert_one_item_one_fact(settings, db, 3)
