"""Per-scope approximate nearest-neighbour (HNSW) indexes of the vectors' tables: which a
scope has, which are due, and building one (see the comment below)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import psycopg

from agent_memory.db import pgvector
from agent_memory.db.dual import Run, Steps, dual
from agent_memory.db.embeddings import SCOPES, scopes_params
from agent_memory.errors import ConfigurationError
from agent_memory.models import Scope

# Comparing the question with every vector of a scope costs time in proportion to the scope:
# fine for the hundreds of facts most scopes hold, not for 10,000 facts or 100,000 messages.
# pgvector's HNSW index answers "nearest first" approximately in about constant time, but one
# index over every scope would return other scopes' rows first. So a large scope gets an index
# of its own, partial on its scope key and model: built by the flows when the scope passes
# AGENT_MEMORY_EMBEDDING_ANN_MIN_ROWS, recorded in ann_indexes, and read by inject for that
# scope only. Within a scope, a search's own filter (current facts, a date range) drops some of
# the nearest the index returns: from pgvector 0.8 its iterative scan goes on until enough pass
# (nearest.vector_hits); an older pgvector returns what passes of the queue it read.

_TABLES = {
    "facts": "fact_embeddings",
    "snippets": "snippet_embeddings",
}


class AnnIndex(NamedTuple):
    """A scope's own HNSW index (its rows in ``ann_indexes``): the vectors' dimensions, and the
    scope's tag (a keyed hash of its key, sql/0019) and model its partial predicate names;
    ``iterative``: the server's pgvector (0.8 or later) scans it iteratively, past its queue,
    until enough rows pass the search's filter; ``vector_type``: what the index holds the
    vectors as (sql/0032), ``halfvec`` at half precision."""

    dims: int
    scope_tag: str
    model: str
    iterative: bool = False
    vector_type: pgvector.VectorType = "vector"


ANN_DIMS = """
SELECT dims, scope_tag,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector'), vector_type
FROM agent_memory.ann_indexes
WHERE kind = %(kind)s AND model = %(model)s AND scope_tag IS NOT NULL
  AND scope_key = agent_memory.scope_key_inline(%(user_id)s, %(agent_id)s, %(workflow_id)s)
"""


def ann_index_steps(kind: str, scope: Scope, model: str) -> Steps[AnnIndex | None]:
    """The scope's own HNSW index of ``kind`` for ``model``, if it has one."""
    row = yield Run(ANN_DIMS, {**scope.as_dict(), "kind": kind, "model": model}, "one")
    if not row:
        return None
    version = pgvector.parse(str(row[2] or ""))
    iterative = pgvector.has(version, "iterative_scan")
    if not iterative:
        pgvector.tell_once(
            version,
            "iterative_scan",
            "a search filtered by date or by current facts keeps what passes of the nearest"
            " its HNSW index returns, and may find fewer than exist",
        )
    vector_type: pgvector.VectorType = "halfvec" if row[3] == "halfvec" else "vector"
    return AnnIndex(int(row[0]), str(row[1]), model, iterative, vector_type)


ann_index, ann_index_sync = dual(ann_index_steps)


# per kind, the size of most of the scope's vectors from the model and how many there are (up
# to min_rows: enough to know), unless the scope has its own index of that kind already
ANN_DUE = f"""
WITH s AS {SCOPES}
SELECT s.i, kind, s.k, v.dims, v.n
FROM s CROSS JOIN (VALUES ('facts'), ('snippets')) AS kinds(kind)
CROSS JOIN LATERAL (
    SELECT vector_dims(embedding) AS dims, count(*) AS n
    FROM (
        SELECT embedding FROM agent_memory.fact_embeddings
        WHERE kind = 'facts' AND scope_key = s.k AND model = %(model)s AND embedding IS NOT NULL
        LIMIT %(min_rows)s
    ) AS f GROUP BY 1
    UNION ALL
    SELECT vector_dims(embedding), count(*)
    FROM (
        SELECT embedding FROM agent_memory.snippet_embeddings
        WHERE kind = 'snippets' AND scope_key = s.k AND model = %(model)s
          AND embedding IS NOT NULL
        LIMIT %(min_rows)s
    ) AS m GROUP BY 1
    ORDER BY 2 DESC LIMIT 1
) AS v
WHERE NOT EXISTS (SELECT 1 FROM agent_memory.ann_indexes a
                  WHERE a.kind = kinds.kind AND a.scope_key = s.k AND a.model = %(model)s)
"""


class AnnDue(NamedTuple):
    """An HNSW index a scope should have and has not: the scope's place in the list asked
    about (from 0), the index's kind (``facts`` or ``snippets``), the scope key and the size
    of the vectors."""

    place: int
    kind: str
    scope_key: str
    dims: int


async def ann_indexes_due(
    conn: psycopg.AsyncConnection[Any], scopes: Sequence[Scope], model: str, min_rows: int
) -> list[AnnDue]:
    """The HNSW indexes ``scopes`` should have and have not, each scope's facts or messages
    once they hold ``min_rows`` vectors of one size from ``model``. One statement that only
    reads, for any number of scopes: any connection will do."""
    params = {**scopes_params(scopes), "model": model, "min_rows": min_rows}
    cur = await conn.execute(ANN_DUE, params)
    return [
        AnnDue(int(place) - 1, str(kind), str(key), int(dims))
        for place, kind, key, dims, count in await cur.fetchall()
        if count >= min_rows
    ]


