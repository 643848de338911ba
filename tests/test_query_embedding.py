"""Embedding the question on the hot path: a server without pgvector, a hanging or refusing
embedding service, vectors of other sizes, and the deadline of an embedding call."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from agent_memory import MemoryManager
from agent_memory.db.migrations import current_version, load_migrations
from agent_memory.embedding import make_embedder, vectors_ready
from agent_memory.errors import EmbeddingError, TransientEmbeddingError
from agent_memory.settings import DatabaseSettings, Settings
from benchmarks.retrieval import load_facts
from tests.embedded import DANA, DATA, with_embeddings
from tests.fake_llm import FakeLLM


async def test_a_role_that_may_not_create_pgvector_says_so_and_falls_back_to_full_text(
    settings: Settings,
    fake_llm: FakeLLM,
    app_database_url: str,
    caplog: Any,
) -> None:
    app = with_embeddings(settings, fake_llm).model_copy(
        update={"db": DatabaseSettings(url=app_database_url, pool_min_size=1, pool_max_size=2)}
    )
    # the database's role migrates it, and may not create pgvector
    manager = await MemoryManager.create(settings=app)
    try:
        with psycopg.connect(app_database_url, autocommit=True) as conn:
            # migrated to the end, without the vector tables
            assert current_version(conn) == len(load_migrations())
            assert conn.execute(
                "SELECT to_regclass('agent_memory.fact_embeddings')"
            ).fetchone() == (None,)
            load_facts(conn, DANA, DATA["facts"])
        assert "permission denied to create extension" in (vectors_ready(manager.database) or "")
        with caplog.at_level(logging.WARNING, logger="agent_memory.manager"):
            frame = await manager.inject(DANA, query="Any tips for my daughter's violin practice?")
            await manager.inject(DANA, query="violin")
        assert frame.ranking == "text"
        assert frame.injected_facts[0] == "User's daughter plays the violin."
        warnings = [r.message for r in caplog.records if "cannot store embeddings" in r.message]
        assert len(warnings) == 1, warnings  # said once, not on every inject
        assert "relevance falls back to full-text search" in warnings[0]
        assert fake_llm.embedding_requests == []  # no embedding call for nothing
    finally:
        await manager.close()

    from agent_memory.settings import use_settings
    from agent_memory_flows.embeddings import EmbedParams, reembed_flow

    use_settings(app)
    try:
        with pytest.raises(EmbeddingError, match=r"cannot store embeddings: .*permission denied"):
            await reembed_flow.fn(EmbedParams())
    finally:
        use_settings(settings)


async def test_a_hanging_embedding_service_costs_one_deadline_then_is_left_alone(
    settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any], caplog: Any
) -> None:
    load_facts(db, DANA, DATA["facts"])
    slow = with_embeddings(settings, fake_llm)
    slow = slow.model_copy(
        update={
            "embedding": slow.embedding.model_copy(
                update={"query_timeout": 0.3, "query_cooldown_s": 3600}
            )
        }
    )
    fake_llm.embedding_delay_s = 5  # far past the deadline
    manager = await MemoryManager.create(settings=slow, migrate=False)
    try:
        with caplog.at_level(logging.WARNING, logger="agent_memory.embedding"):
            frame = await manager.inject(DANA, query="Any tips for my daughter's violin practice?")
        assert frame.ranking == "text"
        assert frame.injected_facts[0] == "User's daughter plays the violin."
        assert "embedding the question failed (timed out)" in caplog.text
        calls = len(fake_llm.embedding_requests)
        # within the cool-down no call is made at all, async or sync
        assert (await manager.inject(DANA, query="violin")).ranking == "text"
        assert manager.inject_sync(DANA, query="violin").ranking == "text"
        assert len(fake_llm.embedding_requests) == calls
    finally:
        await manager.close()


async def test_a_model_that_refuses_every_question_gets_the_cool_down(
    stored_facts: Settings, fake_llm: FakeLLM, caplog: Any
) -> None:
    fake_llm.embedding_status = 400  # a setting the model does not take
    manager = await MemoryManager.create(settings=stored_facts)
    try:
        with caplog.at_level(logging.WARNING, logger="agent_memory.embedding"):
            for _ in range(3):
                assert (await manager.inject(DANA, query="violin")).ranking == "text"
        assert len(fake_llm.embedding_requests) == 3
        assert "not calling openai/embed-a again for 30 s" in caplog.text
        # cooling down: no call at all
        assert manager.inject_sync(DANA, query="violin").ranking == "text"
        assert (await manager.inject(DANA, query="violin")).ranking == "text"
        assert len(fake_llm.embedding_requests) == 3
    finally:
        await manager.close()


async def test_a_question_the_model_refuses_is_ranked_by_full_text_and_the_next_is_not(
    stored_facts: Settings, fake_llm: FakeLLM, caplog: Any
) -> None:
    fake_llm.embedding_max_chars = 100
    long_question = "Any tips for my daughter's violin practice? " * 5
    manager = await MemoryManager.create(settings=stored_facts)
    try:
        with caplog.at_level(logging.WARNING, logger="agent_memory.embedding"):
            frame = await manager.inject(DANA, query=long_question)
        assert frame.ranking == "text"
        assert frame.injected_facts[0] == "User's daughter plays the violin."
        assert "embedding the question was refused" in caplog.text
        assert "maximum context length" in caplog.text
        # the service is up: no cool-down, the next question is embedded (async and sync)
        assert (await manager.inject(DANA, query="violin")).ranking == "vector"
        assert manager.inject_sync(DANA, query=long_question).ranking == "text"
        assert manager.inject_sync(DANA, query="violin").ranking == "vector"
    finally:
        await manager.close()


@pytest.mark.usefixtures("prefect_harness")
async def test_stored_vectors_of_other_dimensions_count_as_unrelated_not_as_an_error(
    embedded: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    from agent_memory.db import fusion
    from agent_memory.db import recall as recall_repo
    from agent_memory.decay import today

    manager = await MemoryManager.create(settings=embedded, migrate=False)
    try:
        await manager.record(DANA, [HumanMessage("Let me tell you about myself.")])
        await manager.consolidate(DANA)  # 256-dimension vectors stored
    finally:
        await manager.close()
    params = fusion.ranked_params(
        DANA,
        "violin",
        on=today(),
        min_importance=0.0,
        limit=5,
        candidates=100,
    )
    rows = recall_repo.ranked_sync(db, {**params, "model": "openai/embed-a"}, [1.0] * 8)
    assert len(rows) == 5  # ranked by importance and recency; no "different dimensions" error


async def test_an_embedding_call_that_outlasts_its_timeout_is_cut_at_it(
    settings: Settings, fake_llm: FakeLLM
) -> None:
    # each byte of the answer comes in time for a read; the whole answer would take minutes
    fake_llm.embedding_drip_s = 0.2
    embedder = make_embedder(
        with_embeddings(settings, fake_llm).embedding.model_copy(update={"timeout": 1.0})
    )
    with pytest.raises(TransientEmbeddingError, match=r"no complete answer within 1 s"):
        await embedder.embed(["a text to embed"])
