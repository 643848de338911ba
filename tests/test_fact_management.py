"""Facts by hand: added directly (no source episode), corrected and forgotten with their history
kept; bad input named, writing nothing."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.errors import InvalidFactError, UnknownFactError

ALEX = Scope(user_id="alex")


async def test_a_fact_added_by_hand_is_injected_and_has_no_source(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    fact = await manager.add_fact(ALEX, "User  prefers email.", importance=0.8, kind="preference")
    assert (fact.content, fact.kind, round(fact.base_importance, 3)) == (
        "User prefers email.",
        "preference",
        0.8,
    )
    frame = await manager.inject(ALEX)
    assert frame.injected_facts == ["User prefers email."]
    assert db.execute("SELECT count(*) FROM agent_memory.fact_sources").fetchone() == (0,)
    again = await manager.add_fact(ALEX, "user prefers email")  # the same fact: reinforced
    assert again.id == fact.id
    assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (1,)


async def test_a_corrected_fact_supersedes_the_old_one_which_stays_as_history(
    manager: MemoryManager,
) -> None:
    old = await manager.add_fact(ALEX, "User lives in Lyon.", importance=0.7, kind="identity")
    new = await manager.update_fact(old.id, "User lives in Paris.")
    assert (new.content, new.kind) == ("User lives in Paris.", "identity")
    assert [f.content for f in await manager.facts(ALEX)] == ["User lives in Paris."]
    history = {f.content: f for f in await manager.facts(ALEX, history=True)}
    assert history["User lives in Lyon."].superseded_by == new.id
    forgotten = await manager.forget_fact(new.id)
    assert forgotten.superseded_at is not None and forgotten.superseded_by is None
    assert await manager.facts(ALEX) == []
    assert len(await manager.facts(ALEX, history=True)) == 2


@pytest.mark.parametrize(
    ("content", "importance", "kind", "needle"),
    [
        ("", 0.5, "general", "content ''"),
        ("User likes tea.", 1.5, "general", "importance 1.5"),
        ("User likes tea.", 0.5, "mood", "kind 'mood'"),
        ("x" * 5000, 0.5, "general", "content 'xxxx"),
    ],
)
async def test_bad_facts_are_named_and_write_nothing(
    manager: MemoryManager,
    db: psycopg.Connection[Any],
    content: str,
    importance: float,
    kind: Any,
    needle: str,
) -> None:
    with pytest.raises(InvalidFactError, match=needle):
        await manager.add_fact(ALEX, content, importance=importance, kind=kind)
    assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (0,)


async def test_an_unknown_or_superseded_fact_is_named(manager: MemoryManager) -> None:
    with pytest.raises(UnknownFactError, match="424242"):
        await manager.update_fact(424242, "User likes tea.")
    fact = await manager.add_fact(ALEX, "User likes tea.")
    await manager.forget_fact(fact.id)
    with pytest.raises(UnknownFactError, match=str(fact.id)):
        await manager.forget_fact(fact.id)


def test_the_facts_commands_add_list_search_edit_and_forget(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)
    run = CliRunner().invoke
    added = run(cli.app, ["facts", "add", "User runs SAP S/4HANA.", "--user", "cli-facts"])
    assert added.exit_code == 0 and "User runs SAP S/4HANA." in added.output
    fact_id = int(added.output.split()[1].rstrip(":"))
    listed = run(cli.app, ["facts", "list", "--user", "cli-facts"])
    assert listed.exit_code == 0 and f"{fact_id}" in listed.output and "SAP" in listed.output
    found = run(cli.app, ["facts", "search", "Which SAP system?", "--user", "cli-facts"])
    assert found.exit_code == 0 and "SAP" in found.output
    edited = run(cli.app, ["facts", "edit", str(fact_id), "User runs SAP ECC."])
    assert edited.exit_code == 0 and f"replaces fact {fact_id}" in edited.output
    gone = run(cli.app, ["facts", "forget", str(fact_id)])
    assert gone.exit_code == 2 and f"no current fact with id {fact_id}" in gone.output
    bad = run(cli.app, ["facts", "add", "", "--user", "cli-facts"])
    assert bad.exit_code == 2 and "content ''" in bad.output
    no_scope = run(cli.app, ["facts", "list"])
    assert no_scope.exit_code == 2


# kinds whose half-lives differ: the fact that lasts longest (identity, 365 days) is the least
# important today, so the order of expiry is not the order of importance
LASTING = [
    ("User is called Alex.", 0.7, "identity"),
    ("User prefers email.", 0.8, "preference"),
    ("User meets Sam on Friday.", 0.9, "plan"),
]


async def test_facts_are_listed_most_important_first_whatever_their_expiry(
    manager: MemoryManager,
) -> None:
    for content, importance, kind in LASTING:
        await manager.add_fact(ALEX, content, importance=importance, kind=kind)
    listed = await manager.facts(ALEX)
    assert [f.content for f in listed] == [c for c, _, _ in reversed(LASTING)]
    assert [f.importance for f in listed] == sorted((f.importance for f in listed), reverse=True)


def test_facts_list_shows_the_most_important_first(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)
    run = CliRunner().invoke
    for content, importance, kind in LASTING:
        added = run(cli.app, ["facts", "add", content, "--user", "alex", "--kind", kind,
                              "--importance", str(importance)])  # fmt: skip
        assert added.exit_code == 0, added.output
    listed = run(cli.app, ["facts", "list", "--user", "alex"])
    assert listed.exit_code == 0, listed.output
    shown = [line for line in listed.output.splitlines() if "User " in line]
    importances = [float(line.split("│")[-2]) for line in shown]
    assert importances == [0.9, 0.8, 0.7], listed.output