async def ensure_ann_index(
    conn: psycopg.AsyncConnection[Any],
    kind: str,
    scope: Scope,
    model: str,
    min_rows: int,
    vector_type: str = "auto",
) -> str | None:
    """Build the scope's own HNSW index of ``kind`` (``facts`` or ``snippets``) for ``model``
    once it holds ``min_rows`` vectors of one size; the index's name when one was built now.

    ``conn`` must be in autocommit mode: the index is built CONCURRENTLY, so embedding and
    inject go on meanwhile. Safe to rerun and to run twice at once (the second finds the first's
    index, or fails to build a duplicate and leaves the first's). ``vector_type``: as
    :func:`build_ann_index` takes it."""
    for due in await ann_indexes_due(conn, [scope], model, min_rows):
        if due.kind == kind:
            return await build_ann_index(conn, kind, due.scope_key, due.dims, model, vector_type)
    return None


async def index_vector_type(
    conn: psycopg.AsyncConnection[Any], wanted: str, dims: int
) -> pgvector.VectorType:
    """What a new index of ``dims``-dimension vectors holds them as, for the setting
    ``wanted`` (AGENT_MEMORY_EMBEDDING_ANN_VECTOR_TYPE): ``auto`` is ``halfvec`` where the
    server's pgvector has it (0.7 or later) and the vectors fit its index, else ``vector``
    (with one line saying so, once); ``halfvec`` on a server without it is refused with that
    line."""
    if wanted not in ("auto", "vector", "halfvec"):
        raise ConfigurationError(
            f"index vector type {wanted!r} is not one of 'auto', 'vector', 'halfvec'"
        )
    if wanted == "vector":
        return "vector"
    row = await (
        await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    ).fetchone()
    version = pgvector.parse(str(row[0] if row else ""))
    if not pgvector.has(version, "halfvec"):
        if wanted == "halfvec":
            why = pgvector.lacking(version, "halfvec")
            raise ConfigurationError(f"AGENT_MEMORY_EMBEDDING_ANN_VECTOR_TYPE 'halfvec': {why}")
        pgvector.tell_once(version, "halfvec", "a scope's HNSW index holds its vectors in full")
        return "vector"
    most = pgvector.INDEX_DIMS["halfvec"]
    if dims > most:
        if wanted == "halfvec":
            raise ConfigurationError(
                f"AGENT_MEMORY_EMBEDDING_ANN_VECTOR_TYPE 'halfvec': an HNSW index of halfvec"
                f" takes up to {most} dimensions; these vectors have {dims}"
            )
        return "vector"
    return "halfvec"


async def build_ann_index(
    conn: psycopg.AsyncConnection[Any],
    kind: str,
    scope_key: str,
    dims: int,
    model: str,
    vector_type: str = "auto",
) -> str:
    """Build (CONCURRENTLY: ``conn`` in autocommit mode) the HNSW index of ``kind`` over the
    scope's vectors of ``dims`` from ``model``, and record it; its name. The index's name and
    predicate name the scope by its tag, a keyed hash of its key (pg_indexes is readable by
    every role, tenants included). ``vector_type``: what the index holds the vectors as
    (:func:`index_vector_type`)."""
    from psycopg import sql

    table = _TABLES[kind]
    import hashlib

    # rows stored before their tables had the tag get it now (new rows are stored with it)
    await conn.execute(
        sql.SQL(
            "UPDATE agent_memory.{} SET scope_tag = agent_memory.scope_tag(scope_key)"
            " WHERE scope_key = %s AND scope_tag IS NULL"
        ).format(sql.Identifier(table)),
        (scope_key,),
    )
    row = await (await conn.execute("SELECT agent_memory.scope_tag(%s)", (scope_key,))).fetchone()
    assert row is not None
    tag = str(row[0])
    held = await index_vector_type(conn, vector_type, dims)
    digest = hashlib.sha256(f"{kind}\0{tag}\0{model}".encode()).hexdigest()[:16]
    name = f"{table}_ann_{digest}"
    await conn.execute(
        sql.SQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON agent_memory.{} USING hnsw"
            " ((embedding::{}({})) {})"
            " WHERE scope_tag = {} AND model = {} AND vector_dims(embedding) = {}"
            " AND embedding IS NOT NULL"
        ).format(
            sql.Identifier(name),
            sql.Identifier(table),
            sql.SQL(held),
            sql.Literal(dims),
            sql.SQL(f"{held}_cosine_ops"),
            sql.Literal(tag),
            sql.Literal(model),
            sql.Literal(dims),
        )
    )
    await conn.execute(
        """INSERT INTO agent_memory.ann_indexes
               (kind, scope_key, scope_tag, model, dims, name, vector_type)
           VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
        (kind, scope_key, tag, model, dims, name, held),
    )
    return name
