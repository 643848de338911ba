"""python -m benchmarks.levels [--quick] [--facts N] [--iterations N]

Levels of memory (issue 39): inject reading three levels against one, in the same run. Loads
N facts (default 10,000) into each of five scopes of a fresh database (the embedded
PostgreSQL unless DATABASE_URL is set; agent_memory_bench_levels, created and dropped): the
workflow (user-0, agent-0, wf-0), the person with the agent (user-0, agent-0), the person
(user-0), a sibling (user-0, agent-1) and another user (user-1). Each fact is embedded by the
bundled model, each scope's word counts are folded and each scope gets its own HNSW index, as
the flows would leave them. Then, on
one connection, interleaved in rounds:

* one_level    - the ranking of the workflow's own facts (share=exact): recall.RANKED_HYBRID
                 through its index, the statement inject runs by default
* three_levels - the same question over the workflow and the two levels above it
                 (share=user): level_reads.ranked_levels, each level's index read in turn
* the same pair by full text alone, and by importance alone (facts.TOP, level_reads.levels_top)

It prints JSON with p50/p95 in ms and each three/one ratio of p50s; bound: hybrid <= 1.3.
"""

from __future__ import annotations

import random
import sys
from datetime import date
from typing import Any

from agent_memory.db import ann_indexes, fusion, level_reads, recall, term_counts
from agent_memory.db import embeddings as embedding_repo
from agent_memory.db import facts as fact_repo
from agent_memory.decay import today
from agent_memory.models import Scope
from agent_memory.settings import MemorySettings
from benchmarks._common import agent_connection, bench_database, emit, parser, summary, timings
from benchmarks._synthetic import (
    EMBED_MODEL,
    LOAD,
    build_ann_indexes,
    embed_locally,
    question,
)

BENCH_DB = "agent_memory_bench_levels"
WORKFLOW = Scope("user-0", "agent-0", "wf-0")
SCOPES: tuple[Scope, ...] = (
    WORKFLOW,
    Scope("user-0", "agent-0"),
    Scope("user-0"),
    Scope("user-0", "agent-1"),
    Scope("user-1"),
)

# the synthetic facts of benchmarks._synthetic, filed under SCOPES[s] instead of 'user-s'
_PARTS = {
    "'user-' || s,": "(%(users)s::text[])[1 + s],",
    "CASE WHEN s %% 2 = 0 THEN 'agent-' || (s %% 5) END,": "(%(agents)s::text[])[1 + s],",
    "CASE WHEN s %% 3 = 0 THEN 'wf-' || (s %% 11) END,": "(%(workflows)s::text[])[1 + s],",
}
LOAD_LEVELS = LOAD
for _old, _new in _PARTS.items():
    assert _old in LOAD_LEVELS, _old
    LOAD_LEVELS = LOAD_LEVELS.replace(_old, _new)

_SETTINGS = MemorySettings()


def _params(text: str | None, day: date) -> dict[str, Any]:
    return fusion.ranked_params(
        WORKFLOW,
        text,
        on=day,
        min_importance=_SETTINGS.inject_min_importance,
        limit=_SETTINGS.inject_limit,
        candidates=_SETTINGS.inject_candidates,
        fusion=fusion.Fusion.of(_SETTINGS),
    )


def _load(conn: Any, dsn: str, per_scope: int) -> None:
    """The five scopes' facts, embedded, their word counts folded, each with its index."""
    conn.execute(
        LOAD_LEVELS,
        {
            "facts": per_scope * len(SCOPES),
            "scopes": len(SCOPES),
            "users": [s.user_id for s in SCOPES],
            "agents": [s.agent_id for s in SCOPES],
            "workflows": [s.workflow_id for s in SCOPES],
        },
    )
    conn.execute("VACUUM ANALYZE agent_memory.memory_items")
    reason = embedding_repo.ensure(conn)
    if reason is not None:
        raise SystemExit(f"pgvector is needed: {reason}")
    embed_locally(conn, "memory_items", "fact_embeddings", "fact_id")
    # each fact's word counts folded into its scope's, as the consolidation flow leaves
    # them: unfolded, a level's statistics are read from one row per fact, and three
    # levels cost three times that
    conn.execute(term_counts.COMPACT_ALL)
    conn.execute("VACUUM ANALYZE agent_memory.fact_embeddings")
    conn.execute("VACUUM ANALYZE agent_memory.term_counts")
    build_ann_indexes(dsn, "facts", list(SCOPES), EMBED_MODEL)


