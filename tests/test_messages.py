"""Messages are stored losslessly; hostile input gets a clear error or a safe store, and never a
half write."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.graph import END, START, StateGraph

from agent_memory import MemoryManager, MemoryState, Scope
from agent_memory.db import episodes as episode_repo
from agent_memory.errors import EpisodeTooLargeError, InvalidMessageError, InvalidScopeError
from agent_memory.messages import to_langchain

CONVERSATION = [
    SystemMessage("You are helpful.", id="sys-1"),
    HumanMessage("What's the weather in Paris?", id="h-1", name="alex"),
    AIMessage(
        content="",
        id="ai-1",
        tool_calls=[
            {"name": "weather", "args": {"city": "Paris"}, "id": "call-1", "type": "tool_call"}
        ],
        additional_kwargs={"refusal": None},
        response_metadata={"model_name": "test", "finish_reason": "tool_calls"},
    ),
    ToolMessage(content='{"temp": 21}', tool_call_id="call-1", id="tool-1", name="weather"),
    AIMessage(content=[{"type": "text", "text": "It is 21°C."}], id="ai-2"),
]


async def test_langchain_messages_round_trip(manager: MemoryManager) -> None:
    scope = Scope(user_id="rt")
    await manager.record(scope, CONVERSATION)
    pool = await manager.backend.apool()
    async with pool.connection() as conn:
        (episode,) = await episode_repo.load_pending(conn, scope)
    assert [m["role"] for m in episode.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert episode.messages[2]["tool_calls"][0]["args"] == {"city": "Paris"}
    assert to_langchain(episode.messages) == CONVERSATION


async def test_dict_messages_are_stored_as_given(manager: MemoryManager) -> None:
    scope = Scope(user_id="dicts")
    given = [
        {"role": "user", "content": "hi", "id": "m1"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
    ]
    await manager.record(scope, given)
    pool = await manager.backend.apool()
    async with pool.connection() as conn:
        (episode,) = await episode_repo.load_pending(conn, scope)
    assert episode.messages == given


def count(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM agent_memory.episodes").fetchone()
    return int(row[0]) if row else -1


async def test_nul_bytes_and_lone_surrogates_are_stored_safely(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await manager.record(Scope(user_id="odd"), [{"role": "user", "content": "a\x00b \ud83d end"}])
    content, metadata = db.execute(
        "SELECT messages->0->>'content', metadata FROM agent_memory.episodes"
    ).fetchone()  # type: ignore[misc]
    assert content == "a\ufffdb \ufffd end"
    assert metadata["replaced"] == ["nul", "surrogate"]


async def test_ten_megabytes_is_refused_by_default_and_stored_when_allowed(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    big = [{"role": "user", "content": "x" * (10 * 1024 * 1024)}]
    with pytest.raises(EpisodeTooLargeError, match=r"10,485,7\d\d bytes.*8,388,608"):
        await manager.record(Scope(user_id="big"), big)
    assert count(db) == 0
    manager.settings.memory.max_episode_bytes = 16 * 1024 * 1024
    await manager.record(Scope(user_id="big"), big)
    assert db.execute(
        "SELECT length(messages->0->>'content') FROM agent_memory.episodes"
    ).fetchone() == (10 * 1024 * 1024,)


@pytest.mark.parametrize(
    ("message", "needle"),
    [
        ({"role": "user", "content": {1, 2}}, r"messages\[1\]\.content holds a builtins\.set"),
        ({"role": "user", "content": "ok", "extra": object()}, r"messages\[1\]\.extra holds"),
        ({"role": "user", "content": float("nan")}, "nan"),
        ({"role": "user", 7: "int key"}, "key of type int"),
        ("just a string", "expected a LangChain message or a dict"),
    ],
)
async def test_unstorable_messages_raise_clearly_and_write_nothing(
    manager: MemoryManager, db: psycopg.Connection[Any], message: Any, needle: str
) -> None:
    ok = {"role": "assistant", "content": "fine"}
    with pytest.raises(InvalidMessageError, match=needle):
        await manager.record(
            Scope(user_id="bad"), [ok, message] if isinstance(message, dict) else [message]
        )
    assert count(db) == 0


async def test_common_python_values_are_stored_as_json(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    when = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
    await manager.record(
        Scope(user_id="py"), [{"role": "user", "content": "x", "at": when, "raw": b"\x01\x02"}]
    )
    assert db.execute(
        "SELECT messages->0->>'at', messages->0->'raw' FROM agent_memory.episodes"
    ).fetchone() == ("2026-11-29T12:00:00+00:00", {"__bytes_b64__": "AQI="})


@pytest.mark.parametrize(
    "hostile",
    ["x'; DROP TABLE agent_memory.episodes; --", "' OR 1=1 --", "NULL", "\\", "$1", "%s", "'"],
)
async def test_sql_looking_scope_ids_are_plain_data(
    manager: MemoryManager, db: psycopg.Connection[Any], hostile: str
) -> None:
    scope = Scope(user_id=hostile, agent_id="a")
    await manager.record(scope, [{"role": "user", "content": "hi"}])
    assert db.execute("SELECT user_id FROM agent_memory.episodes").fetchone() == (hostile,)
    pool = await manager.backend.apool()
    async with pool.connection() as conn:
        assert len(await episode_repo.load_pending(conn, scope)) == 1
        assert await episode_repo.load_pending(conn, Scope(user_id=None, agent_id="a")) == []


async def test_hostile_input_in_a_graph_errors_before_any_write(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    graph = StateGraph(MemoryState)
    graph.add_node("record_memory", manager.record_node)
    graph.add_edge(START, "record_memory")
    graph.add_edge("record_memory", END)
    app = graph.compile()
    with pytest.raises(InvalidMessageError):
        await app.ainvoke(
            {
                "user_id": "g",
                "messages": [HumanMessage("hi", additional_kwargs={"handle": object()})],
            }
        )
    with pytest.raises(InvalidScopeError):
        await app.ainvoke({"user_id": "", "messages": [HumanMessage("hi")]})
    assert count(db) == 0
    out = await app.ainvoke({"user_id": "g", "messages": [HumanMessage("a\x00b")]})
    assert out["working_memory"]["recorded_episode_id"] is not None
    assert count(db) == 1


@pytest.mark.parametrize(
    ("when", "needle"),
    [
        (dt.datetime(2026, 1, 1, 12, 0), "has no time zone"),
        (dt.datetime.now(dt.UTC) + dt.timedelta(days=20), "is in the future"),
    ],
)
async def test_bad_occurred_at_is_refused(
    manager: MemoryManager, db: psycopg.Connection[Any], when: dt.datetime, needle: str
) -> None:
    with pytest.raises(InvalidMessageError, match=needle):
        await manager.record(
            Scope(user_id="t"), [{"role": "user", "content": "x"}], occurred_at=when
        )
    assert count(db) == 0
    past = dt.datetime(2025, 5, 1, tzinfo=dt.UTC)
    await manager.record(Scope(user_id="t"), [{"role": "user", "content": "x"}], occurred_at=past)
    assert db.execute("SELECT occurred_at FROM agent_memory.episodes").fetchone() == (past,)
