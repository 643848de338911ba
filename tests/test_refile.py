"""Re-filing facts written before levels of memory (issue 39, item 5): the flow
``memory-refile`` and ``agent-memory levels refile`` move each current fact to the level
consolidation would file it at today (identity and preferences: the person's), merge it into
the same fact there, and leave situations, history and ``share=exact`` alone."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from agent_memory import MemoryManager, Scope
from agent_memory.db import embeddings
from agent_memory.errors import InvalidScopeError, UnknownScopeError
from agent_memory.settings import MemorySettings, Settings, use_settings

pytestmark = pytest.mark.usefixtures("prefect_harness")

SUPPORT_W1 = Scope("alice", "support", "w1")
BILLING_W2 = Scope("alice", "billing", "w2")
SUPPORT = Scope("alice", "support")
BOB = Scope("bob", "billing", "w2")


def said(*texts: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": t} for t in texts]


async def _written_before_levels(settings: Settings) -> None:
    """Facts as a memory written them before levels: each in the exact scope it was said in
    (consolidated with share=exact, or added directly)."""
    exact = settings.model_copy(update={"memory": MemorySettings(share="exact")})
    manager = await MemoryManager.create(settings=exact, migrate=False)
    try:
        await manager.record(
            SUPPORT_W1,
            said("I prefer answers by email.", "I'm migrating the billing database this week."),
        )
        await manager.record(BILLING_W2, said("I prefer answers by email."))
        summary = await manager.consolidate()
        assert not summary["failed"], summary
        await manager.add_fact(SUPPORT, "User is vegetarian.", kind="identity")
        await manager.add_fact(BILLING_W2, "User likes green tea.", kind="preference")
        await manager.add_fact(SUPPORT_W1, "User is on call this week.", kind="situation")
        await manager.add_fact(BOB, "User prefers answers by phone.", kind="preference")
        # history: superseded facts stay where they are
        old = await manager.add_fact(SUPPORT, "User lives in Lyon.", kind="identity")
        await manager.forget_fact(old.id)
    finally:
        await manager.close()
    use_settings(settings)


def _current(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT user_id, agent_id, workflow_id, content, kind FROM agent_memory.memory_items"
        " WHERE superseded_at IS NULL ORDER BY content, user_id, agent_id, workflow_id"
    ).fetchall()


def _everything(db: psycopg.Connection[Any]) -> list[Any]:
    """All that re-filing may change, to compare before and after."""
    return [
        db.execute(
            "SELECT id, scope_key, importance, importance_at, mentions, half_life,"
            " superseded_at, superseded_by, updated_at, valid_to"
            " FROM agent_memory.memory_items ORDER BY id"
        ).fetchall(),
        db.execute("SELECT * FROM agent_memory.fact_sources ORDER BY 1, 2").fetchall(),
        db.execute(
            "SELECT corpus, scope_key, lexeme, sum(docs), sum(size) FROM agent_memory.term_rows"
            " GROUP BY 1, 2, 3 HAVING sum(docs) <> 0 OR sum(size) <> 0 ORDER BY 1, 2, 3"
        ).fetchall(),
        db.execute(
            "SELECT fact_id, scope_key, scope_tag FROM agent_memory.fact_embeddings ORDER BY 1"
        ).fetchall(),
    ]


def _with_vectors(db: psycopg.Connection[Any]) -> None:
    """A vector for every fact (those the flows did not embed), stored as embedding stores
    them: with its scope's key and tag."""
    assert embeddings.ensure(db) is None
    db.execute(
        "INSERT INTO agent_memory.fact_embeddings (fact_id, scope_key, scope_tag, model,"
        " embedding) SELECT id, scope_key, agent_memory.scope_tag(scope_key), 'test-model',"
        " '[1, 0, 0]'::vector FROM agent_memory.memory_items ON CONFLICT DO NOTHING"
    )


def _counts_hold(db: psycopg.Connection[Any]) -> None:
    """The full-text statistics are those of the facts where they are now."""
    kept = db.execute(
        "SELECT scope_key, lexeme, sum(docs) FROM agent_memory.term_rows WHERE corpus = 'f'"
        " GROUP BY 1, 2 HAVING sum(docs) <> 0 ORDER BY 1, 2"
    ).fetchall()
    recounted = db.execute(
        "SELECT scope_key, lexeme, count(*) FROM agent_memory.memory_items,"
        " unnest(tsvector_to_array(search)) AS lexeme WHERE superseded_at IS NULL"
        " GROUP BY 1, 2 UNION ALL SELECT scope_key, '', count(*) FROM agent_memory.memory_items"
        " WHERE superseded_at IS NULL GROUP BY 1 ORDER BY 1, 2"
    ).fetchall()
    assert kept == recounted


