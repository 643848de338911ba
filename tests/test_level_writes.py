"""Levels of memory (issue 39, writes): consolidation files each fact at the level it belongs
to. One user, two agents, two workflows, the offline extractor (identity and preferences are
about the person) and a model over real HTTP that names levels itself."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from agent_memory import MemoryManager, Scope
from agent_memory.extraction.prompt import build_messages, operations_format
from agent_memory.levels import filing_scope
from agent_memory.models import KnownFact
from agent_memory.settings import MemorySettings, Settings
from tests.fake_llm import FakeLLM, Reply

ALICE = Scope("alice")
SUPPORT_W1 = Scope("alice", "support", "w1")
BILLING_W2 = Scope("alice", "billing", "w2")
BOB_BILLING = Scope("bob", "billing", "w2")


def said(*texts: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": t} for t in texts]


async def _manager(settings: Settings, share: str = "user", **changes: Any) -> MemoryManager:
    memory = MemorySettings(share=share)  # type: ignore[arg-type]
    changed = settings.model_copy(update={"memory": memory, **changes})
    return await MemoryManager.create(settings=changed, migrate=False)


def _facts(db: psycopg.Connection[Any]) -> list[tuple[str | None, str | None, str | None, str]]:
    rows = db.execute(
        "SELECT user_id, agent_id, workflow_id, content FROM agent_memory.memory_items"
        " WHERE superseded_at IS NULL ORDER BY content"
    ).fetchall()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def test_where_a_fact_is_filed() -> None:
    assert filing_scope(SUPPORT_W1, "user", "preference") == ALICE
    assert filing_scope(SUPPORT_W1, "user", "identity") == ALICE
    assert filing_scope(SUPPORT_W1, "user", "situation") == SUPPORT_W1
    assert filing_scope(SUPPORT_W1, "user", "situation", "user_agent") == Scope("alice", "support")
    assert filing_scope(SUPPORT_W1, "user", "event", replaced=ALICE) == ALICE
    # the level named wins over the kind; a level the scope does not read is never written
    assert filing_scope(SUPPORT_W1, "user", "preference", "workflow") == SUPPORT_W1
    assert filing_scope(SUPPORT_W1, "user", "general", "agent") == SUPPORT_W1
    assert filing_scope(SUPPORT_W1, "user,agent", "general", "agent") == Scope(None, "support")
    assert filing_scope(SUPPORT_W1, "exact", "preference") == SUPPORT_W1
    assert filing_scope(Scope(None, "support", "w1"), "user", "identity") == Scope(
        None, "support", "w1"
    )


async def test_the_person_follows_across_agents_and_task_notes_stay(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    manager = await _manager(settings)
    try:
        await manager.record(
            SUPPORT_W1,
            said(
                "I prefer answers by email.",
                "My timezone is CET.",
                "I'm migrating the billing database this week.",
            ),
        )
        await manager.record(BOB_BILLING, said("I prefer answers by phone."))
        summary = await manager.consolidate()
        assert not summary["failed"], summary
        facts = _facts(db)
        assert ("alice", None, None, "User prefers answers by email.") in facts
        assert ("alice", None, None, "User's timezone is CET.") in facts
        assert any(f[:3] == ("alice", "support", "w1") and "migrating" in f[3] for f in facts)

        # the billing agent's next session knows the person, not the support task
        frame = await manager.inject(BILLING_W2, query="How should I answer, and when?")
        assert "User prefers answers by email." in frame.injected_facts
        assert "User's timezone is CET." in frame.injected_facts
        assert not any("migrating" in f for f in frame.injected_facts)
        assert "User prefers answers by phone." not in frame.injected_facts  # bob's
        frame = await manager.inject(BOB_BILLING, query="How should I answer?")
        assert frame.injected_facts == ["User prefers answers by phone."]

        # a change told to billing supersedes what support learned, at the person's level
        await manager.record(BILLING_W2, said("My timezone is PST.", "I prefer answers by email."))
        summary = await manager.consolidate()
        assert not summary["failed"], summary
        facts = _facts(db)
        assert ("alice", None, None, "User's timezone is PST.") in facts
        assert not any("CET" in f[3] for f in facts)
        old = db.execute(
            "SELECT o.user_id, o.agent_id, n.content FROM agent_memory.memory_items o"
            " JOIN agent_memory.memory_items n ON n.id = o.superseded_by"
            " WHERE o.content = 'User''s timezone is CET.'"
        ).fetchone()
        assert old == ("alice", None, "User's timezone is PST.")
        # the same preference through two agents is one fact with both conversations as sources
        sources = db.execute(
            "SELECT f.id, array_agg(DISTINCT e.agent_id ORDER BY e.agent_id)"
            " FROM agent_memory.memory_items f"
            " JOIN agent_memory.fact_sources s ON s.fact_id = f.id"
            " JOIN agent_memory.episodes e ON e.id = s.episode_id"
            " WHERE f.content = 'User prefers answers by email.' GROUP BY f.id"
        ).fetchall()
        assert [agents for _, agents in sources] == [["billing", "support"]]
        frame = await manager.inject(SUPPORT_W1, query="timezone")
        assert "User's timezone is PST." in frame.injected_facts
    finally:
        await manager.close()


async def test_with_share_exact_every_fact_stays_where_it_was_said(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    manager = await _manager(settings, share="exact")
    try:
        await manager.record(SUPPORT_W1, said("I prefer answers by email."))
        assert not (await manager.consolidate())["failed"]
        assert _facts(db) == [("alice", "support", "w1", "User prefers answers by email.")]
        frame = await manager.inject(BILLING_W2, query="How should I answer?")
        assert frame.injected_facts == []
    finally:
        await manager.close()


def test_the_prompt_names_levels_only_when_there_are_several() -> None:
    known = [KnownFact(1, 10, "User's timezone is CET.", 0.8, "identity", ALICE)]
    one = build_messages([], known, ["user"])[1]["content"]
    assert "level" not in one and operations_format(["user"]) == operations_format()
    several = build_messages([], known, ["workflow", "user_agent", "user"])[1]["content"]
    assert '"workflow":' in several and '"user":' in several
    assert "[1] User's timezone is CET. (identity, importance 0.80, level user)" in several
    schema = operations_format(["workflow", "user"])["json_schema"]["schema"]
    item = schema["properties"]["operations"]["items"]
    assert item["properties"]["level"]["enum"] == ["workflow", "user", None]
    assert "level" in item["required"]
    assert (
        "level"
        not in operations_format()["json_schema"]["schema"]["properties"]["operations"]["items"][
            "properties"
        ]
    )


async def test_a_model_names_the_level_of_each_fact(
    llm_settings: Settings, db: psycopg.Connection[Any], fake_llm: FakeLLM
) -> None:
    """The model is told the levels and answers with one per fact; a level the scope does not
    read (the agent's own, under share=user) is not written, and says so nowhere else."""
    answer = [
        {"op": "add", "content": "User is a nurse.", "importance": 0.9, "kind": "identity",
         "level": "user"},
        {"op": "add", "content": "User wants the invoice resent.", "importance": 0.6,
         "kind": "plan", "level": "user_agent"},
        {"op": "add", "content": "User is drafting reply 3.", "importance": 0.5,
         "kind": "situation", "level": "workflow"},
        {"op": "add", "content": "Invoices are resent from the portal.", "importance": 0.5,
         "kind": "general", "level": "agent"},
    ]  # fmt: skip
    fake_llm.reply_with(Reply(json.dumps(answer)))
    manager = await _manager(llm_settings)
    try:
        await manager.record(BILLING_W2, said("I'm a nurse; please resend the invoice."))
        assert not (await manager.consolidate())["failed"]
        assert sorted(_facts(db), key=lambda f: f[3]) == [
            ("alice", "billing", "w2", "Invoices are resent from the portal."),  # not "agent"
            ("alice", None, None, "User is a nurse."),
            ("alice", "billing", "w2", "User is drafting reply 3."),
            ("alice", "billing", None, "User wants the invoice resent."),
        ]
        prompt = fake_llm.requests[-1]["messages"][1]["content"]
        assert "Memory has levels" in prompt and '"user_agent":' in prompt
        assert '"agent":' not in prompt  # not a level this scope reads
    finally:
        await manager.close()
