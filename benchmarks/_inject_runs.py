"""The measurements of the inject benchmark (benchmarks/inject.py), each on the connection it
is given: the vectors loaded, the questions drawn, the inject queries timed in interleaved
rounds, a question's embedding, the seed's query, record single and batched, the plans, and
how many of a scope's facts a question matches."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import date
from typing import Any

import psycopg

from agent_memory.db import ann_indexes, fulltext, fusion, recall
from agent_memory.db import embeddings as embedding_repo
from agent_memory.db import episodes as episode_repo
from agent_memory.db import facts as fact_repo
from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.decay import today
from agent_memory.models import Scope
from agent_memory.settings import MemorySettings
from benchmarks._common import timings
from benchmarks._synthetic import EMBED_MODEL, embed_locally, question, scope_of

# the seed's inject query, on the columns it had (importance is current in the seed's model)
SEED_QUERY = """
SELECT * FROM agent_memory.memory_items
WHERE user_id IS NOT DISTINCT FROM %s
  AND agent_id IS NOT DISTINCT FROM %s
  AND workflow_id IS NOT DISTINCT FROM %s
  AND importance >= %s
ORDER BY importance DESC
LIMIT %s
"""

# one random vector per fact (the reference to m.id keeps the subquery from being run once)
LOAD_EMBEDDINGS = """
INSERT INTO agent_memory.fact_embeddings (fact_id, scope_key, model, embedding)
SELECT m.id, m.scope_key, %(model)s,
       (SELECT array_agg(random() - 0.5) FROM generate_series(1, %(dims)s)
        WHERE m.id IS NOT NULL)::vector
