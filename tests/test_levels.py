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
    pool = await manager.backend.apool()
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


async def test_large_levels_share_one_scopes_reading_of_their_indexes(
    settings: Settings, db: Any
) -> None:
    """Each level with its own HNSW index reads its share of the nearest facts (so three large
    levels cost about what one does); a large scope whose levels above are empty reads all of
    them from its index, ranking exactly as the scope alone; the session's queue size stays."""
    from agent_memory.db import ann_indexes
    from agent_memory.embedding import make_embedder
    from agent_memory.settings import EmbeddingSettings
    from agent_memory.stored_embeddings import ensure_ann_indexes
    from benchmarks.retrieval import load_facts
    from tests.vectors import embed_all

    topics = ["violin", "garden", "marathon", "coffee", "Kubernetes", "sailing", "pottery", "chess"]
    solo = Scope("carol", "support", "w1")
    for n, level in enumerate((SUPPORT_W1, SUPPORT, ALICE, solo)):
        facts = [
            {"content": f"Level {n} heard about {t} on day {d}.", "importance": 0.5}
            for d in range(8)
            for t in topics
        ]
        load_facts(db, level, facts)  # 64 facts each
    tuned = settings.model_copy(update={"embedding": EmbeddingSettings(ann_min_rows=50)})
    manager = await MemoryManager.create(settings=tuned, migrate=False)
    try:
        assert await embed_all(manager) == 4 * 64
        embedder = make_embedder(tuned.embedding)
        assert embedder is not None
        pool = await manager.backend.apool()
        for level in (SUPPORT_W1, SUPPORT, ALICE, solo):
            assert len(await ensure_ann_indexes(pool, embedder, level)) == 1
        question = "Which instrument do I play?"
        vector = embedder.embed_sync([question])[0]
        db.execute("SET hnsw.ef_search = 40")

        def params(scope: Scope) -> dict[str, Any]:
            values = fusion_repo.ranked_params(
                scope, question, on=date.today(), min_importance=0.0, limit=10, candidates=20
            )
            return {**values, "model": embedder.model}

        def ranked(scope: Scope, alone: bool = False) -> Any:
            levels = (scope,) if alone else scope.levels()
            anns = [ann_indexes.ann_index_sync(db, "facts", s, embedder.model) for s in levels]
            if alone:
                return recall.ranked_sync(db, params(scope), vector, anns[0])
            return level_reads.ranked_levels_sync(db, params(scope), levels, vector, anns)

        # the levels above carol's workflow are empty (no index): her index is read in full
        rows, origins = ranked(solo)
        assert rows == ranked(solo, alone=True)
        assert set(origins.values()) == {solo}
        # three indexed levels, 2 x 20 nearest shared among them: each level's violins found,
        # the best as comparing every vector finds them
        rows, origins = ranked(SUPPORT_W1)
        violins = {origins[i] for i, content, _, _ in rows if "violin" in content}
        assert violins == set(SUPPORT_W1.levels())
        levels = SUPPORT_W1.levels()
        exact, _ = level_reads.ranked_levels_sync(db, params(SUPPORT_W1), levels, vector)
        assert [r[1] for r in rows][:3] == [r[1] for r in exact][:3]
        # each share's queue was sized for the statement alone: the session keeps its own
        assert db.execute("SHOW hnsw.ef_search").fetchone() == ("40",)
        with db.transaction():  # (in a caller's transaction, the last share's is left to it)
            ranked(SUPPORT_W1)
            assert db.execute("SHOW hnsw.ef_search").fetchone() == ("14",)  # 40 / 3, rounded up
    finally:
        await manager.close()
