"""The three memory tiers: relevance-aware injection (weights, normalisation, full-text
relevance), reinforcement on use, and the episodic tier (summaries, history, date ranges)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from agent_memory import MemoryManager
from agent_memory.db import facts as fact_repo
from agent_memory.db import recall as recall_repo
from agent_memory.db.fusion import Fusion, ranked_params
from agent_memory.decay import today
from agent_memory.errors import InvalidMessageError
from agent_memory.models import Scope
from agent_memory.settings import MemorySettings, Settings
from benchmarks.retrieval import SCOPE, evaluate, labelled_set, load_facts
from tests.fake_llm import FakeLLM, Reply
from tests.pools import with_pool
from tests.vectors import embed_all

ALEX = Scope("alex", "assistant")


async def tuned(settings: Settings, **memory: Any) -> MemoryManager:
    """A manager on the test's database with these memory settings."""
    changed = settings.model_copy(
        update={"memory": MemorySettings(**{**settings.memory.model_dump(), **memory})}
    )
    return await MemoryManager.create(settings=changed, migrate=False)


def store(db: psycopg.Connection[Any], scope: Scope, facts: dict[str, float], **at: Any) -> None:
    load_facts(db, scope, [{"content": c, "importance": i} for c, i in facts.items()])
    if at:
        db.execute(
            "UPDATE agent_memory.memory_items SET importance_at = %(at)s,"
            " expires_day = agent_memory.expiry(importance, agent_memory.day_index(%(at)s),"
            " half_life, 0.05)"
            " WHERE content = ANY(%(contents)s)",
            {"at": at["at"], "contents": list(facts)},
        )