FROM agent_memory.memory_items m
"""
# up to this many facts, each is embedded by the bundled model (else a random vector)
REAL_VECTORS_UP_TO = 200_000
RECORD_BATCH = 100
ROUNDS = 10


# How many of a scope's current facts match a question (any of its words), and of how many.
MATCHES = f"""
SELECT count(*) FILTER (WHERE m.search @@ query.q), count(*)
FROM agent_memory.memory_items m, {fulltext.QUERY} AS query
WHERE {SCOPE_MATCH} AND m.superseded_at IS NULL
"""


# read once: building settings takes longer than the query they shape
_SETTINGS = MemorySettings()


def relevance_params(scope: Scope, text: str | None, day: date) -> dict[str, Any]:
    return fusion.ranked_params(
        scope,
        text,
        on=day,
        min_importance=0.1,
        limit=20,
        candidates=_SETTINGS.inject_candidates,
        fusion=fusion.Fusion.of(_SETTINGS),
    )


def explain(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> str:
    return "\n".join(r[0] for r in conn.execute("EXPLAIN " + query, params))


def real_vectors(facts: int, dims: int) -> bool:
    """Whether the facts and questions are embedded by the bundled model (else random)."""
    return facts <= REAL_VECTORS_UP_TO and dims == 256


def load_embeddings(conn: psycopg.Connection[Any], facts: int, dims: int) -> float:
    """A vector for every fact; the seconds it took."""
    t = time.perf_counter()
    reason = embedding_repo.ensure(conn)
    if reason is not None:
        raise SystemExit(f"pgvector is needed for the embedding case: {reason}")
    if real_vectors(facts, dims):
        embed_locally(conn, "memory_items", "fact_embeddings", "fact_id")
    else:  # a million texts would take minutes to embed: random vectors
        conn.execute(LOAD_EMBEDDINGS, {"model": EMBED_MODEL, "dims": dims})
    conn.execute("VACUUM ANALYZE agent_memory.fact_embeddings")
    return time.perf_counter() - t


@dataclass(frozen=True)
class Questions:
    """What the timed calls ask: a scope per call (``picks``), a question for each
    (``asks``), 50 question vectors used in turn, and the day they ask about."""

    picks: list[Scope]
    asks: list[tuple[Scope, str]]
    vectors: list[list[float]]
    day: date


def draw(scopes: int, iterations: int, dims: int, *, real: bool) -> Questions:
    """The questions, the same in every run (seeded generators)."""
    rng = random.Random(7)
    picks = [scope_of(rng.randrange(scopes)) for _ in range(iterations)]
    # a separate generator, so the picks stay those of earlier runs
    q_rng = random.Random(11)
    asks = [(scope, question(q_rng)) for scope in picks]
    day = today()
    v_rng = random.Random(13)
    vectors = [[v_rng.random() - 0.5 for _ in range(dims)] for _ in range(50)]
    if real:  # the questions' own vectors
        from agent_memory.local_embedding import load

        vectors = [list(map(float, v)) for v in load().embed([t for _, t in asks[:50]], norm=True)]
    return Questions(picks, asks, vectors, day)


def time_injects(
    conn: psycopg.Connection[Any], q: Questions, iterations: int
) -> dict[str, list[float]]:
    """SELECT 1 and the inject queries, interleaved in rounds so drift on the machine hits
    them alike: each one's timings in ms, by name."""
    day, vectors = q.day, q.vectors
    it = iter(q.picks * 2)
    rel_it = iter(q.asks * 2)
    vec_it = iter([(scope, vectors[i % 50]) for i, scope in enumerate(q.picks)] * 2)

    def inject() -> None:
        rows = fact_repo.top_sync(conn, next(it), 0.1, 20, day)
        assert rows

    def inject_relevance_text() -> None:
        scope, text = next(rel_it)
        rows = recall.ranked_sync(conn, relevance_params(scope, text, day))
        assert rows

    # which scopes have an HNSW index of their own (inject looks it up once a minute)
    ann = {
        scope: ann_indexes.ann_index_sync(conn, "facts", scope, EMBED_MODEL)
        for scope in {scope for scope, _ in q.asks}
    }
    hyb_it = iter([(scope, text, vectors[i % 50]) for i, (scope, text) in enumerate(q.asks)] * 2)

    def inject_relevance_embedding() -> None:
        scope, vector = next(vec_it)
        params = {**relevance_params(scope, None, day), "model": EMBED_MODEL}
        rows = recall.ranked_sync(conn, params, vector, ann[scope])
        assert rows

    def inject_hybrid() -> None:
        # the default ranking: full text and meaning fused, the question embedded by
        # the bundled model (its cost is measured on its own: time_question_embedding)
        scope, text, vector = next(hyb_it)
        params = {**relevance_params(scope, text, day), "model": EMBED_MODEL}
        rows = recall.ranked_sync(conn, params, vector, ann[scope])
        assert rows

    def select1() -> None:
        conn.execute("SELECT 1").fetchall()

    steps = {
        "select1": select1,
        "inject": inject,
        "inject_relevance_text": inject_relevance_text,
        "inject_relevance_embedding": inject_relevance_embedding,
        "inject_hybrid": inject_hybrid,
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(ROUNDS):
        for name, step in steps.items():
            times[name] += timings(step, iterations // ROUNDS)
    return times


def time_question_embedding(asks: list[tuple[Scope, str]], iterations: int) -> list[float]:
    """Embedding a question with the bundled model, on its own: ms per question."""
    from agent_memory.local_embedding import LocalEmbedder
    from agent_memory.settings import EmbeddingSettings

    local = LocalEmbedder(EmbeddingSettings())
    texts = iter([text for _, text in asks] * 2)
    return timings(lambda: local._each([next(texts)]), min(iterations, 1000))


def time_seed(conn: psycopg.Connection[Any], picks: list[Scope], n: int) -> list[float]:
    """The seed's query, ``n`` times: ms each."""
    seed_it = iter(picks)

    def seed() -> None:
        conn.execute(SEED_QUERY, (*next(seed_it).params, 0.1, 20)).fetchall()

    return timings(seed, n, warmup=2)


def time_records(
    conn: psycopg.Connection[Any], picks: list[Scope], iterations: int
) -> tuple[list[float], list[float]]:
    """Record: one episode per call, against a batch of RECORD_BATCH per call, interleaved in
    rounds: ms per call of each."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "I prefer tea over coffee."},
        {"role": "assistant", "content": "Noted."},
    ]
    meta: dict[str, Any] = {"bytes": 90}
    rec_it = iter(picks * 4)

    def record_single() -> None:
        episode_repo.insert_sync(conn, next(rec_it), messages, meta)

    def record_batched() -> None:
        rows = [(next(rec_it), messages, meta, None) for _ in range(RECORD_BATCH)]
        episode_repo.insert_many_sync(conn, rows)

    single: list[float] = []
    batched: list[float] = []
    for _ in range(ROUNDS):
        single += timings(record_single, max(iterations // (ROUNDS * 4), 5), warmup=2)
        batched += timings(record_batched, 2, warmup=1)
    return single, batched


def plans(conn: psycopg.Connection[Any], q: Questions) -> tuple[str, str, str]:
    """The plans of inject by importance, by full-text relevance and by embeddings."""
    plan = explain(conn, fact_repo.TOP, fact_repo.top_params(q.picks[0], 0.1, 20, q.day))
    rel_plan = explain(conn, recall.RANKED_TEXT, relevance_params(*q.asks[0], q.day))
    emb_plan = explain(
        conn,
        recall.RANKED_HYBRID,
        {
            **relevance_params(q.picks[0], None, q.day),
            "model": EMBED_MODEL,
            "vector": embedding_repo.vector_text(q.vectors[0]),
        },
    )
    return plan, rel_plan, emb_plan


def match_shares(conn: psycopg.Connection[Any], asks: list[tuple[Scope, str]]) -> list[float]:
    """How selective the questions are: the share of its scope's current facts each matches."""
    matches = [
        conn.execute(MATCHES, {**scope.as_dict(), "text": text}).fetchone() for scope, text in asks
    ]
    return [m[0] / m[1] for m in matches if m is not None and m[1]]
