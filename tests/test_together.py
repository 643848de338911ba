"""An inject ranks its facts and searches its past messages in one statement
(agent_memory.db.together): each ranking gets back exactly the rows its statement alone
returns, over one scope and over levels, by full text and by meaning; and where that statement
fails, each is read again on its own and falls back as it always has."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from agent_memory import MemoryManager
from agent_memory.db import fusion, level_reads, recall, together
from agent_memory.db import snippets as snippet_repo
from agent_memory.db.dual import run_async
from agent_memory.embedding import make_embedder
from agent_memory.models import Scope
from agent_memory.settings import Settings
from agent_memory.stored_embeddings import embed_missing, embed_snippets
from benchmarks.retrieval import load_facts

ALEX = Scope("alex", "assistant")
MARCH = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
DAY = date(2026, 3, 10)
QUESTIONS = [
    "What did the dentist say?",
    "Which animal lives with me?",
    "Where does my sister live?",
    "cello",  # one word, in a fact and a message
    "nothing here matches at all",
]


async def _remember(manager: MemoryManager, db: psycopg.Connection[Any]) -> None:
    """Facts at the scope's level and the person's, messages, all embedded."""
    load_facts(
        db,
        ALEX,
        [
            {"content": "User's dentist appointment moved to Friday", "importance": 0.6},
            {"content": "User plays the cello", "importance": 0.4},
        ],
    )
    load_facts(db, Scope("alex"), [{"content": "User's sister lives in Lisbon", "importance": 0.7}])
    await manager.record(
        ALEX,
        [
            HumanMessage("The dentist said my wisdom tooth has to come out. Can it wait?"),
            AIMessage("It can wait a month, the dentist said."),
            HumanMessage("I adopted a border collie called Pixel."),
            HumanMessage("My cello teacher moved to Porto."),
        ],
        occurred_at=MARCH,
    )
    embedder = make_embedder(manager.settings.embedding)
    assert embedder is not None
    pool = await manager.backend.apool()
    await embed_missing(pool, embedder)
    await embed_snippets(pool, embedder)


async def test_each_ranking_gets_back_what_its_statement_alone_returns(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await _remember(manager, db)
    m = manager.settings.memory
    levels = ALEX.levels("user")
    assert len(levels) == 2
    embed = manager.backend.queries.embed
    pool = await manager.backend.apool()
    compared = 0
    async with pool.connection() as conn:
        for question in QUESTIONS:
            vector = await embed(question)
            facts = fusion.ranked_params(
                ALEX, question, on=DAY, min_importance=0.0, limit=5, candidates=25
            )
            facts["model"] = manager.backend.queries.model
            messages = snippet_repo.search_params(ALEX, question, on=DAY, limit=8, candidates=25)
            messages["model"] = facts["model"]
            for by_meaning in (vector, None):
                found = await snippet_repo.search(conn, messages, by_meaning)
                # over the two levels
                apart = await level_reads.ranked_levels(conn, facts, levels, by_meaning)
                fact_rows, snippet_rows = await run_async(
                    conn,
                    together.together_steps(
                        level_reads.levels_ranking(facts, levels, by_meaning),
                        together.LEVEL_FACT_COLUMNS,
                        snippet_repo.search_ranking(messages, by_meaning),
                    ),
                )
                assert level_reads.levels_rows(fact_rows, levels) == apart
                assert snippet_repo.found_snippets(snippet_rows) == found
                # one scope
                alone = await recall.ranked(conn, facts, by_meaning)
                fact_rows, snippet_rows = await run_async(
                    conn,
                    together.together_steps(
                        recall.ranking(facts, by_meaning),
                        together.FACT_COLUMNS,
                        snippet_repo.search_ranking(messages, by_meaning),
                    ),
                )
                assert recall.ranked_rows(fact_rows) == alone
                assert snippet_repo.found_snippets(snippet_rows) == found
                compared += bool(apart) + bool(found)
    assert compared >= 10  # most questions found facts and messages both ways
    assert m.inject_snippets_tokens > 0


def test_values_the_two_statements_name_alike_are_sent_once_and_others_apart() -> None:
    facts = recall.Ranking(
        "SELECT %(limit)s::int, %(day)s::int, %(text)s::text", {"limit": 20, "day": 3, "text": "a"}
    )
    messages = recall.Ranking(
        "SELECT %(limit)s::int, %(day)s::int, 100 %% 7, %(since)s",
        {"limit": 14, "day": 3, "since": None},
    )
    joined = together.together(facts, 3, messages)
    assert joined.values == {"limit": 20, "day": 3, "text": "a", "s_limit": 14, "since": None}
    assert "SELECT %(s_limit)s::int, %(day)s::int, 100 %% 7, %(since)s" in joined.query


@pytest.mark.parametrize(
    ("missing", "ranking", "first_message"),
    [
        # the messages' vectors gone: the facts still ranked by meaning, no messages
        ("snippet_embeddings", "hybrid", None),
        # the facts' vectors gone: the facts by full text, the messages found as ever
        ("fact_embeddings", "text", "The dentist said my wisdom tooth has to come out."),
    ],
)
async def test_where_the_one_statement_fails_each_ranking_falls_back_on_its_own(
    settings: Settings,
    db: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
    missing: str,
    ranking: str,
    first_message: str | None,
) -> None:
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await _remember(manager, db)
        db.execute(f"ALTER TABLE agent_memory.{missing} RENAME TO {missing}_away")
        try:
            with caplog.at_level(logging.WARNING, logger="agent_memory.inject"):
                frame = await manager.inject(ALEX, query="What did the dentist say?")
            sync_frame = await _sync_inject(settings)
        finally:
            db.execute(f"ALTER TABLE agent_memory.{missing}_away RENAME TO {missing}")
    finally:
        await manager.close()
    for made in (frame, sync_frame):
        assert made.ranking == ranking
        assert made.injected_facts[0] == "User's dentist appointment moved to Friday"
        said = [s.content for s in made.snippets]
        if first_message is None:
            assert said == []
        else:
            assert said[0] == first_message
    assert "in one statement failed" in caplog.text
    # with the table back, one statement again, and nothing said
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        caplog.clear()
        frame = await manager.inject(ALEX, query="What did the dentist say?")
    finally:
        await manager.close()
    assert frame.ranking == "hybrid"
    assert [s.content for s in frame.snippets][:1] == [
        "The dentist said my wisdom tooth has to come out."
    ]
    assert "failed" not in caplog.text


async def _sync_inject(settings: Settings) -> Any:
    manager = MemoryManager.create_sync(settings=settings, migrate=False)
    try:
        return manager.inject_sync(ALEX, query="What did the dentist say?")
    finally:
        manager.close_sync()
