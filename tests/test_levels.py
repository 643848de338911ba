"""Levels of memory (issue 39, reads): one user, two agents, two workflows. What is filed at the
person's level reaches every agent of that person; an agent's private notes stay with it; other
users see nothing; AGENT_MEMORY_SHARE=exact reads the scope alone, as before levels."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.db import fusion as fusion_repo
from agent_memory.db import level_reads, recall
from agent_memory.settings import MemorySettings, Settings

ALICE = Scope("alice")
SUPPORT = Scope("alice", "support")
SUPPORT_W1 = Scope("alice", "support", "w1")
BILLING = Scope("alice", "billing")
BILLING_W2 = Scope("alice", "billing", "w2")
SUPPORT_ITSELF = Scope(agent_id="support")
BOB_BILLING = Scope("bob", "billing")

PERSON = "Alice is on SAP S/4HANA Cloud 2023 and wants answers by email"
PRIVATE = "Ticket 4711 about the SAP gateway restart is waiting on Alice"
WORKFLOW = "In this SAP migration run the gateway was restarted twice"
HOW_TO = "Restart an SAP gateway with sapcontrol before escalating"
BOB = "Bob is on SAP Business One"


def test_a_scope_reads_only_scopes_made_by_leaving_out_its_own_parts() -> None:
    assert SUPPORT_W1.levels("user,agent") == (SUPPORT_W1, SUPPORT, ALICE, SUPPORT_ITSELF)
    assert SUPPORT_W1.levels("user") == (SUPPORT_W1, SUPPORT, ALICE)
    assert Scope("alice", None, "w1").levels("user") == (Scope("alice", None, "w1"), ALICE)
    assert BILLING.levels("user") == (BILLING, ALICE)
    assert ALICE.levels("user,agent") == (ALICE,)
    assert SUPPORT_ITSELF.levels("user,agent") == (SUPPORT_ITSELF,)
    # no user: nothing of any person is read
    assert Scope(None, "support", "w1").levels("user") == (Scope(None, "support", "w1"),)
    assert SUPPORT_W1.levels("exact") == (SUPPORT_W1,)
    for share in ("exact", "user", "user,agent"):
        for scope in (SUPPORT, SUPPORT_W1, BILLING, BILLING_W2, BOB_BILLING):
            read = scope.levels(share)  # type: ignore[arg-type]
            assert read[0] == scope
            assert all(s.user_id in (scope.user_id, None) for s in read)
            assert all(s.agent_id in (scope.agent_id, None) for s in read)
            assert all(s.workflow_id in (scope.workflow_id, None) for s in read)
    assert [s.level for s in (ALICE, SUPPORT, SUPPORT_W1, SUPPORT_ITSELF)] == [
        "user",
        "user_agent",
        "workflow",
        "agent",
    ]


def test_the_setting_names_the_levels() -> None:
    assert MemorySettings().share == "user"
    assert MemorySettings(share="agent, user").share == "user,agent"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="share"):
        MemorySettings(share="everything")  # type: ignore[arg-type]


async def _filed(manager: MemoryManager) -> None:
    await manager.add_fact(ALICE, PERSON, importance=0.9, kind="preference")
    await manager.add_fact(SUPPORT, PRIVATE, importance=0.9)
    await manager.add_fact(SUPPORT_W1, WORKFLOW, importance=0.9)
    await manager.add_fact(SUPPORT_ITSELF, HOW_TO, importance=0.9)
    await manager.add_fact(Scope("bob"), BOB, importance=0.9)


async def _with(settings: Settings, **memory: Any) -> MemoryManager:
    changed = settings.model_copy(update={"memory": MemorySettings(**memory)})
    return await MemoryManager.create(settings=changed, migrate=False)


@pytest.mark.parametrize("ranking", ["hybrid", "text", "importance"])
async def test_the_persons_facts_follow_them_to_another_agent_and_private_notes_do_not(
    settings: Settings, ranking: str
) -> None:
    manager = await _with(settings, inject_ranking=ranking)
    try:
        await _filed(manager)
        frame = await manager.inject(BILLING_W2, query="Which SAP system is she on?")
        assert PERSON in frame.injected_facts
        for private in (PRIVATE, WORKFLOW, HOW_TO, BOB):
            assert private not in frame.injected_facts
            assert private not in frame.context
        assert frame.fact_levels == ["user"]
        # the person's fact reads as any fact about the user: no mark
        assert f"- {PERSON}\n" in frame.context + "\n"

        # the support agent's workflow reads the person, the person with support, and itself
        frame = await manager.inject(SUPPORT_W1, query="SAP gateway restart")
        assert set(frame.injected_facts) == {PERSON, PRIVATE, WORKFLOW}
        assert dict(zip(frame.injected_facts, frame.fact_levels, strict=True)) == {
            PERSON: "user",
            PRIVATE: "user_agent",
            WORKFLOW: "workflow",
        }

        # another user with the same agent sees nothing of alice's
        frame = await manager.inject(BOB_BILLING, query="Which SAP system is she on?")
        assert frame.injected_facts == [BOB]
    finally:
        await manager.close()


async def test_search_reads_the_levels_and_says_where_each_fact_is_filed(
    settings: Settings,
) -> None:
    manager = await _with(settings)
    try:
        await _filed(manager)
        found = await manager.search(BILLING, "SAP")
        assert [(f.content, f.user_id, f.agent_id) for f in found] == [(PERSON, "alice", None)]
        found = await manager.search(SUPPORT, "SAP gateway")
        assert {f.content for f in found} == {PERSON, PRIVATE}
        assert not await manager.search(BOB_BILLING, "S/4HANA Cloud 2023")
    finally:
        await manager.close()


async def test_the_agents_own_knowledge_is_read_when_shared_and_marked(
    settings: Settings,
) -> None:
    manager = await _with(settings, share="user,agent")
    try:
        await _filed(manager)
        frame = await manager.inject(SUPPORT, query="How do I restart an SAP gateway?")
        assert HOW_TO in frame.injected_facts
        assert f"- {HOW_TO} [agent knowledge, not about this user]" in frame.context
        frame = await manager.inject(BILLING, query="How do I restart an SAP gateway?")
        assert HOW_TO not in frame.injected_facts
        assert PRIVATE not in frame.injected_facts
    finally:
        await manager.close()


@pytest.mark.parametrize("ranking", ["hybrid", "importance"])
async def test_with_share_exact_nothing_crosses(settings: Settings, ranking: str) -> None:
    manager = await _with(settings, share="exact", inject_ranking=ranking)
    try:
        await _filed(manager)
        await manager.add_fact(BILLING, "Alice pays by SEPA direct debit", importance=0.5)
        frame = await manager.inject(BILLING, query="Which SAP system is she on?")
        assert PERSON not in frame.injected_facts
        assert frame.fact_levels == []
        frame = await manager.inject(SUPPORT_W1, query="SAP gateway restart")
        assert frame.injected_facts == [WORKFLOW]
        assert not await manager.search(BILLING, "S/4HANA")
    finally:
        await manager.close()


async def test_levels_with_nothing_above_rank_as_the_scope_alone(
    manager: MemoryManager,
) -> None:
    """The levels' statement ranks exactly as the one-scope statement when only the scope has
    facts: one ranking, its statistics summed over the levels (here, over one)."""
    words = ["gateway", "invoice", "ledger", "restart", "email", "cloud", "report", "tax"]
    for i in range(60):
        text = f"{words[i % 8]} {words[(i * 3) % 8]} note {i} about {words[(i * 5) % 8]}"
        await manager.add_fact(BILLING, text, importance=0.1 + (i % 9) / 10)
    pool = await manager._apool()
    m = manager.settings.memory
    for question in ("gateway restart", "tax report by email", None):
        params = fusion_repo.ranked_params(
            BILLING,
            question,
            on=date.today(),
            min_importance=0.1,
            limit=20,
            candidates=m.inject_candidates,
            fusion=fusion_repo.Fusion.of(m),
        )
        async with pool.connection() as conn:
            alone = await recall.ranked(conn, params)
            levels, origins = await level_reads.ranked_levels(conn, params, BILLING.levels())
        assert levels == alone
        assert set(origins.values()) == {BILLING}
