"""Levels of memory in export, erasure and ``facts explain`` (issue 39, item 4): what alice told
the support agent about herself is filed at her person's level; exporting alice includes it
with its level, ``facts explain`` says where it is filed and where it was said, and erasing
alice removes it, as erasing only her support scope does, where it was learned alone (issue 51:
tests/test_derived_erasure.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from agent_memory import MemoryManager, Scope
from agent_memory.settings import Settings

pytestmark = pytest.mark.usefixtures("prefect_harness")

ALICE, SUPPORT, BOB = Scope("alice"), Scope("alice", "support"), Scope("bob", "support")


def said(*texts: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": t} for t in texts]


async def _learned(manager: MemoryManager, db: psycopg.Connection[Any]) -> int:
    """Alice's preference, told to support and filed at her level; its fact id."""
    await manager.record(SUPPORT, said("I prefer answers by email.", "I'm migrating SAP now."))
    await manager.record(BOB, said("I prefer answers by phone."))
    summary = await manager.consolidate()
    assert not summary["failed"], summary
    row = db.execute(
        "SELECT id, user_id, agent_id FROM agent_memory.memory_items"
        " WHERE content = 'User prefers answers by email.'"
    ).fetchone()
    assert row is not None and row[1:] == ("alice", None)
    return int(row[0])


def _contents(db: psycopg.Connection[Any]) -> list[tuple[str | None, str | None, str]]:
    rows = db.execute(
        "SELECT user_id, agent_id, content FROM agent_memory.memory_items ORDER BY content"
    ).fetchall()
    return [tuple(r) for r in rows]  # type: ignore[misc]


async def test_export_and_erase_by_user_cover_the_persons_level(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    fact_id = await _learned(manager, db)
    document = await manager.export_user("alice")
    levels = {d["level"]: d for d in document["scopes"]}
    assert set(levels) == {"user", "user_agent"}
    person = levels["user"]
    assert person["scope"] == ALICE.as_dict()
    assert [f["content"] for f in person["facts"]] == ["User prefers answers by email."]
    # its source is the conversation with support, exported in that scope's document
    (source,) = person["facts"][0]["source_episodes"]
    assert [e["id"] for e in levels["user_agent"]["episodes"]] == [source]
    assert "email" not in json.dumps(levels["user_agent"]["facts"])

    summary = await manager.erase_user("alice")
    erased = sorted(s.scope.label for s in summary.scopes)
    assert erased == ["user=alice", "user=alice agent=support"]
    assert not any(user == "alice" for user, _, _ in _contents(db))
    assert db.execute(
        "SELECT count(*) FROM agent_memory.fact_sources WHERE fact_id = %s", (fact_id,)
    ).fetchone() == (0,)
    assert ("bob", None, "User prefers answers by phone.") in _contents(db)


async def test_erasing_one_agents_scope_takes_the_persons_fact_it_alone_taught(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    fact_id = await _learned(manager, db)
    await manager.erase(SUPPORT)
    # learned from support's conversations only: it goes with them (issue 51)
    assert not any(user == "alice" for user, _, _ in _contents(db))
    assert db.execute(
        "SELECT count(*) FROM agent_memory.memory_items WHERE id = %s", (fact_id,)
    ).fetchone() == (0,)
    dangling = db.execute(
        "SELECT count(*) FROM agent_memory.fact_sources s WHERE NOT EXISTS"
        " (SELECT 1 FROM agent_memory.episodes e WHERE e.id = s.episode_id)"
    ).fetchone()
    assert dangling == (0,)
    assert ("bob", None, "User prefers answers by phone.") in _contents(db)


def test_facts_explain_says_where_a_fact_is_filed_and_where_it_was_said(
    settings: Settings,
    db: psycopg.Connection[Any],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent_memory_deployments import cli

    async def setup() -> int:
        manager = await MemoryManager.create(settings=settings, migrate=False)
        try:
            return await _learned(manager, db)
        finally:
            await manager.close()

    fact_id = asyncio.run(setup())
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)
    result = CliRunner().invoke(cli.app, ["facts", "explain", str(fact_id)])
    assert result.exit_code == 0, result.output
    assert "filed under user=alice (the person's level, shared by all their agents)" in (
        result.output
    )
    assert "from 1 episode(s)" in result.output
    episode = next(line for line in result.output.splitlines() if "episode " in line)
    assert "user=alice agent=support, job " in episode
