"""python -m benchmarks.quantized [--quick] [--rows N] [--queries N]

Cheaper vectors (issue 52, item 5): an HNSW index over the bundled model's vectors as the
project builds it (``vector``, cosine), against one over the same vectors as ``halfvec``
(half the bytes) and one over their binary quantization (``bit``, Hamming distance, one bit a
dimension) whose nearest are re-ranked by the full vectors. Each is read for the 10 nearest of
each question, on one connection with prepared statements, at the queue size inject uses
(``hnsw.ef_search`` 100). For each: the time per question (p50, p99), its recall@10 against
every vector compared exactly (measured in the same run: the reference), the index's size and
build time.

The data: N sentences (default 20,000; --quick 2,000) of 6 to 12 words drawn from the
synthetic vocabulary, embedded by the bundled model (real vectors: an HNSW index meets the
structure real text has), and 200 questions of 2 or 3 of those words. What it does not show:
the project's statements around the scan (the filter, the join to the rows, the fusion), other
models (a wider one gains more from halfvec), and recall of answers rather than of neighbours
(see benchmarks.recall).
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

import psycopg

from benchmarks._common import bench_database, emit, parser, summary, timings
from benchmarks._synthetic import VOCABULARY, question

K = 10
EF_SEARCH = 100  # inject's queue: 2 x its 50 candidates
RERANK = 4 * K  # binary quantization: the nearest by Hamming distance, re-ranked by cosine

VARIANTS: dict[str, tuple[str, str]] = {
    # name: (the index's expression and operator class, the question's nearest 10)
    "vector": (
        "(e::vector(256)) vector_cosine_ops",
        "SELECT id FROM q_vectors ORDER BY e::vector(256) <=> %(q)s::vector(256) LIMIT 10",
    ),
    "halfvec": (
        "(e::halfvec(256)) halfvec_cosine_ops",
        "SELECT id FROM q_vectors ORDER BY e::halfvec(256) <=> %(q)s::halfvec(256) LIMIT 10",
    ),
    "binary, re-ranked": (
        "(binary_quantize(e)::bit(256)) bit_hamming_ops",
        f"""SELECT id FROM (
                SELECT id, e FROM q_vectors
                ORDER BY binary_quantize(e)::bit(256) <~> binary_quantize(%(q)s::vector(256))
                LIMIT {RERANK}) AS near
            ORDER BY e <=> %(q)s::vector LIMIT 10""",
    ),
}
EXACT = "SELECT id FROM q_vectors ORDER BY e <=> %(q)s::vector LIMIT 10"


def _vectors(texts: list[str]) -> list[str]:
    from agent_memory.local_embedding import load

    embedder = load()
    out: list[str] = []
    for start in range(0, len(texts), 4096):
        for vector in embedder.embed(texts[start : start + 4096], norm=True):
            out.append("[" + ",".join(f"{x:.6g}" for x in vector) + "]")
    return out


def _fill(conn: psycopg.Connection[Any], rows: int, rng: random.Random) -> None:
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("CREATE TABLE q_vectors (id int PRIMARY KEY, e vector NOT NULL)")
    texts = [" ".join(rng.sample(VOCABULARY, rng.randint(6, 12))) for _ in range(rows)]
    with conn.cursor().copy("COPY q_vectors (id, e) FROM STDIN") as copy:
        for n, vector in enumerate(_vectors(texts)):
            copy.write_row((n, vector))
    conn.execute("VACUUM ANALYZE q_vectors")


def _measure(
    conn: psycopg.Connection[Any], query: str, questions: list[str], truth: list[set[int]]
) -> dict[str, Any]:
    found = [
        {int(r[0]) for r in conn.execute(query, {"q": q}, prepare=True).fetchall()}
        for q in questions
    ]
    recall = sum(len(f & t) for f, t in zip(found, truth, strict=True)) / (K * len(truth))
    turn = iter(range(10**9))

    def one() -> None:
        conn.execute(query, {"q": questions[next(turn) % len(questions)]}, prepare=True).fetchall()

    return {"recall_at_10": round(recall, 4), **summary(timings(one, 4 * len(questions)))}


def run(rows: int, queries: int) -> dict[str, Any]:
    rng = random.Random(52)
    questions = _vectors([question(rng) for _ in range(queries)])
    with (
        bench_database("agent_memory_quantized", migrated=False) as (_admin, dsn),
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        _fill(conn, rows, rng)
        conn.execute("SET enable_indexscan = off")
        truth = [{int(r[0]) for r in conn.execute(EXACT, {"q": q}).fetchall()} for q in questions]
        result: dict[str, Any] = {"exact": _measure(conn, EXACT, questions, truth)}
        conn.execute("RESET enable_indexscan")
        conn.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
        for name, (expression, query) in VARIANTS.items():
            started = time.perf_counter()
            conn.execute(f"CREATE INDEX q_index ON q_vectors USING hnsw ({expression})")
            built = time.perf_counter() - started
            size = conn.execute("SELECT pg_relation_size('q_index')").fetchone()
            result[name] = {
                **_measure(conn, query, questions, truth),
                "index_mb": round((size[0] if size else 0) / 2**20, 2),
                "build_s": round(built, 2),
            }
            conn.execute("DROP INDEX q_index")
        version = conn.execute("SHOW server_version").fetchone()
    reference = result["vector"]["p50_ms"]
    for name in VARIANTS:
        result[name]["p50_vs_vector"] = round(result[name]["p50_ms"] / reference, 3)
    return {"rows": rows, "questions": queries, "ef_search": EF_SEARCH, "server": version,
            "variants": result}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    cli = parser("quantized", __doc__, quick="2,000 rows")
    cli.add_argument("--rows", type=int, default=20_000)
    cli.add_argument("--queries", type=int, default=200)
    args = cli.parse_args(argv)
    return emit(run(2_000 if args.quick else args.rows, args.queries))


if __name__ == "__main__":
    sys.exit(main())
