"""Erasure that leaves nothing: after a scope is erased, no text, JSONB or bytea column of any
table in the database holds a marker its conversations carried (checkpoint threads, vectors'
tables, the job rows and the cached answers included), the other scopes are untouched, and
what stays is a record of the erasure without content."""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from typer.testing import CliRunner

from agent_memory import MemoryManager, Scope
from agent_memory.errors import UnknownScopeError

pytestmark = pytest.mark.usefixtures("prefect_harness")

GONE, KEPT = Scope(user_id="erase-me"), Scope(user_id="keep-me")
# words the English stemmer leaves as they are, so the full-text vectors hold them verbatim
MARKER, OTHER = "zqxjkv", "wvbnmq"
COLUMNS = """
SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns
WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
  AND data_type IN ('text', 'character varying', 'json', 'jsonb', 'bytea', 'tsvector')
"""


def holding(db: psycopg.Connection[Any], marker: str) -> dict[str, int]:
    """Every column of every table that holds ``marker``, with how many rows."""
    found = {}
    for schema, table, column, kind in db.execute(COLUMNS).fetchall():
        if kind == "bytea":
            test = f"position(convert_to(%s, 'UTF8') IN \"{column}\") > 0"
        else:
            test = f"\"{column}\"::text ILIKE '%%' || %s || '%%'"
        query = f'SELECT count(*) FROM "{schema}"."{table}" WHERE {test}'  # noqa: S608 - names from the catalog
        (count,) = db.execute(query, (marker,)).fetchone() or (0,)
        if count:
            found[f"{schema}.{table}.{column}"] = count
    return found


async def remember(manager: MemoryManager, scope: Scope, marker: str) -> None:
    """Two conversations with the marker, consolidated (facts, vectors, jobs, cached answers),
    and a checkpoint thread whose id is the scope's user."""
    await manager.record(scope, [{"role": "user", "content": f"I love {marker} tea."}])
    await manager.record(scope, [{"role": "user", "content": f"I use {marker} at work."}])

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"Noted: {state['messages'][-1].content}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    async with manager.checkpointer() as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": scope.user_id}}
        await graph.ainvoke({"messages": [("user", f"My {marker} notes")]}, config)  # type: ignore[arg-type]
    # and through the Store: a memory (a fact) and a document of the scope's own
    store = manager.store()
    await store.aput(("memories", str(scope.user_id)), "m1", {"content": f"Owns a {marker} bike"})
    await store.aput(("memories", str(scope.user_id), "profile"), "p", {"note": f"{marker} fan"})


