"""What was learned goes with what it was learned from (issue 51, items 1 to 3): erasing a
person's conversations with one agent erases the facts filed at the person's level that those
conversations alone taught, through the API, the command line and a Store namespace (the MCP
server's ``delete_all_memories``: tests/test_derived_erasure_mcp.py), while a fact another
conversation or a hand supports stays, without the erased sources; a dry run and a narrowed
export say the same beforehand, writing nothing. The outside probe's case: after ``erase
--user erase-me --agent bar`` two facts of the marker were still live at ``(erase-me)``, with
no source."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from agent_memory import MemoryManager, Scope
from agent_memory.db.store import fact_of_key
from agent_memory.errors import InvalidStoreRequestError
from agent_memory.settings import Settings
from tests.test_erasure import holding

pytestmark = pytest.mark.usefixtures("prefect_harness")

MARK, OTHER = "zebramarker42", "quaggamarker77"
PERSON, BAR, SUPPORT = Scope("erase-me"), Scope("erase-me", "bar"), Scope("erase-me", "support")
KEEP = Scope("keep-me", "bar")
ENTHUSIAST, TEA = f"User is a {MARK} enthusiast.", f"User prefers {MARK} tea."


def said(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def told(manager: MemoryManager, *, also_support: bool = False) -> None:
    """The probe's two conversations (and, with ``also_support``, the same preference told to
    another agent of the person's), consolidated by the offline extractor: identity and
    preference facts are filed at the person's level."""
    await manager.record(BAR, said(f"I'm a {MARK} enthusiast and I prefer {MARK} tea."))
    await manager.record(KEEP, said(f"I'm a {OTHER} enthusiast and I prefer {OTHER} coffee."))
    if also_support:
        await manager.record(SUPPORT, said(f"I prefer {MARK} tea."))
    summary = await manager.consolidate()
    assert not summary["failed"], summary


def facts_of(db: psycopg.Connection[Any], user: str) -> dict[str, tuple[str | None, list[int]]]:
    """The user's facts (current or not): content -> (agent, source episodes)."""
    rows = db.execute(
        "SELECT m.content, m.agent_id, coalesce(array_agg(s.episode_id ORDER BY s.episode_id)"
        " FILTER (WHERE s.episode_id IS NOT NULL), '{}')"
        " FROM agent_memory.memory_items m"
        " LEFT JOIN agent_memory.fact_sources s ON s.fact_id = m.id"
        " WHERE m.user_id = %s GROUP BY m.id",
        (user,),
    ).fetchall()
    return {r[0]: (r[1], list(r[2])) for r in rows}


def episode_of(db: psycopg.Connection[Any], scope: Scope) -> int:
    row = db.execute(
        "SELECT id FROM agent_memory.episodes WHERE user_id = %s AND agent_id = %s",
        (scope.user_id, scope.agent_id),
    ).fetchone()
    assert row is not None
    return int(row[0])


