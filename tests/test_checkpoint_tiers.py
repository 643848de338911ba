"""All three tiers on one PostgreSQL, across a process restart: a graph compiled with the
checkpointer (in-context tier) and the memory nodes runs turn 1 in one process; consolidation
runs; turn 2 of the same thread, in a new process, sees the thread's earlier messages, the
facts of turn 1 (semantic tier) and its summary (episodic tier)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager
from agent_memory.checkpoints import checkpoint_conninfo
from agent_memory.demo import TURN_1, TURN_2
from agent_memory.errors import ConfigurationError
from agent_memory.models import Scope
from agent_memory.settings import Settings
from tests.processes import run_python

TURN = """
import asyncio, json
from langchain_core.messages import AIMessage, HumanMessage
from agent_memory import MemoryManager

def agent(state):
    memory = state.get("working_memory", {{}})
    return {{"messages": [AIMessage("I know %d facts" % len(memory.get("injected_facts", [])))]}}

async def main():
    manager = await MemoryManager.create(migrate=False)
    try:
        async with manager.checkpointer() as saver:
            app = manager.graph(agent).compile(checkpointer=saver)
            out = await app.ainvoke(
                {{"user_id": "pat", "messages": [HumanMessage({text!r})]}},
                {{"configurable": {{"thread_id": "pat-thread"}}}},
            )
    finally:
        await manager.close()
    print(json.dumps({{"messages": [m.content for m in out["messages"]],
                      "memory": out["working_memory"]}}))

asyncio.run(main())
"""


def turn(settings: Settings, text: str) -> dict[str, Any]:
    done = run_python(
        TURN.format(text=text),
        settings,
        AGENT_MEMORY_INJECT_HISTORY="3",
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.usefixtures("prefect_harness")
async def test_a_thread_continues_in_a_new_process_with_all_three_tiers(
    manager: MemoryManager, settings: Settings, db: psycopg.Connection[Any]
) -> None:
    first = turn(settings, TURN_1)
    assert first["messages"] == [TURN_1, "I know 0 facts"]
    assert (await manager.consolidate(Scope("pat")))["facts_created"] > 0

    second = turn(settings, TURN_2)  # a new process: only the database remembers
    # in-context: the checkpointer brought back the thread's first turn
    assert second["messages"][:2] == [TURN_1, "I know 0 facts"]
    assert second["messages"][2] == TURN_2
    memory = second["memory"]
    # semantic: turn 1's facts, ranked against turn 2's question by full text and meaning
    assert memory["ranking"] == "hybrid" and memory["injected_facts"]
    assert any("Python" in fact for fact in memory["injected_facts"])
    assert second["messages"][3] == f"I know {len(memory['injected_facts'])} facts"
    # episodic: turn 1's summary with its date
    assert len(memory["history"]) == 1
    assert memory["history"][0]["summary"].startswith(
        'User said "I\'m a Python developer working on SAP integrations." ('
    )
    assert "Recent conversation history:\n\u2022 " in memory["context"]

    # one database holds all three: checkpoints in their own schema beside the memory
    checkpoints = db.execute(
        "SELECT count(*) FROM agent_memory_checkpoints.checkpoints WHERE thread_id = %s",
        ("pat-thread",),
    ).fetchone()
    assert checkpoints is not None and checkpoints[0] > 0
    # each turn recorded only its own messages, though the thread's state holds both turns
    counts = db.execute(
        "SELECT message_count FROM agent_memory.episodes WHERE user_id = 'pat' ORDER BY id"
    ).fetchall()
    assert counts == [(2,), (2,)]


def test_a_checkpoint_schema_must_be_a_plain_name() -> None:
    assert "search_path=tiers" in checkpoint_conninfo("dbname=x", "tiers")
    # options already in the address are kept
    kept = checkpoint_conninfo("dbname=x options='-c statement_timeout=5s'", "tiers")
    assert "-c statement_timeout=5s -c search_path=tiers" in kept
    with pytest.raises(ConfigurationError, match="'bad; drop'"):
        checkpoint_conninfo("dbname=x", "bad; drop")
