"""A large scope gets an HNSW index of its own for its facts and for its messages, built by the
flows' embedding step once it passes AGENT_MEMORY_EMBEDDING_ANN_MIN_ROWS; inject then reads the
scope's nearest vectors from it (the statement names the scope, so its plans can use the
index, prepared ones too), and ranks as the exact comparison does."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from agent_memory import MemoryManager
from agent_memory.db import ann_indexes, fusion
from agent_memory.db import embeddings as embedding_repo
from agent_memory.db import recall as recall_repo
from agent_memory.db import snippets as snippet_repo
from agent_memory.decay import today
from agent_memory.embedding import make_embedder
from agent_memory.errors import ConfigurationError
from agent_memory.models import Scope
from agent_memory.settings import EmbeddingSettings, Settings
from agent_memory.stored_embeddings import embed_snippets, ensure_ann_indexes
from benchmarks.retrieval import load_facts
from tests.vectors import embed_all

BIG, SMALL = Scope("big", "assistant"), Scope("small", "assistant")
TOPICS = ["violin", "garden", "marathon", "coffee", "Kubernetes", "sailing", "pottery", "chess"]


async def test_a_large_scope_gets_its_own_index_and_inject_reads_it(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    facts = [
        {"content": f"User mentioned {t} on day {n}.", "importance": 0.5}
        for n in range(8)
        for t in TOPICS
    ]
    load_facts(db, BIG, facts)  # 64 facts
    load_facts(db, SMALL, facts[:10])
    tuned = settings.model_copy(update={"embedding": EmbeddingSettings(ann_min_rows=50)})
    manager = await MemoryManager.create(settings=tuned, migrate=False)
    try:
        for n in range(6):  # 60 messages in BIG's conversations
            await manager.record(
                BIG, [HumanMessage(f"We talked about {t} {n}.") for t in TOPICS[:5]] * 2
            )
        assert await embed_all(manager) == 74
        embedder = make_embedder(tuned.embedding)
        assert embedder is not None
        await embed_snippets(await manager.backend.apool(), embedder)
        pool = await manager.backend.apool()
        built = await ensure_ann_indexes(pool, embedder, BIG)
        assert len(built) == 2 and all("_ann_" in name for name in built)
        assert await ensure_ann_indexes(pool, embedder, BIG) == []  # once
        assert await ensure_ann_indexes(pool, embedder, SMALL) == []  # 10 facts: too few
        rows = db.execute(
            "SELECT kind, model, dims, vector_type FROM agent_memory.ann_indexes ORDER BY kind"
        ).fetchall()
        # pgvector 0.8 here: the index holds the vectors at half precision (the default, auto)
        assert rows == [
            ("facts", embedder.model, 256, "halfvec"),
            ("snippets", embedder.model, 256, "halfvec"),
        ]
        for name in built:  # valid, and partial on the scope, which it names by tag only
            index = db.execute(
                "SELECT indisvalid, pg_get_indexdef(indexrelid) FROM pg_index"
                " WHERE indexrelid = %s::regclass",
                (f"agent_memory.{name}",),
            ).fetchone()
            # pg_indexes is every role's to read, tenants' too: no scope's ids in it
            assert index is not None and index[0]
            assert "big" not in index[1] and "assistant" not in index[1]
            (tag,) = db.execute(
                "SELECT agent_memory.scope_tag(agent_memory.scope_key('big', 'assistant', NULL))"
            ).fetchone() or (None,)
            assert f"scope_tag = '{tag}'" in index[1]
            assert "(embedding)::halfvec(256)) halfvec_cosine_ops" in index[1]

        ann = ann_indexes.ann_index_sync(db, "facts", BIG, embedder.model)
        assert ann is not None and ann.dims == 256 and ann.model == embedder.model
        assert ann.vector_type == "halfvec"
        # the planner can use the scope's index for its nearest facts (at 64 facts comparing
        # all is cheaper, so sorting is priced out here, as at scale its cost does)
        vector = embedder.embed_sync(["Which instrument do I play?"])[0]
        params = fusion.ranked_params(
            BIG,
            "Which instrument do I play?",
            on=today(),
            min_importance=0.0,
            limit=5,
            candidates=20,
        )
        params = {**params, "model": embedder.model,
                  "vector": embedding_repo.vector_text(vector)}  # fmt: skip
        with db.transaction():
            db.execute("SET LOCAL enable_sort = off")
            plan = "\n".join(
                r[0]
                for r in db.execute(
                    "EXPLAIN " + recall_repo.ranked_hybrid_ann(ann), params, prepare=False
                )
            )
        index = next(n for n in built if n.startswith("fact_embeddings"))
        assert index in plan
        # so can a prepared statement's generic plan, made before any scope or vector is known:
        # the statement names the index's scope and model as its predicate does
        names: list[str] = []

        def placeholder(m: re.Match[str]) -> str:
            if m.group(1) not in names:
                names.append(m.group(1))
            return f"${names.index(m.group(1)) + 1}"

        generic = re.sub(r"%\((\w+)\)s", placeholder, recall_repo.ranked_hybrid_ann(ann))
        with db.transaction():
            db.execute("SET LOCAL enable_sort = off")
            plan = "\n".join(r[0] for r in db.execute("EXPLAIN (GENERIC_PLAN) " + generic))
        assert index in plan
        # and inject ranks as the exact comparison does
        exact = recall_repo.ranked_sync(db, params, vector)
        approximate = recall_repo.ranked_sync(db, params, vector, ann)
        assert [r[1] for r in approximate][:3] == [r[1] for r in exact][:3]
        # the index scan's queue was sized for the session of this autocommit connection, once
        assert db.execute("SHOW hnsw.ef_search").fetchone() == ("40",)  # 2 x 20 candidates
        with db.transaction():  # in a caller's transaction: for that transaction only
            inside = recall_repo.ranked_sync(db, {**params, "candidates": 30}, vector, ann)
            assert db.execute("SHOW hnsw.ef_search").fetchone() == ("60",)
        assert [r[1] for r in inside][:3] == [r[1] for r in exact][:3]
        assert db.execute("SHOW hnsw.ef_search").fetchone() == ("40",)
        assert exact[0][1].startswith("User mentioned violin")
        frame = await manager.inject(BIG, query="Which instrument do I play?")
        assert frame.ranking == "hybrid" and frame.injected_facts[0].startswith(
            "User mentioned violin"
        )
        assert frame.snippets and "violin" in frame.snippets[0].content
        assert manager.backend.ann.known[("facts", BIG, embedder.model)][0] == ann
        assert manager.inject_sync(BIG, query="Which instrument do I play?") == frame
    finally:
        await manager.close()


async def test_the_hot_path_reads_the_snippets_index_for_its_candidates_alone(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    tuned = settings.model_copy(update={"embedding": EmbeddingSettings(ann_min_rows=50)})
    manager = await MemoryManager.create(settings=tuned, migrate=False)
    try:
        for n in range(8):  # 64 messages: the index's scope
            await manager.record(BIG, [HumanMessage(f"We talked about {t} {n}.") for t in TOPICS])
        embedder = make_embedder(tuned.embedding)
        assert embedder is not None
        pool = await manager.backend.apool()
        await embed_snippets(pool, embedder)
        assert await ensure_ann_indexes(pool, embedder, BIG)
        ann = ann_indexes.ann_index_sync(db, "snippets", BIG, embedder.model)
        assert ann is not None
        question = "Which instrument do I play?"  # no word of it was said: meaning alone
        vector = embedder.embed_sync([question])[0]

        def found(queue: int | None) -> int:
            params = snippet_repo.search_params(
                BIG, question, on=today(), limit=50, candidates=20, queue=queue
            )
            params["model"] = embedder.model
            return len(snippet_repo.search_sync(db, params, vector, ann))

        # the scan keeps what the statement asks for, 5 here (each a match: fewer than the
        # candidates, so no floor), against 2 x 20 by default (the 20 nearest kept, those as
        # far as the last of them not a match)
        assert found(5) == 5
        # the statement's queue was its own: the session keeps 2 x 20 (see the test above)
        assert db.execute("SHOW hnsw.ef_search").fetchone() == ("40",)
        assert found(None) > 10
        # an inject's search asks for its candidates alone
        injector = manager._injector
        plan = injector._plan(BIG, question, None)
        injector._by_meaning(plan, vector)
        query = injector._snippet_query(BIG, plan)
        assert query is not None
        assert query.params["queue"] == max(tuned.memory.inject_candidates, 40)
    finally:
        await manager.close()


def test_vectors_stored_before_scopes_were_kept_get_their_scope(
    db: psycopg.Connection[Any],
) -> None:
    # the embeddings table as an earlier version created it: no scope_key, no ann_indexes (in
    # place of the tables schema 29 made in the test's database)
    load_facts(db, BIG, [{"content": "User plays the violin.", "importance": 0.5}])
    db.execute(
        """DROP TABLE agent_memory.ann_indexes, agent_memory.snippet_embeddings,
                      agent_memory.fact_embeddings;
           CREATE EXTENSION IF NOT EXISTS vector;
           CREATE TABLE agent_memory.fact_embeddings (
               fact_id bigint PRIMARY KEY REFERENCES agent_memory.memory_items (id)
                       ON DELETE CASCADE,
               model text NOT NULL, embedding vector NOT NULL,
               created_at timestamptz NOT NULL DEFAULT now());
           INSERT INTO agent_memory.fact_embeddings (fact_id, model, embedding)
           SELECT id, 'm', '[1,0,0]' FROM agent_memory.memory_items;"""
    )
    assert embedding_repo.ensure(db) is None
    assert db.execute("SELECT scope_key FROM agent_memory.fact_embeddings").fetchall() == [
        ("'big','assistant',NULL",)
    ]
    assert embedding_repo.ensure(db) is None  # once there, nothing to do


async def test_a_run_whose_scope_grows_past_the_threshold_builds_its_index_and_ends(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    # The run holds its scopes' claims in open transactions; CREATE INDEX CONCURRENTLY waits
    # for every older transaction, so an index built inside the run waited for the run, which
    # waited for it: the run never ended. The deadline turns such a hang into a failure.
    tuned = settings.model_copy(update={"embedding": EmbeddingSettings(ann_min_rows=20)})
    manager = await MemoryManager.create(settings=tuned, migrate=False)
    try:
        for n in range(12):  # 24 messages, more than 20 sentences
            await manager.record(
                BIG, [HumanMessage(f"I took up {TOPICS[n % 8]} in week {n}."), HumanMessage("Ok.")]
            )
        summary = await asyncio.wait_for(manager.consolidate(BIG), timeout=240)
    finally:
        await manager.close()
    assert summary["completed"] == 1 and summary["failed"] == 0
    kinds = db.execute("SELECT kind FROM agent_memory.ann_indexes ORDER BY kind").fetchall()
    assert ("snippets",) in kinds  # built by the run, once it had let go of its claims


async def test_a_halfvec_index_finds_what_a_vector_one_does_with_the_whole_vectors_scores(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    # the same scope's messages under an index of each type, built in turn (the setting
    # AGENT_MEMORY_EMBEDDING_ANN_VECTOR_TYPE): the same rows found, scored by the whole
    # vectors whichever type the index holds them as
    found: dict[str, list[tuple[int | None, float]]] = {}
    question = "Which instrument do I play?"
    for held in ("vector", "halfvec"):
        tuned = settings.model_copy(
            update={"embedding": EmbeddingSettings(ann_min_rows=50, ann_vector_type=held)}
        )
        manager = await MemoryManager.create(settings=tuned, migrate=False)
        try:
            if held == "vector":
                for n in range(8):
                    await manager.record(
                        BIG, [HumanMessage(f"We talked about {t} {n}.") for t in TOPICS]
                    )
            embedder = make_embedder(tuned.embedding)
            assert embedder is not None
            pool = await manager.backend.apool()
            await embed_snippets(pool, embedder)
            for (name,) in db.execute("DELETE FROM agent_memory.ann_indexes RETURNING name"):
                db.execute(f"DROP INDEX agent_memory.{name}")  # the other type's, built first
            assert await ensure_ann_indexes(pool, embedder, BIG)
            ann = ann_indexes.ann_index_sync(db, "snippets", BIG, embedder.model)
            assert ann is not None and ann.vector_type == held
            params = snippet_repo.search_params(BIG, question, on=today(), limit=10, candidates=20)
            params["model"] = embedder.model
            vector = embedder.embed_sync([question])[0]
            with db.transaction():
                db.execute("SET LOCAL enable_sort = off")  # the index, not a sort of them all
                plan = "\n".join(
                    r[0]
                    for r in db.execute(
                        "EXPLAIN " + snippet_repo.search_hybrid_ann(ann),
                        {**params, "vector": embedding_repo.vector_text(vector)},
                        prepare=False,
                    )
                )
            (name,) = db.execute(
                "SELECT name FROM agent_memory.ann_indexes WHERE kind = 'snippets'"
            ).fetchone() or ("",)
            assert str(name) in plan
            found[held] = [
                (s.id, s.score) for s in snippet_repo.search_sync(db, params, vector, ann)
            ]
        finally:
            await manager.close()
    assert found["halfvec"] == found["vector"] and len(found["vector"]) == 10


async def test_an_index_of_vectors_too_wide_for_halfvec_is_refused_or_kept_whole(
    db: psycopg.Connection[Any],
) -> None:
    async with await psycopg.AsyncConnection.connect(db.info.dsn, autocommit=True) as conn:
        assert await ann_indexes.index_vector_type(conn, "auto", 256) == "halfvec"
        assert await ann_indexes.index_vector_type(conn, "auto", 4096) == "vector"
        with pytest.raises(ConfigurationError) as refused:
            await ann_indexes.index_vector_type(conn, "halfvec", 4096)
        assert str(refused.value) == (
            "AGENT_MEMORY_EMBEDDING_ANN_VECTOR_TYPE 'halfvec': an HNSW index of halfvec takes up"
            " to 4000 dimensions; these vectors have 4096"
        )
        with pytest.raises(ConfigurationError, match="'float16' is not one of"):
            await ann_indexes.index_vector_type(conn, "float16", 256)
