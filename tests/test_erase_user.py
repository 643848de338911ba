"""Erasing a person (issue 37, item 1): every scope whose user is theirs (any agent or
workflow), their checkpoint threads (by the scope the thread carries in its state or
configuration, or by its id) and their Store items go, from the API, the command line and the
MCP server; an export covers the same scopes. The outside probe's case: data in the scope
``(A, support)`` and a checkpoint thread of it survived ``erase --user A``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from typer.testing import CliRunner

from agent_memory import MemoryManager, Scope
from agent_memory.erasure import ErasureSummary
from agent_memory.errors import InvalidScopeError, UnknownScopeError
from agent_memory.settings import Settings
from tests.test_erasure import holding

pytestmark = pytest.mark.usefixtures("prefect_harness")

A, B = "probe-a", "probe-b"
# an account number: a token the English stemmer keeps verbatim, so every copy is findable
ACCOUNT, OTHER = "acct55170933", "acct90210771"
# in the order erasure and export list them: the person's own scope, then by workflow, agent
A_SCOPES = [Scope(A), Scope(A, None, "onboarding"), Scope(A, "support")]


def _agent(state: dict[str, Any]) -> dict[str, Any]:
    facts = state.get("working_memory", {}).get("injected_facts", [])
    return {"messages": [AIMessage(f"I remember: {'; '.join(facts)}")]}


async def remember(manager: MemoryManager, user: str, marker: str) -> None:
    """The probe's setup for ``user``: conversations in three scopes, consolidated; a failed
    job whose error quotes the conversation; a Store item of the support agent; a thread of
    the support agent whose state names the scope (with the working memory injected from
    it), and one whose configuration does."""
    for scope in (Scope(user), Scope(user, "support"), Scope(user, None, "onboarding")):
        await manager.record(scope, [{"role": "user", "content": f"I love {marker} tea."}])
    await manager.record(
        Scope(user, "support"), [{"role": "user", "content": f"I use {marker} at work."}]
    )
    await manager.consolidate()
    pool = await manager.backend.apool()
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO agent_memory.consolidation_jobs"
            " (user_id, agent_id, status, error, finished_at)"
            " VALUES (%s, 'support', 'failed', %s, now())",
            (user, f"model refused: 'My account is {marker}'"),
        )
    store = manager.store(agent_id="support")
    await store.aput(("memories", user), "bank", {"content": f"Account number {marker}"})

    plain = StateGraph(MessagesState)
    plain.add_node("reply", lambda s: {"messages": [AIMessage(f"Noted {marker}")]})
    plain.add_edge(START, "reply")
    async with manager.checkpointer() as saver:
        app = manager.graph(_agent).compile(checkpointer=saver)
        await app.ainvoke(
            {"user_id": user, "agent_id": "support", "messages": [HumanMessage(f"{marker}?")]},
            {"configurable": {"thread_id": f"ticket-{user}"}},
        )
        config = {"configurable": {"thread_id": f"chat-{user}", "user_id": user}}
        await plain.compile(checkpointer=saver).ainvoke(
            {"messages": [("user", f"about {marker}")]},
            config,  # type: ignore[arg-type]
        )


def threads(db: psycopg.Connection[Any]) -> set[str]:
    rows = db.execute("SELECT DISTINCT thread_id FROM agent_memory_checkpoints.checkpoints")
    return {r[0] for r in rows.fetchall()}


async def test_erasing_a_person_takes_every_scope_of_theirs_and_their_threads(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await remember(manager, A, ACCOUNT)
    await remember(manager, B, OTHER)
    before = holding(db, ACCOUNT)
    # the account number was where the probe found it, in the scope (A, support) too
    for where in (
        "agent_memory.episodes.messages",
        "agent_memory.memory_items.content",
        "agent_memory.snippets.content",
        "agent_memory.extraction_cache.facts",
        "agent_memory.consolidation_jobs.error",
        "agent_memory.store_items.value",
        "agent_memory_checkpoints.checkpoint_blobs.blob",
        "agent_memory_checkpoints.checkpoint_writes.blob",
    ):
        assert any(k.startswith(where) for k in before), (where, before)
    kept = holding(db, OTHER)

    summary = await manager.erase_user(A)

    assert isinstance(summary, ErasureSummary)
    assert holding(db, ACCOUNT) == {}
    assert holding(db, OTHER) == kept
    assert [s.scope for s in summary.scopes] == A_SCOPES
    assert {t for s in summary.scopes for t in s.threads} == {f"ticket-{A}", f"chat-{A}"}
    assert threads(db) == {f"ticket-{B}", f"chat-{B}"}
    # four conversations recorded, one by the graph's record node
    assert summary.removed["episodes"] == 5 and summary.removed["store_items"] == 1
    # one record per scope, each without content
    assert db.execute("SELECT count(*) FROM agent_memory.erasures").fetchone() == (3,)
    with pytest.raises(UnknownScopeError, match=f"user={A}"):
        await manager.erase_user(A)


async def test_an_agent_or_workflow_narrows_the_erasure_of_a_person(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await remember(manager, A, ACCOUNT)
    summary = await manager.erase_user(A, agent_id="support")
    assert [s.scope for s in summary.scopes] == [Scope(A, "support")]
    # the support agent's thread went; the thread configured with the user alone stayed
    assert threads(db) == {f"chat-{A}"}
    assert await manager.facts(Scope(A, "support")) == []
    # the other scopes keep their conversations, and the person's level its fact (the
    # preference each conversation stated is filed there: issue 39's levels)
    assert await manager.facts(Scope(A))
    kept = db.execute(
        "SELECT agent_id, workflow_id FROM agent_memory.episodes WHERE user_id = %s"
        " ORDER BY workflow_id NULLS FIRST",
        (A,),
    ).fetchall()
    assert kept == [(None, None), (None, "onboarding")]
    summary = await manager.erase_user(A, workflow_id="onboarding")
    assert [s.scope for s in summary.scopes] == [Scope(A, None, "onboarding")]
    with pytest.raises(UnknownScopeError, match=f"user={A} agent=nobody"):
        await manager.erase_user(A, agent_id="nobody")
    with pytest.raises(InvalidScopeError, match="user_id is an empty string"):
        await manager.erase_user("")
    # the exact scope, as before: (A) alone, with the thread its configuration names
    removed = await manager.erase(Scope(A))
    assert removed["episodes"] == 1 and removed["checkpoints"] >= 1
    assert threads(db) == set()


async def test_an_export_of_a_person_covers_every_scope_of_theirs(
    manager: MemoryManager,
) -> None:
    await remember(manager, A, ACCOUNT)
    await remember(manager, B, OTHER)
    document = await manager.export_user(A)
    assert document["user_id"] == A
    assert [d["scope"] for d in document["scopes"]] == [s.as_dict() for s in A_SCOPES]
    support = document["scopes"][2]
    assert len(support["episodes"]) == 3 and support["store_items"]
    assert sorted(t["thread_id"] for t in document["checkpoint_threads"]) == [
        f"chat-{A}",
        f"ticket-{A}",
    ]
    assert OTHER not in json.dumps(document)
    narrowed = await manager.export_user(A, agent_id="support")
    assert [d["scope"] for d in narrowed["scopes"]] == [Scope(A, "support").as_dict()]
    with pytest.raises(UnknownScopeError, match="user=nobody"):
        await manager.export_user("nobody")


def test_the_commands_erase_and_export_every_scope_of_the_user(
    settings: Settings,
    database_url: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent_memory_deployments import cli

    async def setup() -> None:
        manager = await MemoryManager.create(settings=settings, migrate=False)
        try:
            await remember(manager, A, ACCOUNT)
        finally:
            await manager.close()

    asyncio.run(setup())
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)
    runner = CliRunner()
    exported = runner.invoke(cli.app, ["export", "--user", A])
    assert exported.exit_code == 0, exported.output
    scopes = [d["scope"] for d in json.loads(exported.output)["scopes"]]
    assert scopes == [s.as_dict() for s in A_SCOPES]

    done = runner.invoke(cli.app, ["erase", "--user", A, "--yes"])
    assert done.exit_code == 0, done.output
    for scope in A_SCOPES:
        assert f"erased {scope.label}:" in done.output
    assert holding(db, ACCOUNT) == {}
    gone = runner.invoke(cli.app, ["export", "--user", A])
    assert gone.exit_code == 2 and f"user={A}" in gone.output