async def test_erasing_one_agent_takes_the_facts_its_conversations_taught_at_any_level(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await told(manager)
    learned = facts_of(db, "erase-me")
    assert learned.keys() == {ENTHUSIAST, TEA}
    assert all(agent is None for agent, _ in learned.values())  # the person's level

    summary = await manager.erase_user("erase-me", agent_id="bar")

    assert holding(db, MARK) == {}  # no row anywhere holds the marker
    assert holding(db, OTHER)  # the other user's stays
    assert {(f.scope, f.content) for f in summary.derived.gone} == {
        (PERSON, ENTHUSIAST),
        (PERSON, TEA),
    }
    assert summary.derived.kept == () and summary.derived.counts()["derived_facts"] == 2
    assert summary.files.wal == "released"
    # the person's level has a record of what went there, without content
    records = db.execute("SELECT rows_removed FROM agent_memory.erasures ORDER BY id").fetchall()
    assert {"gone_facts": 2} in [r[0] for r in records]


async def test_a_fact_another_conversation_supports_stays_with_that_source_alone(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await told(manager, also_support=True)
    support, bar = episode_of(db, SUPPORT), episode_of(db, BAR)
    assert sorted(facts_of(db, "erase-me")[TEA][1]) == sorted([bar, support])

    summary = await manager.erase_user("erase-me", agent_id="bar")

    assert facts_of(db, "erase-me") == {TEA: (None, [support])}
    assert [(f.content, f.sources_left, f.by_hand) for f in summary.derived.kept] == [
        (TEA, 1, False)
    ]
    assert [f.content for f in summary.derived.gone] == [ENTHUSIAST]
    # inject still knows it, for every agent of the person's
    frame = await manager.inject(Scope("erase-me", "billing"), query=f"which {MARK} drink?")
    assert TEA in frame.injected_facts
    assert ENTHUSIAST not in frame.injected_facts


async def test_a_dry_run_and_a_narrowed_export_say_what_the_erasure_then_does(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await told(manager, also_support=True)
    before = holding(db, MARK)
    records = db.execute("SELECT count(*) FROM agent_memory.erasures").fetchone()

    planned = await manager.erase_user("erase-me", agent_id="bar", dry_run=True)
    exported = await manager.export_user("erase-me", agent_id="bar")

    assert planned.dry_run
    assert holding(db, MARK) == before  # nothing written
    assert db.execute("SELECT count(*) FROM agent_memory.erasures").fetchone() == records
    assert [s.scope for s in planned.scopes] == [BAR]
    assert planned.scopes[0].removed["episodes"] == 1
    by_level = planned.derived.by_level()
    assert list(by_level) == [PERSON]
    assert [f.content for f in by_level[PERSON]["gone"]] == [ENTHUSIAST]
    assert [f.content for f in by_level[PERSON]["kept"]] == [TEA]
    # the export lists the same facts, filed at the person's level, with what erasure does
    assert {(d["content"], d["level"], d["erasure"]) for d in exported["derived_facts"]} == {
        (ENTHUSIAST, "user", "removes"),
        (TEA, "user", "keeps"),
    }

    done = await manager.erase_user("erase-me", agent_id="bar")
    assert [f.id for f in done.derived.gone] == [f.id for f in planned.derived.gone]
    assert [f.id for f in done.derived.kept] == [f.id for f in planned.derived.kept]
    removes = {d["id"] for d in exported["derived_facts"] if d["erasure"] == "removes"}
    assert removes == {f.id for f in done.derived.gone}


async def test_a_fact_written_by_hand_is_its_own_source(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    # written by hand at the person's level, then said in the conversation too
    by_hand = await manager.add_fact(PERSON, TEA, kind="preference")
    await told(manager)
    assert facts_of(db, "erase-me")[TEA][1] == [episode_of(db, BAR)]

    summary = await manager.erase_user("erase-me", agent_id="bar")

    assert facts_of(db, "erase-me") == {TEA: (None, [])}
    assert [(f.id, f.by_hand) for f in summary.derived.kept] == [(by_hand.id, True)]
    # erasing the scope it is filed in takes it
    removed = await manager.erase(PERSON)
    assert removed["memory_items"] == 1
    assert holding(db, MARK) == {}


async def test_a_store_row_that_shows_a_learned_fact_goes_with_it(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await told(manager)
    store = manager.store()
    (tea,) = [i for i in await store.asearch(("memories", "erase-me")) if "tea" in str(i.value)]
    # the item LangMem would write back: the shown fact's key, the same words
    await store.aput(("memories", "erase-me"), tea.key, {"content": TEA})
    assert db.execute(
        "SELECT count(*) FROM agent_memory.store_items WHERE fact_id IS NOT NULL"
    ).fetchone() == (1,)

    await manager.erase_user("erase-me", agent_id="bar")

    assert await store.aget(("memories", "erase-me"), tea.key) is None
    assert await store.asearch(("memories", "erase-me"), query=f"{MARK} tea") == []
    assert holding(db, MARK) == {}
    # the item was the fact's: its key names the fact that went
    assert fact_of_key(tea.key) not in {
        r[0] for r in db.execute("SELECT id FROM agent_memory.memory_items").fetchall()
    }


def test_the_command_line_lists_then_erases_what_was_learned(
    settings: Settings,
    db: psycopg.Connection[Any],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent_memory_deployments import cli

    async def setup() -> None:
        manager = await MemoryManager.create(settings=settings, migrate=False)
        try:
            await told(manager, also_support=True)
        finally:
            await manager.close()

    asyncio.run(setup())
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)
    before = holding(db, MARK)
    runner = CliRunner()

    planned = runner.invoke(cli.app, ["erase", "--user", "erase-me", "--agent", "bar", "--dry-run"])

    assert planned.exit_code == 0, planned.output
    assert "would erase user=erase-me agent=bar: " in planned.output
    assert "user=erase-me: 1 facts learned only there, would be erased" in planned.output
    assert f": {ENTHUSIAST}" in planned.output
    assert "user=erase-me: 1 facts other conversations support, kept" in planned.output
    assert f": {TEA} (1 other source(s))" in planned.output
    assert "dry run: nothing was written" in planned.output
    assert holding(db, MARK) == before

    done = runner.invoke(cli.app, ["erase", "--user", "erase-me", "--agent", "bar", "--yes"])

    assert done.exit_code == 0, done.output
    assert "user=erase-me: 1 facts learned only there, erased" in done.output
    assert ENTHUSIAST not in done.output  # the words are shown before, not after
    assert set(facts_of(db, "erase-me")) == {TEA}


async def test_erasing_a_store_namespace_takes_what_its_conversations_taught(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await told(manager)
    before = holding(db, MARK)
    # a namespace that is no scope's memory namespace is refused, naming it
    for namespace in (("docs", "erase-me"), ("memories", "erase-me", "notes")):
        with pytest.raises(InvalidStoreRequestError, match=re.escape(repr(namespace))):
            await manager.erase_namespace(namespace, agent_id="bar")
    assert holding(db, MARK) == before

    # the bar agent's store (manager.store(agent_id="bar")) reads ("memories", "erase-me") as
    # the scope (erase-me, bar): erasing that namespace is erasing the scope
    planned = await manager.erase_namespace(("memories", "erase-me"), agent_id="bar", dry_run=True)
    assert [s.scope for s in planned.scopes] == [BAR]
    assert {f.content for f in planned.derived.gone} == {ENTHUSIAST, TEA}
    assert holding(db, MARK) == before

    await manager.erase_namespace(("memories", "erase-me"), agent_id="bar")
    assert holding(db, MARK) == {}
    assert holding(db, OTHER)


def test_the_facts_an_earlier_erasure_left_behind_are_listed_then_erased(
    settings: Settings,
    db: psycopg.Connection[Any],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent_memory_deployments import cli

    async def setup() -> None:
        manager = await MemoryManager.create(settings=settings, migrate=False)
        try:
            await told(manager)
            await manager.add_fact(PERSON, f"User collects {MARK} stamps.")  # by hand: stays
        finally:
            await manager.close()

    asyncio.run(setup())
    # what an erasure of (erase-me, bar) did before schema 31: the scope's rows and the
    # sources went, the facts it taught the person's level stayed
    for statement in (
        "DELETE FROM agent_memory.fact_sources",
        "DELETE FROM agent_memory.episodes WHERE agent_id = 'bar' AND user_id = 'erase-me'",
        "DELETE FROM agent_memory.consolidation_jobs WHERE user_id = 'erase-me'",
    ):
        db.execute(statement)
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)
    runner = CliRunner()

    listed = runner.invoke(cli.app, ["levels", "left-behind"])

    assert listed.exit_code == 0, listed.output
    assert "user=erase-me: 2 facts learned only there, would be erased" in listed.output
    assert f": {ENTHUSIAST}" in listed.output and f": {TEA}" in listed.output
    assert "stamps" not in listed.output
    assert "dry run: nothing was written" in listed.output
    assert set(facts_of(db, "erase-me")) == {ENTHUSIAST, TEA, f"User collects {MARK} stamps."}

    erased = runner.invoke(cli.app, ["levels", "left-behind", "--erase", "--yes"])

    assert erased.exit_code == 0, erased.output
    assert "user=erase-me: 2 facts learned only there, erased" in erased.output
    assert set(facts_of(db, "erase-me")) == {f"User collects {MARK} stamps."}
    # the other user's facts have their sources gone too (deleted above) but their job
    # stands: nothing says an erasure left them, so they stay
    assert {c for c, _ in facts_of(db, "keep-me").items()} == {
        f"User is a {OTHER} enthusiast.",
        f"User prefers {OTHER} coffee.",
    }
    again = runner.invoke(cli.app, ["levels", "left-behind"])
    assert "no fact was left behind by an erasure" in again.output


def test_the_probes_sequence_through_the_command_line_leaves_no_row_with_the_marker(
    database_url: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Finding 1 as the probe ran it: import two conversations, consolidate, erase the one
    agent's scope of erase-me."""
    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)
    history = tmp_path / "history.jsonl"
    lines = [
        {
            "user_id": "erase-me",
            "agent_id": "bar",
            "occurred_at": "2026-03-01T09:30:00+00:00",
            "messages": said(f"I'm a {MARK} enthusiast and I prefer {MARK} tea."),
        },
        {
            "user_id": "keep-me",
            "agent_id": "bar",
            "occurred_at": "2026-03-01T09:30:00+00:00",
            "messages": said(f"I'm a {OTHER} enthusiast and I prefer {OTHER} coffee."),
        },
    ]
    history.write_text("".join(json.dumps(line) + "\n" for line in lines))
    runner = CliRunner()
    for command in (
        ["backfill", "import", str(history)],
        ["consolidate"],
        ["erase", "--user", "erase-me", "--agent", "bar", "--yes"],
    ):
        result = runner.invoke(cli.app, command)
        assert result.exit_code == 0, (command, result.output)
    assert "user=erase-me: 2 facts learned only there, erased" in result.output
    assert holding(db, MARK) == {}
    assert holding(db, OTHER)
