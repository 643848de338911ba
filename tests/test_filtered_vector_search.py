"""Issue 52, item 4: a search whose own filter drops most of the nearest neighbours in a
scope's HNSW index still returns the nearest that pass it: pgvector 0.8's iterative index scan
goes on past the scan's queue until enough rows pass. Real PostgreSQL 18, the bundled model,
the scope's own index as the flows build it; the answer checked against an exact comparison
of every vector."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from langchain_core.messages import HumanMessage

from agent_memory import MemoryManager
from agent_memory.db import ann_indexes
from agent_memory.db import snippets as snippet_repo
from agent_memory.decay import today
from agent_memory.embedding import make_embedder
from agent_memory.models import Scope
from agent_memory.settings import EmbeddingSettings, Settings
from agent_memory.stored_embeddings import embed_snippets, ensure_ann_indexes

SCOPE = Scope("robin", "assistant")
JANUARY = datetime(2026, 1, 10, tzinfo=UTC)
MARCH, APRIL = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC)
INSTRUMENTS = ["violin", "cello", "viola", "piano", "flute", "harp", "oboe", "guitar"]
OTHER = ["tax return", "dentist", "garden hose", "train ticket", "car insurance"]
K = 6


async def _fill(manager: MemoryManager) -> None:
    # the nearest to a question about music lessons: a hundred in January, outside the range
    for n in range(100):
        instrument = INSTRUMENTS[n % len(INSTRUMENTS)]
        await manager.record(
            SCOPE,
            [HumanMessage(f"My {instrument} lesson number {n} went well.")],
            occurred_at=JANUARY,
        )
    # in March: a few about music, many about other things
    for n in range(K + 2):
        await manager.record(
            SCOPE,
            [HumanMessage(f"My {INSTRUMENTS[n]} lesson in March went well.")],
            occurred_at=MARCH.replace(day=2 + n),
        )
    for n in range(40):
        await manager.record(
            SCOPE,
            [HumanMessage(f"I sorted out the {OTHER[n % len(OTHER)]} today, round {n}.")],
            occurred_at=MARCH.replace(day=10 + n % 15),
        )
    await manager.index_pending(SCOPE)


def _exact(db: psycopg.Connection[Any], vector: list[float], model: str) -> list[int]:
    """The K nearest messages in the range, every vector compared (no index)."""
    db.execute("SET enable_indexscan = off")
    rows = db.execute(
        """SELECT s.id FROM agent_memory.snippet_embeddings e
           JOIN agent_memory.snippets s ON s.id = e.snippet_id
           WHERE s.scope_key = agent_memory.scope_key(%s, %s, %s) AND e.model = %s
             AND s.occurred_at >= %s AND s.occurred_at < %s
           ORDER BY e.embedding <=> %s::vector, s.id LIMIT %s""",
        (SCOPE.user_id, SCOPE.agent_id, SCOPE.workflow_id, model, MARCH, APRIL, str(vector), K),
    ).fetchall()
    db.execute("RESET enable_indexscan")
    return [int(r[0]) for r in rows]


async def test_a_date_range_that_drops_most_of_the_nearest_still_finds_the_nearest_in_it(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    tuned = settings.model_copy(update={"embedding": EmbeddingSettings(ann_min_rows=50)})
    async with await MemoryManager.create(settings=tuned, migrate=False) as manager:
        await _fill(manager)
        embedder = make_embedder(tuned.embedding)
        assert embedder is not None and embedder.model
        pool = await manager.backend.apool()
        await embed_snippets(pool, embedder)
        assert any("snippet" in name for name in await ensure_ann_indexes(pool, embedder, SCOPE))
        (vector,) = await embedder.embed(["How are my music lessons going?"])
        async with pool.connection() as conn:
            ann = await ann_indexes.ann_index(conn, "snippets", SCOPE, embedder.model)
            assert ann is not None and ann.iterative  # this server's pgvector is 0.8 or later
            # no word of the question in any message: meaning alone ranks them
            params = snippet_repo.search_params(
                SCOPE, "qqzx", on=today(), since=MARCH, until=APRIL, limit=K, candidates=K
            )
            params["model"] = embedder.model
            found = await snippet_repo.search(conn, params, vector, ann)
            plain = await snippet_repo.search(conn, params, vector, ann._replace(iterative=False))
    exact = _exact(db, vector, embedder.model)
    assert len(exact) == K
    assert all(MARCH <= s.occurred_at < APRIL for s in found)
    # the last of the K nearest scores 0 above itself (the meaning floor) and is not shown
    assert [s.id for s in found] == exact[: len(found)] and len(found) >= K - 1
    # the same index read without the iterative scan: its queue held January's rows only
    assert len(plain) < len(found)
