"""Fact embeddings (pgvector): one row per fact, tagged with the model that made it.

The table is created on first use, not by a migration, because it needs the ``vector``
extension: a server without pgvector (or a role that may not create it) keeps working with
full-text relevance. Vectors of any length are stored; inject compares a scope's facts to the
question exactly (the scope's rows come through the scope index), which needs no per-model
index and finds every match.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.models import Scope

log = logging.getLogger(__name__)

CREATE = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS agent_memory.fact_embeddings (
    fact_id    bigint PRIMARY KEY
               REFERENCES agent_memory.memory_items (id) ON DELETE CASCADE,
    model      text NOT NULL,
    embedding  vector NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS fact_embeddings_model_idx ON agent_memory.fact_embeddings (model);
"""

EXISTS = "SELECT to_regclass('agent_memory.fact_embeddings') IS NOT NULL"

# current facts with no embedding from this model (new facts, or all after a change of model)
MISSING = f"""
SELECT m.id, m.content
FROM agent_memory.memory_items m
LEFT JOIN agent_memory.fact_embeddings e ON e.fact_id = m.id AND e.model = %(model)s
WHERE e.fact_id IS NULL AND m.superseded_at IS NULL AND m.id > %(after)s
  AND (%(all_scopes)s OR {SCOPE_MATCH})
ORDER BY m.id
LIMIT %(limit)s
"""

STORE = """
INSERT INTO agent_memory.fact_embeddings (fact_id, model, embedding)
SELECT f, %(model)s, v::vector
FROM unnest(%(ids)s::bigint[], %(vectors)s::text[]) AS t(f, v)
WHERE EXISTS (SELECT 1 FROM agent_memory.memory_items m WHERE m.id = f)
ON CONFLICT (fact_id) DO UPDATE
SET model = EXCLUDED.model, embedding = EXCLUDED.embedding, created_at = now()
"""

COUNTS = """
SELECT count(*) FILTER (WHERE e.model = %(model)s),
       count(*) FILTER (WHERE e.fact_id IS NULL OR e.model <> %(model)s)
FROM agent_memory.memory_items m
LEFT JOIN agent_memory.fact_embeddings e ON e.fact_id = m.id
WHERE m.superseded_at IS NULL
"""


# what says this server will not hold embeddings, however often it is asked
_PERMANENT = (
    psycopg.errors.InsufficientPrivilege,  # this role may not create the extension
    psycopg.errors.UndefinedFile,  # the server has no pgvector ("could not open ... control")
    psycopg.errors.FeatureNotSupported,
)


def ensure(conn: psycopg.Connection[Any]) -> str | None:
    """Create the extension and table if missing; None when ready, else why not (the server
    has no pgvector, or this role may not create it). Other errors (a lost connection, a lock
    timeout) are raised: they say nothing about the server, so the caller may ask again."""
    if conn.execute(EXISTS).fetchone() == (True,):
        return None
    try:
        with conn.transaction():
            conn.execute(CREATE)
    except psycopg.errors.UniqueViolation:
        # two processes created it at once; the other one won
        if conn.execute(EXISTS).fetchone() == (True,):
            return None
        raise
    except _PERMANENT as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return None


def vector_text(vector: list[float]) -> str:
    """pgvector's text form, so no adapter has to be registered on pooled connections."""
    return "[" + ",".join(map(repr, vector)) + "]"


def missing_params(model: str, scope: Scope | None, limit: int, after: int) -> dict[str, Any]:
    return {
        **(scope or Scope()).as_dict(),
        "model": model,
        "all_scopes": scope is None,
        "limit": limit,
        "after": after,
    }


def store_params(model: str, ids: list[int], vectors: list[list[float]]) -> dict[str, Any]:
    return {"model": model, "ids": ids, "vectors": [vector_text(v) for v in vectors]}


async def missing(
    conn: psycopg.AsyncConnection[Any],
    model: str,
    scope: Scope | None,
    limit: int,
    after: int = 0,
) -> list[tuple[int, str]]:
    """Up to ``limit`` current facts (of ``scope``, or all) with no embedding from ``model``,
    in id order from after ``after`` (so a long run never rescans what it has done)."""
    cur = await conn.execute(MISSING, missing_params(model, scope, limit, after))
    return [(int(r[0]), str(r[1])) for r in await cur.fetchall()]


async def store(
    conn: psycopg.AsyncConnection[Any], model: str, ids: list[int], vectors: list[list[float]]
) -> int:
    """Store (or replace) these facts' embeddings; a fact purged meanwhile is skipped."""
    cur = await conn.execute(STORE, store_params(model, ids, vectors))
    return cur.rowcount


async def counts(conn: psycopg.AsyncConnection[Any], model: str) -> tuple[int, int]:
    """(current facts embedded by ``model``, current facts still to embed)."""
    cur = await conn.execute(COUNTS, {"model": model})
    row = await cur.fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)
