"""Backfilling from LangGraph checkpoint threads: each thread once, then only what is new, and
threads that do not fit the pattern named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_memory.backfill import import_checkpoints
from agent_memory.errors import BackfillError
from tests.test_backfill import (
    count,
)

# ---- LangGraph checkpoint threads ---------------------------------------------------------


def chat(database_url: str) -> Any:
    """A one-node LangGraph chat on a PostgresSaver in the test's database."""
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from psycopg.rows import dict_row

    conn = psycopg.connect(database_url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)  # type: ignore[arg-type]
    saver.setup()

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"Noted: {state['messages'][-1].content}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver), conn


def say(graph: Any, thread: str, text: str) -> None:
    graph.invoke(
        {"messages": [{"role": "user", "content": text}]},
        {"configurable": {"thread_id": thread}},
    )


def test_checkpoint_threads_import_once_and_then_only_what_is_new(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    graph, conn = chat(database_url)
    try:
        say(graph, "alice:support", "My home city is Paris.")
        say(graph, "alice:support", "I prefer window seats.")
        say(graph, "bob:travel", "I prefer trains.")
        pattern = r"(?P<user_id>[^:]+):(?P<agent_id>.+)"
        first = import_checkpoints(db, database_url, pattern=pattern)
        assert (first.lines, first.inserted, first.bad) == (2, 2, [])
        rows = db.execute(
            "SELECT user_id, agent_id, message_count, messages, source_key"
            " FROM agent_memory.episodes ORDER BY user_id"
        ).fetchall()
        assert [(r[0], r[1], r[2]) for r in rows] == [("alice", "support", 4), ("bob", "travel", 2)]
        assert rows[0][3][0]["content"] == "My home city is Paris."
        assert rows[0][3][0]["role"] == "user" and rows[0][3][1]["role"] == "assistant"
        assert rows[0][4] == "thread:alice:support:0"
        again = import_checkpoints(db, database_url, pattern=pattern)
        assert (again.inserted, again.duplicates) == (0, 2)
        # the conversation went on: only its continuation is new
        say(graph, "alice:support", "Actually, my home city is Lyon.")
        more = import_checkpoints(db, database_url, pattern=pattern)
        assert (more.inserted, more.duplicates) == (1, 1)
        latest = db.execute(
            "SELECT message_count, messages->0->>'content', source_key FROM agent_memory.episodes"
            " ORDER BY id DESC LIMIT 1"
        ).fetchone()
        assert latest == (2, "Actually, my home city is Lyon.", "thread:alice:support:4")
    finally:
        conn.close()


def test_threads_that_do_not_fit_the_pattern_are_named(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    graph, conn = chat(database_url)
    try:
        say(graph, "alice:support", "I prefer tea.")
        say(graph, "no-colon-here", "I prefer coffee.")
        pattern = r"(?P<user_id>[^:]+):(?P<agent_id>.+)"
        with pytest.raises(BackfillError, match=r"thread 'no-colon-here': does not match") as bad:
            import_checkpoints(db, database_url, pattern=pattern)
        assert str(bad.value).endswith("(use on_error='skip' to import the other threads)")
        assert count(db) == 0  # nothing half-imported
        skipped = import_checkpoints(db, database_url, pattern=pattern, on_error="skip")
        assert skipped.inserted == 1 and [b.thread for b in skipped.bad] == ["no-colon-here"]
        # no pattern: the thread id is the user id
        plain = import_checkpoints(db, database_url)
        assert plain.inserted == 2
    finally:
        conn.close()
    with pytest.raises(BackfillError, match="must name groups among user_id"):
        import_checkpoints(db, database_url, pattern=r"(?P<tenant>.+)")
    with pytest.raises(BackfillError, match="is not a regular expression"):
        import_checkpoints(db, database_url, pattern=r"(?P<user_id>")
    with pytest.raises(BackfillError, match="cannot reach the checkpoint database"):
        import_checkpoints(db, f"postgresql://nobody:pw@/nodb?host={tmp_path}")
    with pytest.raises(BackfillError, match="no 'checkpoints' table"):
        fresh = psycopg.conninfo.make_conninfo(database_url)  # a database without a saver
        db.execute("DROP TABLE IF EXISTS checkpoints CASCADE")
        import_checkpoints(db, fresh)