async def test_an_erased_scope_leaves_nothing_and_the_others_stay(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await remember(manager, GONE, MARKER)
    await remember(manager, KEPT, OTHER)
    summary = await manager.consolidate()
    assert summary["completed"] == 2
    before = holding(db, MARKER)
    # the marker was everywhere memory keeps things: episodes, facts, messages, jobs' cached
    # answers and checkpoints (the test would prove nothing otherwise)
    for where in (
        "agent_memory.episodes.messages",
        "agent_memory.memory_items.content",
        "agent_memory.snippets.content",
        "agent_memory.extraction_cache.facts",
        "agent_memory.store_items.value",
        "agent_memory_checkpoints.checkpoint_blobs.blob",
    ):
        assert any(k.startswith(where) for k in before), (where, before)
    kept = holding(db, OTHER)

    removed = await manager.erase(GONE)

    assert holding(db, MARKER) == {}
    assert holding(db, OTHER) == kept
    assert removed["episodes"] == 2 and removed["memory_items"] >= 2 and removed["checkpoints"] >= 1
    assert [f.content for f in await manager.facts(GONE)] == []
    assert len(await manager.facts(KEPT)) >= 2
    record = db.execute(
        "SELECT scope_key_sha256, rows_removed FROM agent_memory.erasures"
    ).fetchall()
    # the record counts the scope's rows; what went from Prefect's database, and the facts of
    # other levels learned there (none here: each level's own record), are returned too
    assert removed["derived_facts"] == 0
    derived = ("derived_facts", "revived_facts")
    in_postgres = {
        k: n for k, n in removed.items() if not k.startswith("prefect_") and k not in derived
    }
    assert record == [(hashlib.sha256(GONE.label.encode()).digest(), in_postgres)]


async def test_erasing_a_scope_memory_knows_nothing_of_is_refused_and_writes_nothing(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    with pytest.raises(UnknownScopeError, match="user=nobody"):
        await manager.erase(Scope(user_id="nobody"))
    assert db.execute("SELECT count(*) FROM agent_memory.erasures").fetchone() == (0,)


def test_the_erase_command_asks_first_and_names_an_unknown_scope(
    database_url: str, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)
    db.execute(
        "INSERT INTO agent_memory.episodes (user_id, messages, message_count)"
        ' VALUES (\'cli-erase\', \'[{"role": "user", "content": "hi"}]\', 1)'
    )
    runner = CliRunner()
    declined = runner.invoke(cli.app, ["erase", "--user", "cli-erase"], input="n\n")
    assert declined.exit_code == 1 and "nothing erased" in declined.output
    assert db.execute("SELECT count(*) FROM agent_memory.episodes").fetchone() == (1,)
    done = runner.invoke(cli.app, ["erase", "--user", "cli-erase", "--yes"])
    assert done.exit_code == 0 and "erased user=cli-erase:" in done.output
    assert "1 episodes" in done.output
    unknown = runner.invoke(cli.app, ["erase", "--user", "cli-erase", "--yes"])
    assert unknown.exit_code == 2 and "user=cli-erase" in unknown.output
    no_scope = runner.invoke(cli.app, ["erase", "--yes"])
    assert no_scope.exit_code == 2


async def test_an_export_holds_the_facts_with_history_and_provenance_and_the_episodes(
    manager: MemoryManager,
) -> None:
    await remember(manager, GONE, MARKER)
    await manager.consolidate()
    document = await manager.export(GONE)
    assert document["scope"] == GONE.as_dict()
    assert [len(e["messages"]) for e in document["episodes"]] == [1, 1]
    assert all(e["summary"] for e in document["episodes"])
    episode_ids = {e["id"] for e in document["episodes"]}
    # the conversations' facts name their episodes; the one put through the Store, none
    direct = [f for f in document["facts"] if not f["source_episodes"]]
    assert [f["content"] for f in direct] == [f"Owns a {MARKER} bike"]
    assert all(set(f["source_episodes"]) <= episode_ids for f in document["facts"])
    assert all(MARKER in f["content"] for f in document["facts"])
    assert {(tuple(i["namespace"]), i["key"]) for i in document["store_items"]} == {
        (("memories", "erase-me"), "m1"),
        (("memories", "erase-me", "profile"), "p"),
    }
    with pytest.raises(UnknownScopeError, match="user=nobody"):
        await manager.export(Scope(user_id="nobody"))


def test_the_export_command_prints_one_json_document(
    database_url: str, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", database_url)
    db.execute(
        "INSERT INTO agent_memory.episodes (user_id, messages, message_count)"
        ' VALUES (\'cli-export\', \'[{"role": "user", "content": "hi"}]\', 1)'
    )
    done = CliRunner().invoke(cli.app, ["export", "--user", "cli-export"])
    assert done.exit_code == 0, done.output
    [document] = json.loads(done.output)["scopes"]  # every scope of the user: one here
    assert document["scope"]["user_id"] == "cli-export" and len(document["episodes"]) == 1
    # --exact: that scope's document alone, as export(scope) gives it
    exact = CliRunner().invoke(cli.app, ["export", "--user", "cli-export", "--exact"])
    assert exact.exit_code == 0, exact.output
    assert json.loads(exact.output)["episodes"] == document["episodes"]
    unknown = CliRunner().invoke(cli.app, ["export", "--user", "nobody"])
    assert unknown.exit_code == 2 and "user=nobody" in unknown.output