async def test_hybrid_is_the_default_and_importance_stays_selectable(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    assert MemorySettings().inject_ranking == "hybrid"
    # the weighted mix this ranking replaced was called "relevance": it means the hybrid now
    assert MemorySettings(inject_ranking="relevance").inject_ranking == "hybrid"
    load_facts(db, ALEX, labelled_set()["facts"])
    before = db.execute("SELECT id, xmin::text FROM agent_memory.memory_items ORDER BY id")
    manager = await tuned(settings, inject_ranking="importance")
    try:
        frame = await manager.inject(ALEX, query="Any tips for my daughter's violin practice?")
        # the seed's ranking: the top by importance, whatever the question
        top = fact_repo.top_sync(db, ALEX, 0.1, 20, today())
        assert frame.fact_ids == [r[0] for r in top]
        assert frame.injected_facts[:2] == [
            "User is a senior data engineer at a logistics company.",
            "User prefers Python for all new services.",
        ]
        assert frame.ranking == "importance" and frame.scores == [] and frame.history == []
    finally:
        await manager.close()
    after = db.execute("SELECT id, xmin::text FROM agent_memory.memory_items ORDER BY id")
    assert before.fetchall() == after.fetchall()  # nothing written
    with pytest.raises(ValueError, match="inject_weight_text or inject_weight_vector"):
        MemorySettings(inject_weight_text=0, inject_weight_vector=0)
    with pytest.raises(ValueError, match="inject_prior_weight"):
        MemorySettings(inject_prior_weight=1.0)  # a prior may re-order matches, never decide
    with pytest.raises(ValueError, match=r"inject_candidates \(5\) is below inject_limit \(20\)"):
        MemorySettings(inject_candidates=5)


def test_relevance_ranking_finds_the_needed_fact_where_importance_only_does_not(
    db: psycopg.Connection[Any],
) -> None:
    data = labelled_set()
    load_facts(db, SCOPE, data["facts"])
    found = evaluate(db, data["questions"], k=5)
    importance, relevance = found["importance"], found["relevance"]
    # the set's top five by importance are general facts: no question's fact is among them
    assert importance.recall == 0.0
    assert relevance.recall >= 0.9, [
        q["question"] for q, hit in zip(data["questions"], relevance.hits, strict=True) if not hit
    ]
    rescued = [r and not i for r, i in zip(relevance.hits, importance.hits, strict=True)]
    assert sum(rescued) >= 15


async def test_inject_node_ranks_by_the_latest_user_message(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    load_facts(db, ALEX, labelled_set()["facts"])
    manager = await tuned(settings, inject_limit=3)
    await embed_all(manager)
    try:

        def agent(state: dict[str, Any]) -> dict[str, Any]:
            return {"messages": [AIMessage("ok")]}

        graph = manager.graph(agent).compile()
        out = await graph.ainvoke(
            {
                "user_id": "alex",
                "agent_id": "assistant",
                "messages": [
                    HumanMessage("Hi again"),
                    AIMessage("Hello!"),
                    HumanMessage("Any tips for my daughter's violin practice?"),
                ],
            }
        )
    finally:
        await manager.close()
    frame = out["working_memory"]
    assert frame["ranking"] == "hybrid"  # full text and the bundled model, fused
    assert frame["injected_facts"][0] == "User's daughter plays the violin."
    assert len(frame["scores"]) == 3 and frame["scores"] == sorted(frame["scores"], reverse=True)
    assert "- User's daughter plays the violin." in frame["context"]


CHESS = "Who should I play chess with?"


async def test_rank_fusion_priors_reorder_comparable_matches_and_never_lift_a_non_match(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    now = datetime.now(UTC)
    month_ago = now - timedelta(days=30)
    # the best match, but faded and old: its prior is near 0
    store(db, ALEX, {"User plays chess.": 0.3}, at=month_ago)
    # a weaker match (a longer text: a lower ts_rank), important and recent: its prior is 1
    store(db, ALEX, {"User plays chess in a club on Sundays near the old harbour.": 1.0})
    # no match at all, however important and recent
    store(db, ALEX, {"User loves jazz.": 1.0})

    async def order(**memory: Any) -> list[str]:
        manager = await tuned(
            settings, inject_ranking="text", inject_fusion="rrf", inject_min_importance=0, **memory
        )
        try:
            return (await manager.inject(ALEX, query=CHESS)).injected_facts
        finally:
            await manager.close()

    short, long, jazz = (
        "User plays chess.",
        "User plays chess in a club on Sundays near the old harbour.",
        "User loves jazz.",
    )
    # relevance alone: the better match first; the non-match after every match
    assert await order(inject_prior_weight=0) == [short, long, jazz]
    # ranks 1 and 2 are comparable (1/61 against 1/62): the default prior re-orders them
    assert await order() == [long, short, jazz]
    # with the prior all but deciding, the non-match still follows every match
    assert (await order(inject_prior_weight=0.99))[-1] == jazz
    # the prior's parts: importance alone, recency alone
    assert await order(inject_weight_recency=0) == [long, short, jazz]
    assert await order(inject_weight_importance=0) == [long, short, jazz]


async def test_under_rank_fusion_a_prior_cannot_lift_a_much_weaker_match(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    month_ago = datetime.now(UTC) - timedelta(days=30)
    store(db, ALEX, {"User plays chess.": 0.2}, at=month_ago)
    # 29 weaker matches, each important and said today
    store(
        db, ALEX, {f"User plays chess with friend number {n} of the club.": 1.0 for n in range(29)}
    )
    manager = await tuned(
        settings,
        inject_ranking="text",
        inject_fusion="rrf",
        inject_min_importance=0,
        inject_limit=30,
        inject_candidates=50,  # 30 ranks of full text, each into the fusion
    )
    try:
        frame = await manager.inject(ALEX, query=CHESS)
    finally:
        await manager.close()
    # the best match (rank 1 by full text), its prior near 0: 1/61 * (0.9 + 0.1 * prior); the
    # others have prior 1, so keep 1/(60 + rank): ranks 2-7 (down to 1/67) pass it, none after
    prior = (0.2 * 0.95**30 + 0.5 ** (30 / 7)) / 2
    assert frame.injected_facts.index("User plays chess.") == 6
    assert frame.scores[6] == pytest.approx(1 / 61 * (0.9 + 0.1 * prior), rel=1e-4)
    assert frame.scores[-1] == pytest.approx(1 / 90, rel=1e-4)  # rank 30


async def test_score_fusion_lets_a_prior_order_equal_matches_only(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    month_ago = datetime.now(UTC) - timedelta(days=30)
    store(db, ALEX, {"User plays chess.": 0.2}, at=month_ago)  # all the question's words
    store(db, ALEX, {"User played chess.": 1.0})  # the same words, important and new
    store(db, ALEX, {"User likes chess puzzles.": 1.0})  # one of its two words, the common one
    store(db, ALEX, {"User loves jazz.": 1.0})  # none

    async def order(**memory: Any) -> tuple[list[str], list[float]]:
        manager = await tuned(settings, inject_ranking="text", inject_min_importance=0, **memory)
        try:
            frame = await manager.inject(ALEX, query=CHESS)
            return frame.injected_facts, frame.scores
        finally:
            await manager.close()

    assert MemorySettings().inject_fusion == "relative"
    facts, scores = await order()
    assert facts == [
        "User played chess.",
        "User plays chess.",
        "User likes chess puzzles.",
        "User loves jazz.",
    ]
    # both hold the whole question (relevance 1): the prior orders them; "chess" alone holds
    # less than a third of the question's weight (it is in 3 of 4 facts, "play" in 2)
    assert scores[0] == pytest.approx(1.0, abs=1e-6) and 0.9 < scores[1] < 0.91
    assert scores[2] < 0.35 and scores[3] == 0
    # with the prior all but deciding, the non-match still comes last
    assert (await order(inject_prior_weight=0.99))[0][-1] == "User loves jazz."


async def test_no_question_ranks_by_the_priors_alone(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    now = datetime.now(UTC)
    store(db, ALEX, {"User loves jazz.": 0.9})
    store(db, ALEX, {"User plays chess on Sundays.": 0.5}, at=now - timedelta(days=1))
    store(db, ALEX, {"User once visited Oslo.": 0.95}, at=now - timedelta(days=30))

    async def order(w_i: float, w_r: float, query: str | None = None) -> list[str]:
        manager = await tuned(settings, inject_weight_importance=w_i, inject_weight_recency=w_r)
        try:
            frame = await manager.inject(ALEX, query=query)
            assert frame.ranking == "priors" and frame.scores == sorted(frame.scores, reverse=True)
            return frame.injected_facts
        finally:
            await manager.close()

    # Oslo: 0.95 faded by 30 days is ~0.2; jazz 0.9 today; chess 0.5 * 0.95 yesterday
    assert await order(1, 0) == ["User loves jazz.", "User plays chess on Sundays.",
                                 "User once visited Oslo."]  # fmt: skip
    assert await order(0, 1) == ["User loves jazz.", "User plays chess on Sundays.",
                                 "User once visited Oslo."]  # fmt: skip
    # a message with nothing to search for is no question either
    for silent in ("", "   ", "\n\t"):
        assert await order(1, 1, silent) == await order(1, 1)


async def test_a_used_fact_keeps_its_importance_when_reinforcement_is_on(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    twenty_days_ago = datetime.now(UTC) - timedelta(days=20)
    store(db, ALEX, {"User deploys on Fridays.": 0.8}, at=twenty_days_ago)
    faded = 0.8 * 0.95**20
    plain = await tuned(settings)
    try:
        assert (await plain.inject(ALEX)).importances == [pytest.approx(faded, rel=1e-4)]
        assert (await plain.facts(ALEX))[0].importance == pytest.approx(faded, rel=1e-4)
    finally:
        await plain.close()

    reinforcing = await tuned(settings, inject_reinforce=True)
    try:
        frame = await reinforcing.inject(ALEX)
        assert frame.importances == [pytest.approx(faded, rel=1e-4)]  # what it was when used
        fact = (await reinforcing.facts(ALEX))[0]
        assert fact.importance == pytest.approx(0.8)  # its clock restarted today
        assert fact.importance_at.astimezone(UTC).date() == today()
        version = db.execute("SELECT xmin::text FROM agent_memory.memory_items").fetchone()
        await reinforcing.inject(ALEX)  # used again the same day: no second write
        assert db.execute("SELECT xmin::text FROM agent_memory.memory_items").fetchone() == version
        # a day of use lengthens its half-life by the use growth (1.25): 0.95 a day no more
        assert fact.half_life == pytest.approx(math.log(2) / -math.log(0.95) * 1.25)
        tomorrow = await reinforcing.facts(ALEX, on=today() + timedelta(days=1))
        assert tomorrow[0].importance == pytest.approx(0.8 * 0.95 ** (1 / 1.25))
        # an inject evaluated on another day (a replay, a test) reads, it does not reinforce
        await reinforcing.inject(ALEX, on=today() + timedelta(days=30))
        assert db.execute("SELECT xmin::text FROM agent_memory.memory_items").fetchone() == version
    finally:
        await reinforcing.close()


@pytest.mark.usefixtures("prefect_harness")
async def test_consolidated_episodes_get_summaries_that_inject_shows_with_their_dates(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    manager = await tuned(settings, inject_history=2)
    try:
        base = datetime.now(UTC).replace(hour=15, minute=0, second=0, microsecond=0)
        days = [base - timedelta(days=d) for d in (12, 10, 6)]
        texts = [
            "I moved our billing service to Go.",
            "Our staging cluster ran out of disk. Any idea?",
            "I prefer short answers.",
        ]
        for day, text in zip(days, texts, strict=True):
            await manager.record(ALEX, [HumanMessage(text), AIMessage("Noted.")], occurred_at=day)
        assert (await manager.inject(ALEX)).history == []  # nothing consolidated yet
        summary = await manager.consolidate(ALEX)
        assert summary["completed"] == 1
        frame = await manager.inject(ALEX)
        assert [h.occurred_at for h in frame.history] == [days[2], days[1]]  # newest first
        assert frame.history[1].summary == (
            'User said "Our staging cluster ran out of disk." (1 more message).'
        )
        assert (
            "Recent conversation history:\n"
            f'\u2022 {days[2]:%Y-%m-%d}: User said "I prefer short answers." (1 more message).\n'
            f'\u2022 {days[1]:%Y-%m-%d}: User said "Our staging cluster ran out of disk."'
            " (1 more message)."
        ) in frame.context
        assert frame.context.startswith("What you know about the user:\n- ")

        # "what happened that day": a date range, with summaries
        tuesday = days[1].date()
        that_day = await manager.episodes(ALEX, since=tuesday, until=tuesday + timedelta(days=1))
        assert [e.occurred_at for e in that_day] == [days[1]]
        assert that_day[0].summary is not None and "staging" in that_day[0].summary
        assert that_day[0].messages[0]["content"] == texts[1]
        assert len(await manager.episodes(ALEX, since=days[1])) == 2
        assert len(await manager.episodes(ALEX)) == 3
        assert await manager.episodes(Scope("someone-else")) == []
        with pytest.raises(InvalidMessageError, match="is not before until"):
            await manager.episodes(ALEX, since=tuesday, until=tuesday)
        with pytest.raises(InvalidMessageError, match="no time zone"):
            await manager.episodes(ALEX, since=datetime(2026, 11, 20))
    finally:
        await manager.close()


@pytest.mark.usefixtures("prefect_harness")
async def test_the_models_summary_is_stored_and_a_missing_one_is_made_offline(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    def handler(request: dict[str, Any]) -> Reply:
        assert '"op": "summary"' in request["messages"][0]["content"]  # the prompt asks
        return Reply(
            json.dumps(
                [
                    {"op": "add", "content": "User runs Fedora.", "importance": 0.6},
                    {"op": "summary", "episode": 1, "summary": "User set up a Fedora laptop."},
                ]
            )
        )

    fake_llm.reset(handler)
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        when = [datetime(2026, 11, d, 9, tzinfo=UTC) for d in (2, 3)]
        await manager.record(ALEX, [HumanMessage("I run Fedora now.")], occurred_at=when[0])
        await manager.record(ALEX, [HumanMessage("Thanks, all set.")], occurred_at=when[1])
        assert (await manager.consolidate(ALEX))["completed"] == 1
        episodes = await manager.episodes(ALEX)
    finally:
        await manager.close()
    assert [e.summary for e in episodes] == [
        "User set up a Fedora laptop.",
        'User said "Thanks, all set."',  # the model gave none for episode 2
    ]


def embed_as(db: psycopg.Connection[Any], vectors: dict[str, str]) -> None:
    """Give each fact of these contents this vector, of the model 'test/model'."""
    for content, vector in vectors.items():
        db.execute(
            "INSERT INTO agent_memory.fact_embeddings (fact_id, scope_key, model, embedding)"
            " SELECT id, scope_key, 'test/model', %s::vector FROM agent_memory.memory_items"
            " WHERE content = %s",
            (vector, content),
        )


def ranked_by(
    db: psycopg.Connection[Any], question: str, vector: list[float], candidates: int, **fused: Any
) -> list[tuple[str, float]]:
    """ALEX's facts as the hybrid ranking orders them for this question and its vector, with
    no prior, and their scores."""
    params = ranked_params(
        ALEX,
        question,
        on=today(),
        min_importance=0.0,
        limit=10,
        candidates=candidates,
        fusion=Fusion(prior_weight=0.0, **fused),
    )
    rows = recall_repo.ranked_sync(db, {**params, "model": "test/model"}, vector)
    return [(content, score) for _, content, _, score in rows]


def test_the_text_gate_keeps_a_word_match_above_a_mere_likeness_and_leaves_none_to_meaning(
    db: psycopg.Connection[Any],
) -> None:
    from agent_memory.db import embeddings as embedding_repo

    assert embedding_repo.ensure(db) is None  # pgvector and the vector tables
    named = "User's sister Lena grows tomatoes."  # holds the question's rarest word
    like = "User enjoys gardening on weekends."  # no word of it, but nearest by meaning
    other = "User owns a red bicycle."
    store(db, ALEX, {named: 0.5, like: 0.5, other: 0.5})
    embed_as(db, {named: "[0,0,1]", like: "[1,1,0]", other: "[0,1,0]"})

    def order(question: str, gate: bool) -> list[tuple[str, float]]:
        return ranked_by(db, question, [1.0, 0.0, 0.0], candidates=10, text_gate=gate)

    # "lena" and "grow" are in one fact of three, "plant" in none: that fact holds most of the
    # question's weight, yet ungated the likeness (cosine 0.707) outweighs it
    question = "Which plants does Lena grow?"
    ungated = order(question, gate=False)
    assert [c for c, _ in ungated][:2] == [like, named]
    gated = order(question, gate=True)
    assert [c for c, _ in gated][:2] == [named, like]
    # the likeness keeps its cosine times the share of the question the word match left
    text_share = next(s for c, s in gated if c == named)
    assert 0 < text_share < 1
    assert next(s for c, s in gated if c == like) == pytest.approx(
        (1 - text_share) * 1 / math.sqrt(2), rel=1e-4
    )
    # no fact holds any word of the question: meaning decides at full weight, as ungated
    assert order("Any hobbies outdoors?", gate=True) == order("Any hobbies outdoors?", gate=False)
    assert order("Any hobbies outdoors?", gate=True)[0] == (
        like,
        pytest.approx(1 / math.sqrt(2), rel=1e-4),
    )
    assert MemorySettings().inject_text_gate is True


def test_the_meaning_floor_counts_likeness_above_the_last_candidate_only(
    db: psycopg.Connection[Any],
) -> None:
    from agent_memory.db import embeddings as embedding_repo

    assert embedding_repo.ensure(db) is None
    # every fact is much like the question by meaning (as a static model finds chatty
    # messages); one holds a word of it
    nearest = "User drinks espresso every morning."
    close = "User went hiking last weekend."
    last = "User watched a film yesterday."
    named = "User's sister Lena moved to Oslo."
    store(db, ALEX, {nearest: 0.5, close: 0.5, last: 0.5, named: 0.5})
    cosines = {nearest: 0.99, close: 0.75, last: 0.7, named: 0.6}
    embed_as(db, {c: f"[{x},{math.sqrt(1 - x * x)},0]" for c, x in cosines.items()})
    question, vector = "Where does Lena live now?", [1.0, 0.0, 0.0]

    def scores(**fused: Any) -> dict[str, float]:
        return dict(ranked_by(db, question, vector, candidates=3, text_gate=False, **fused))

    plain = scores(vector_floor=False)
    text_share = plain[named]  # the word match's share of the question (4th by meaning)
    assert 0 < text_share < cosines[close]
    assert plain[close] == pytest.approx(cosines[close], rel=1e-4)
    assert plain[close] > plain[named]  # a likeness all facts share outranks the word match

    floored = scores(vector_floor=True)
    # the 3 nearest are the candidates by meaning; each counts its likeness above the third's
    above = {c: (cosines[c] - cosines[last]) / (1 - cosines[last]) for c in (nearest, close)}
    assert floored[nearest] == pytest.approx(above[nearest], rel=1e-4)
    assert floored[close] == pytest.approx(above[close], rel=1e-4)
    assert floored[named] == pytest.approx(text_share, rel=1e-4)
    assert floored[close] < text_share
    assert floored[last] == 0  # no more like it than the last candidate: not a match
    assert [c for c, _ in ranked_by(db, question, vector, candidates=3, text_gate=False)][:3] == [
        nearest,
        named,
        close,
    ]
    # a scope with fewer facts than candidates keeps the plain cosine: a lone match counts
    few = dict(ranked_by(db, question, vector, candidates=10, text_gate=False))
    assert few == pytest.approx({**cosines, named: cosines[named] + text_share}, rel=1e-4)
    assert MemorySettings().inject_vector_floor is True
    assert Fusion.of(MemorySettings(inject_vector_floor=False)).params()["vector_floor"] is False


async def test_the_agents_pool_plans_its_ranking_once_and_ranks_as_planning_anew_does(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    """MemoryManager's connections keep one plan of each recurring statement (a generic plan,
    AGENT_MEMORY_DB_GENERIC_PLANS), and that plan ranks as the plans made for each question's
    own parameters do; with the setting off, PostgreSQL chooses as it would."""
    load_facts(db, ALEX, labelled_set()["facts"])
    questions = [q["question"] for q in labelled_set()["questions"][:12]]
    later = today() + timedelta(days=1)  # a day of its own: injects read, never reinforce
    ranked: dict[bool, list[tuple[list[int], list[float]]]] = {}
    for generic in (True, False):
        manager = await MemoryManager.create(
            settings=with_pool(settings, generic_plans=generic), migrate=False
        )
        try:
            frames = [await manager.inject(ALEX, query=q, on=later) for q in questions]
            ranked[generic] = [(f.fact_ids, f.scores) for f in frames]
            async with (await manager.backend.apool()).connection() as conn:
                mode = await (await conn.execute("SHOW plan_cache_mode")).fetchone()
                plans = await (
                    await conn.execute(
                        "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                        " WHERE statement LIKE '%%text_hits AS%%'"
                    )
                ).fetchall()
        finally:
            await manager.close()
        assert mode == (("force_generic_plan",) if generic else ("auto",))
        assert plans, "the ranking statement was not prepared"
        if generic:
            assert all(custom == 0 for _, custom in plans)
            assert sum(g for g, _ in plans) >= len(questions) - 6  # psycopg prepares at the 6th
    assert all(ids for ids, _ in ranked[True])
    assert [ids for ids, _ in ranked[True]] == [ids for ids, _ in ranked[False]]
    for (_, generic_scores), (_, custom_scores) in zip(ranked[True], ranked[False], strict=True):
        assert generic_scores == pytest.approx(custom_scores)
    # the pool of sync callers is set up alike
    sync = MemoryManager.create_sync(settings=with_pool(settings), migrate=False)
    try:
        with sync.backend.spool().connection() as conn:
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
    finally:
        sync.close()