async def test_refile_moves_the_person_to_their_level(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    from agent_memory_flows.refile import RefileParams, refile_flow

    await _written_before_levels(settings)
    _with_vectors(db)
    before = _everything(db)

    planned = await refile_flow(RefileParams(dry_run=True))
    assert _everything(db) == before  # a dry run writes nothing
    assert (planned["moved"], planned["merged"], planned["kept"]) == (4, 1, 0)
    assert planned["dry_run"] is True and planned["share"] == "user"
    by_scope = {r["scope"]: (r["moved"], r["merged"]) for r in planned["results"]}
    assert by_scope == {
        BILLING_W2.label: (2, 0),  # email (the first of the two), green tea
        SUPPORT.label: (1, 0),  # vegetarian
        SUPPORT_W1.label: (0, 1),  # email again: merges into the one billing's moved
        BOB.label: (1, 0),
    }

    done = await refile_flow(RefileParams())
    assert (done["moved"], done["merged"], done["dry_run"]) == (4, 1, False)
    assert {r["scope"]: (r["moved"], r["merged"]) for r in done["results"]} == by_scope
    current = _current(db)
    assert [row for row in current if "migrating" in row[3]] == [
        (
            "alice",
            "support",
            "w1",
            current[0][3],  # (dated by the offline extractor)
            "situation",
        )
    ]
    assert [row for row in current if "migrating" not in row[3]] == [
        ("alice", "support", "w1", "User is on call this week.", "situation"),
        ("alice", None, None, "User is vegetarian.", "identity"),
        ("alice", None, None, "User likes green tea.", "preference"),
        ("alice", None, None, "User prefers answers by email.", "preference"),
        ("bob", None, None, "User prefers answers by phone.", "preference"),
    ]
    # the preference learned through two agents: one fact with both conversations as sources,
    # reinforced as a second mention; the duplicate kept as its history
    fact_id, mentions, agents = db.execute(
        "SELECT f.id, f.mentions, array_agg(e.agent_id ORDER BY e.agent_id)"
        " FROM agent_memory.memory_items f JOIN agent_memory.fact_sources s ON s.fact_id = f.id"
        " JOIN agent_memory.episodes e ON e.id = s.episode_id"
        " WHERE f.content = 'User prefers answers by email.' AND f.superseded_at IS NULL"
        " GROUP BY f.id, f.mentions"
    ).fetchone()
    assert agents == ["billing", "support"] and mentions == 2
    assert db.execute(
        "SELECT user_id, agent_id, workflow_id, superseded_by FROM agent_memory.memory_items"
        " WHERE content = 'User prefers answers by email.' AND superseded_at IS NOT NULL"
    ).fetchall() == [("alice", "support", "w1", fact_id)]
    # history stays where it was
    assert db.execute(
        "SELECT user_id, agent_id FROM agent_memory.memory_items"
        " WHERE content = 'User lives in Lyon.'"
    ).fetchall() == [("alice", "support")]
    # the vectors and the full-text statistics followed the facts
    assert db.execute(
        "SELECT count(*) FROM agent_memory.fact_embeddings e"
        " JOIN agent_memory.memory_items m ON m.id = e.fact_id"
        " WHERE e.scope_key <> m.scope_key OR e.scope_tag <> agent_memory.scope_tag(m.scope_key)"
    ).fetchone() == (0,)
    _counts_hold(db)

    # another agent of the same user knows the person now, not the support task
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        frame = await manager.inject(Scope("alice", "sales", "w9"), query="email tea vegetarian")
    finally:
        await manager.close()
    assert set(frame.injected_facts) == {
        "User prefers answers by email.",
        "User likes green tea.",
        "User is vegetarian.",
    }

    # a second run finds nothing to do, and changes nothing
    after = _everything(db)
    again = await refile_flow(RefileParams())
    assert (again["moved"], again["merged"], again["kept"]) == (0, 0, 0)
    assert _everything(db) == after


async def test_with_share_exact_nothing_moves(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    from agent_memory_flows.refile import RefileParams, refile_flow

    await _written_before_levels(settings)
    before = _everything(db)
    use_settings(settings.model_copy(update={"memory": MemorySettings(share="exact")}))
    try:
        done = await refile_flow(RefileParams())
    finally:
        use_settings(settings)
    assert (done["moved"], done["merged"], done["share"]) == (0, 0, "exact")
    assert _everything(db) == before


async def test_one_user_alone(settings: Settings, db: psycopg.Connection[Any]) -> None:
    from agent_memory_flows.refile import RefileParams, refile_flow

    await _written_before_levels(settings)
    done = await refile_flow(RefileParams(users=["bob"]))
    assert done["results"] == [{"scope": BOB.label, "moved": 1, "merged": 0, "kept": 0}]
    assert ("alice", "billing", "w2", "User likes green tea.", "preference") in _current(db)


async def test_a_bad_user_filter_is_named(settings: Settings, db: psycopg.Connection[Any]) -> None:
    from pydantic import ValidationError

    from agent_memory_flows.refile import RefileParams, refile_flow

    await _written_before_levels(settings)
    before = _everything(db)
    with pytest.raises(ValidationError, match="user filter ''"):
        RefileParams(users=[""])
    with pytest.raises(UnknownScopeError, match="'zed'"):
        await refile_flow(RefileParams(users=["alice", "zed"]))
    assert _everything(db) == before

    from agent_memory_deployments.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["levels", "refile", "--user", "a\x00b", "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "user filter" in result.output and "NUL" in result.output
    with pytest.raises(InvalidScopeError):
        from agent_memory.refile import check_users

        check_users([])


def test_the_command_reports_and_refiles(
    settings: Settings,
    database_url: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    from agent_memory_deployments import cli

    asyncio.run(_written_before_levels(settings))
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)
    app = cli.app
    runner = CliRunner()
    dry = runner.invoke(app, ["levels", "refile", "--dry-run", "--user", "bob"])
    assert dry.exit_code == 0, dry.output
    assert "1 fact(s) would move" in dry.output and BOB.label in dry.output
    assert ("bob", "billing", "w2", "User prefers answers by phone.", "preference") in _current(db)
    done = runner.invoke(app, ["levels", "refile"])
    assert done.exit_code == 0, done.output
    assert "4 fact(s) moved to their level, 1 merged" in done.output
    assert ("bob", None, None, "User prefers answers by phone.", "preference") in _current(db)