def run(per_scope: int, iterations: int) -> dict[str, Any]:
    levels = WORKFLOW.levels("user")
    assert len(levels) == 3
    with bench_database(BENCH_DB) as (_admin, dsn), agent_connection(dsn) as conn:
        _load(conn, dsn, per_scope)
        anns = [ann_indexes.ann_index_sync(conn, "facts", s, EMBED_MODEL) for s in levels]

        from agent_memory.local_embedding import load

        rng = random.Random(11)
        asks = [question(rng) for _ in range(50)]
        vectors = [list(map(float, v)) for v in load().embed(asks, norm=True)]
        day = today()
        n = {"i": 0}

        def ask() -> tuple[str, list[float]]:
            n["i"] += 1
            return asks[n["i"] % 50], vectors[n["i"] % 50]

        def one_hybrid() -> None:
            text, vector = ask()
            params = {**_params(text, day), "model": EMBED_MODEL}
            assert recall.ranked_sync(conn, params, vector, anns[0])

        def three_hybrid() -> None:
            text, vector = ask()
            params = {**_params(text, day), "model": EMBED_MODEL}
            assert level_reads.ranked_levels_sync(conn, params, levels, vector, anns)[0]

        def one_text() -> None:
            assert recall.ranked_sync(conn, _params(ask()[0], day))

        def three_text() -> None:
            assert level_reads.ranked_levels_sync(conn, _params(ask()[0], day), levels)[0]

        def one_top() -> None:
            assert fact_repo.top_sync(conn, WORKFLOW, 0.1, 20, day)

        def three_top() -> None:
            assert level_reads.top_levels_sync(conn, levels, 0.1, 20, day)[0]

        cases = {
            "hybrid": (one_hybrid, three_hybrid),
            "text": (one_text, three_text),
            "importance": (one_top, three_top),
        }
        ms: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in cases}
        rounds = 10
        for _ in range(rounds):
            for name, (one, three) in cases.items():
                ms[name][0].extend(timings(one, iterations // rounds))
                ms[name][1].extend(timings(three, iterations // rounds))
    result: dict[str, Any] = {"facts_per_scope": per_scope, "scopes": len(SCOPES)}
    ratios = {}
    for name, (one_ms, three_ms) in ms.items():
        a, b = summary(one_ms, (0.5, 0.95)), summary(three_ms, (0.5, 0.95))
        result[name] = {"one_level": a, "three_levels": b}
        ratios[f"{name}_three_over_one_p50"] = round(b["p50_ms"] / a["p50_ms"], 2)
    result["ratios"] = ratios
    result["bounds"] = {"hybrid_three_over_one_p50": "<= 1.3", "apply_at": "10,000 per scope"}
    result["pass"] = ratios["hybrid_three_over_one_p50"] <= 1.3 if per_scope >= 10_000 else None
    return result


def main(argv: list[str] | None = None) -> int:
    cli = parser("levels", __doc__, quick="2,000 facts per scope")
    cli.add_argument("--facts", type=int, default=10_000, help="facts per scope")
    cli.add_argument("--iterations", type=int, default=1000)
    args = cli.parse_args(argv)
    if args.quick:
        args.facts, args.iterations = 2000, 200
    return emit(run(args.facts, args.iterations))


if __name__ == "__main__":
    sys.exit(main())
