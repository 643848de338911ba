"""A group of scopes is embedded at once (a statement and a model call per batch of rows, not per
scope), and still says what each scope got; vectors travel as one packed float4[] parameter and
arrive exactly as the model gave them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from psycopg import sql

from agent_memory import MemoryManager
from agent_memory.consolidation.embed import Embedding, embed_each
from agent_memory.consolidation.groups import Limits
from agent_memory.db import embeddings as repo
from agent_memory.errors import EmbeddingRejectedError, TransientEmbeddingError
from agent_memory.local_embedding import LocalEmbedder
from agent_memory.models import Scope
from agent_memory.settings import EmbeddingSettings, Settings
from agent_memory.stored_embeddings import Embedded, embed_scopes
from benchmarks.retrieval import load_facts

A, B, C, OTHER = (Scope(user_id=u, agent_id="group") for u in ("ann", "bob", "cy", "other"))


class Counting(LocalEmbedder):
    """The bundled model, counting its calls; it refuses texts that say REFUSE, and while
    ``down`` fails every call as an outage would."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(settings)
        self.calls: list[int] = []
        self.down = False

    async def embed_each(self, texts: Sequence[str]) -> list[list[float] | EmbeddingRejectedError]:
        self.calls.append(len(texts))
        if self.down:
            raise TransientEmbeddingError("embedding model overloaded")
        out = await super().embed_each(texts)
        return [
            EmbeddingRejectedError("this model refuses the marker") if "REFUSE" in t else v
            for t, v in zip(texts, out, strict=True)
        ]


def facts(n: int, who: str) -> list[dict[str, Any]]:
    return [{"content": f"{who} mentioned hobby number {i}.", "importance": 0.5} for i in range(n)]


async def fill(manager: MemoryManager, db: psycopg.Connection[Any]) -> None:
    load_facts(db, A, facts(3, "Ann"))
    load_facts(db, B, [*facts(5, "Bob"), {"content": "Bob said REFUSE.", "importance": 0.5}])
    load_facts(db, OTHER, facts(2, "Other"))
    await manager.record(A, [HumanMessage("I sail on weekends."), AIMessage("Nice, sailing!")])
    await manager.record(C, [HumanMessage("REFUSE this one."), HumanMessage("Chess tonight.")])


def float4(values: Sequence[float]) -> list[float]:
    """The values as float4 (what pgvector keeps), to compare exactly."""
    return np.asarray(values, dtype=np.float32).tolist()


def vectors_of(db: psycopg.Connection[Any], table: str, key: str) -> dict[str, Any]:
    """content -> the stored vector (as float4 values, or None) of every row of ``table``."""
    source = "memory_items" if table == "fact_embeddings" else "snippets"
    query = sql.SQL(
        "SELECT m.content, e.embedding::real[] FROM agent_memory.{} e"
        " JOIN agent_memory.{} m ON m.id = e.{}"
    ).format(sql.Identifier(table), sql.Identifier(source), sql.Identifier(key))
    rows = db.execute(query).fetchall()
    return dict(rows)


async def test_a_group_is_embedded_at_once_and_each_scope_gets_its_own_counts(
    settings: Settings, manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await fill(manager, db)
    embedder = Counting(EmbeddingSettings(batch_size=4))
    pool = await manager.backend.apool()
    assert repo.ensure(db) is None  # the vectors' tables (schema 29, with pgvector)

    done = await embed_scopes(pool, embedder, [A, B, C])

    assert [(d.stored, d.refused, d.snippets) for d in done] == [(3, 0, 2), (5, 1, 0), (0, 0, 1)]
    assert done[1].refusals[0][1] == "this model refuses the marker"
    # 9 facts in batches of 4 across the three scopes, then 4 messages: 3 + 1 calls
    assert embedder.calls == [4, 4, 1, 4]
    stored = vectors_of(db, "fact_embeddings", "fact_id")
    assert set(stored) == {f["content"] for f in facts(3, "Ann") + facts(5, "Bob")}  # no OTHER
    # exactly the model's vector, as float4
    wanted = await LocalEmbedder(EmbeddingSettings()).embed(["Ann mentioned hobby number 1."])
    got = stored["Ann mentioned hobby number 1."]
    assert len(got) == 256 and float4(got) == float4(wanted[0])
    messages = vectors_of(db, "snippet_embeddings", "snippet_id")
    assert messages["REFUSE this one."] is None  # refused: kept, without a vector
    assert len(messages["Chess tonight."]) == 256
    assert db.execute("SELECT count(*) FROM agent_memory.fact_embedding_rejections").fetchone() == (
        1,
    )

    # nothing left to do: one read per kind, no model call, nothing counted
    embedder.calls.clear()
    again = await embed_scopes(pool, embedder, [A, B, C])
    assert again == [Embedded(), Embedded(), Embedded()] and embedder.calls == []


async def test_a_failed_group_keeps_each_scope_waiting_and_a_retry_embeds_them(
    settings: Settings, manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    import logging

    await fill(manager, db)
    assert repo.ensure(db) is None
    embedder = Counting(EmbeddingSettings())
    embedder.down = True
    pool = await manager.backend.apool()
    work = Embedding([A, B, C])
    log = logging.getLogger("test")

    again = await embed_each(pool, work, embedder, Limits.of(2, 2), log)

    assert len(again) == 3 and set(work.errors) == {A, B, C} and not work.done
    assert db.execute("SELECT count(*) FROM agent_memory.fact_embeddings").fetchone() == (0,)
    embedder.down = False
    assert await embed_each(pool, work, embedder, Limits.of(2, 2), log) == []
    assert not work.errors
    assert {s: (d.stored, d.snippets) for s, d in work.done.items()} == {
        A: (3, 2),
        B: (5, 0),
        C: (0, 1),
    }


@pytest.mark.parametrize(
    "vectors",
    [[], [None], [[0.5, -0.25, 1e-7]], [[1.0, 2.0], None, [3.0, 4.0, 5.0], [6.0]]],
    ids=["none", "only-missing", "one", "ragged"],
)
def test_packed_vectors_arrive_as_sent(
    db: psycopg.Connection[Any], vectors: list[list[float] | None]
) -> None:
    packed = repo.Packed(vectors)
    with db.cursor() as cur:
        cur.adapters.register_dumper(repo.Packed, repo._PackedDumper)
        rows = cur.execute(
            """SELECT CASE WHEN n > 0 THEN (%s::real[])[at:at + n - 1] END
               FROM unnest(%s::int[], %s::int[]) WITH ORDINALITY AS t(at, n, o) ORDER BY o""",
            (packed, packed.at, packed.n),
        ).fetchall()
    assert [None if r[0] is None else float4(r[0]) for r in rows] == [
        None if v is None else float4(v) for v in vectors
    ]
