"""Issue 52, item 1: a ``DATABASE_URL`` server with an older pgvector keeps working. On
PostgreSQL 16 with pgvector 0.6.2 (the previous releases' embedded server, real): memory is
recorded, consolidated, embedded, indexed per scope and found by meaning, a search filtered by
date reads the scope's HNSW index without the iterative scan, saying so in one line, and a
Store index of ``halfvec`` is refused in one line naming the version found and the one
needed, while one of ``vector`` works."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from agent_memory import MemoryManager
from agent_memory.db import ann_indexes, pgvector
from agent_memory.embedding import make_embedder
from agent_memory.errors import ConfigurationError
from agent_memory.models import Scope
from agent_memory.settings import (
    Settings,
    use_settings,
)
from agent_memory.store import AgentMemoryStore
from agent_memory.stored_embeddings import embed_snippets, ensure_ann_indexes
from tests.previous_release import settings_on
from tests.test_store_index import CharacterEmbeddings, _config
from tests.vectors import embed_all

SCOPE = Scope("sam", "assistant")
MARCH = datetime(2026, 3, 2, tzinfo=UTC)


@pytest.fixture
def old_settings(old_database_url: str) -> Settings:
    s = settings_on(old_database_url, ann_min_rows=10)
    use_settings(s)
    yield s  # type: ignore[misc]
    use_settings(None)


def test_the_older_server_is_what_this_test_needs(old_database_url: str) -> None:
    with psycopg.connect(old_database_url) as conn:
        row = conn.execute(
            """SELECT current_setting('server_version_num')::int,
                      (SELECT default_version FROM pg_available_extensions WHERE name = 'vector')"""
        ).fetchone()
    assert row is not None and row[0] // 10000 == 16 and row[1] == "0.6.2"


@pytest.mark.usefixtures("prefect_harness")
async def test_memory_works_with_pgvector_0_6_and_says_what_it_does_without_0_8(
    old_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgvector, "_told", set())  # what this process was told before
    told: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: told.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger(pgvector.__name__).addHandler(handler)
    monkeypatch.setattr(pgvector.log, "level", logging.WARNING)
    async with await MemoryManager.create(settings=old_settings, migrate=False) as manager:
        for n in range(12):
            await manager.record(
                SCOPE,
                [HumanMessage(f"My violin lesson number {n} went well. I live in Porto.")],
                occurred_at=MARCH.replace(day=2 + n),
            )
        await manager.index_pending(SCOPE)
        await manager.consolidate()
        await embed_all(manager)
        embedder = make_embedder(old_settings.embedding)
        assert embedder is not None and embedder.model
        pool = await manager.backend.apool()
        await embed_snippets(pool, embedder)
        await ensure_ann_indexes(pool, embedder, SCOPE)  # if the flow has not built it yet
        async with pool.connection() as conn:
            ann = await ann_indexes.ann_index(conn, "snippets", SCOPE, embedder.model)
        assert ann is not None and not ann.iterative and ann.vector_type == "vector"
        logging.getLogger(pgvector.__name__).removeHandler(handler)
        lines = [line for line in told if "iterative" in line]
        assert lines == [  # once, however often the index was looked up
            "an iterative index scan (hnsw.iterative_scan) needs pgvector 0.8 or later; this"
            " server has 0.6.2: a search filtered by date or by current facts keeps what passes"
            " of the nearest its HNSW index returns, and may find fewer than exist"
        ]
        # the index holds the whole vectors (AGENT_MEMORY_EMBEDDING_ANN_VECTOR_TYPE=auto)
        assert [line for line in told if "halfvec" in line] == [
            "the halfvec type needs pgvector 0.7 or later; this server has 0.6.2: a scope's"
            " HNSW index holds its vectors in full"
        ]
        found = await manager.search_conversations(
            SCOPE, "how are the music classes?", since=MARCH, limit=3
        )
        assert found and all("violin" in s.content for s in found)
        memory = await manager.inject(SCOPE, query="where does sam live?")
        assert memory.ranking == "hybrid"
        assert any("Porto" in fact for fact in memory.injected_facts)


async def test_a_halfvec_scope_index_asked_for_says_which_pgvector_it_needs(
    old_database_url: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(old_database_url, autocommit=True) as conn:
        with pytest.raises(ConfigurationError) as refused:
            await ann_indexes.index_vector_type(conn, "halfvec", 256)
        assert str(refused.value) == (
            "AGENT_MEMORY_EMBEDDING_ANN_VECTOR_TYPE 'halfvec': the halfvec type needs pgvector"
            " 0.7 or later; this server has 0.6.2"
        )
        assert await ann_indexes.index_vector_type(conn, "vector", 256) == "vector"


def test_a_halfvec_store_index_says_which_pgvector_it_needs(old_settings: Settings) -> None:
    embeddings = CharacterEmbeddings(dims=16)
    halfvec = _config("halfvec", "cosine", embeddings, None)
    with (
        AgentMemoryStore.from_conn_string(settings=old_settings, index=halfvec) as store,  # type: ignore[arg-type]
        pytest.raises(ConfigurationError) as refused,
    ):
        store.setup()
    assert str(refused.value) == (
        "index vector_type 'halfvec': the halfvec type needs pgvector 0.7 or later;"
        " this server has 0.6.2"
    )
    vector = _config("vector", "cosine", embeddings, None)
    with AgentMemoryStore.from_conn_string(settings=old_settings, index=vector) as store:  # type: ignore[arg-type]
        store.setup()
        store.put(("docs",), "a", {"text": "the violin lesson"})
        store.put(("docs",), "b", {"text": "a tax return"})
        assert store.search(("docs",), query="the violin lesson")[0].key == "a"
