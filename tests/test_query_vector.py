"""A question's vector goes to the server in pgvector's binary form
(agent_memory.db.query_vector): the server reads the same vector as from its text form, a
ranking finds the same rows either way, and nothing is registered beyond the connection."""

from __future__ import annotations

import random
import struct
from typing import Any

import psycopg
import pytest
from psycopg.adapt import PyFormat

from agent_memory.db import recall
from agent_memory.db.embeddings import vector_text
from agent_memory.db.fusion import ranked_params
from agent_memory.db.query_vector import QueryVector, sendable
from agent_memory.decay import today
from agent_memory.models import Scope
from benchmarks.retrieval import load_facts


def _float4(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def test_the_server_reads_the_vector_its_text_form_gives(db: psycopg.Connection[Any]) -> None:
    sendable(db)
    rng = random.Random(11)
    for dims in (1, 3, 256, 1536):
        for _ in range(20):
            # float4 values, as a model's vector is (the bundled one's, and any once stored):
            # a double is rounded to float4 once in binary, twice through nine digits of text
            values = [_float4(rng.uniform(-1, 1) * 10 ** rng.randint(-8, 3)) for _ in range(dims)]
            row = db.execute(
                "SELECT %(b)s::vector = %(t)s::vector, vector_dims(%(b)s::vector)",
                {"b": QueryVector(values), "t": vector_text(values)},
            ).fetchone()
            assert row == (True, dims)


def test_nothing_is_registered_beyond_the_connection(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        sendable(conn)
        assert conn.execute("SELECT %s::vector::text", (QueryVector([1.5, -2]),)).fetchone() == (
            "[1.5,-2]",
        )
    with pytest.raises(psycopg.ProgrammingError):
        psycopg.adapters.get_dumper(QueryVector, PyFormat.BINARY)
    with (
        psycopg.connect(database_url, autocommit=True) as other,
        pytest.raises(psycopg.ProgrammingError, match="cannot adapt"),
    ):
        other.execute("SELECT %s::vector", (QueryVector([1.0]),))


def test_a_ranking_finds_the_same_with_either_form(db: psycopg.Connection[Any]) -> None:
    scope = Scope("vectors", "agent")
    load_facts(db, scope, [{"content": f"fact {i}", "importance": 0.5} for i in range(30)])
    rng = random.Random(5)
    db.execute(
        "INSERT INTO agent_memory.fact_embeddings (fact_id, scope_key, model, embedding)"
        " SELECT id, scope_key, 'm', %s::vector FROM agent_memory.memory_items",
        (vector_text([1.0, 0.0, 0.0]),),
    )
    for (fact_id,) in db.execute("SELECT id FROM agent_memory.memory_items").fetchall():
        db.execute(
            "UPDATE agent_memory.fact_embeddings SET embedding = %s::vector WHERE fact_id = %s",
            (vector_text([rng.uniform(-1, 1) for _ in range(3)]), fact_id),
        )
    question = [0.3, -0.2, 0.9]
    params = ranked_params(scope, None, on=today(), min_importance=0.0, limit=10, candidates=20)
    params["model"] = "m"
    binary = recall.ranked_sync(db, params, question)  # through QueryVector
    as_text = db.execute(recall.RANKED_HYBRID, {**params, "vector": vector_text(question)})
    assert [r[0] for r in binary] == [r[0] for r in as_text.fetchall()]
    assert len(binary) == 10
