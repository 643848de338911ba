"""Fact embeddings (pgvector): one row per fact, tagged with the model that made it.

The table is created on first use, not by a migration, because it needs the ``vector``
extension: a server without pgvector (or a role that may not create it) keeps working with
full-text relevance. Vectors of any length are stored; inject compares a scope's facts to the
question exactly (the scope's rows come through the scope index), which needs no per-model
index and finds every match.

A fact whose text the model refuses (too long, against its content policy, no usable vector) is
recorded in fact_embedding_rejections (migration 8) for that model, so embedding runs go on past
it rather than asking again forever and holding back every fact after it. The fact keeps
working without an embedding (unrelated by meaning; full-text relevance still finds it); a
change of model tries it again, and so does ``agent-memory embed --retry-rejected``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

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
-- the messages of past conversations (sql/0009); a message the model refused has a NULL
-- embedding, so it is not asked for again (full text still finds it)
CREATE TABLE IF NOT EXISTS agent_memory.snippet_embeddings (
    snippet_id bigint PRIMARY KEY REFERENCES agent_memory.snippets (id) ON DELETE CASCADE,
    model      text NOT NULL,
    embedding  vector
);
-- each vector carries its scope, so a scope's nearest are read from its own rows (and, for a
-- large scope, from an index of its own: see ensure_ann_index)
ALTER TABLE agent_memory.fact_embeddings ADD COLUMN IF NOT EXISTS scope_key text COLLATE "C";
ALTER TABLE agent_memory.snippet_embeddings ADD COLUMN IF NOT EXISTS scope_key text COLLATE "C";
UPDATE agent_memory.fact_embeddings e SET scope_key = m.scope_key
FROM agent_memory.memory_items m WHERE m.id = e.fact_id AND e.scope_key IS NULL;
UPDATE agent_memory.snippet_embeddings e SET scope_key = m.scope_key
FROM agent_memory.snippets m WHERE m.id = e.snippet_id AND e.scope_key IS NULL;
CREATE INDEX IF NOT EXISTS fact_embeddings_scope_idx
    ON agent_memory.fact_embeddings (scope_key, model);
CREATE INDEX IF NOT EXISTS snippet_embeddings_scope_idx
    ON agent_memory.snippet_embeddings (scope_key, model);
-- the approximate nearest-neighbour (HNSW) indexes of large scopes, one per scope and model
CREATE TABLE IF NOT EXISTS agent_memory.ann_indexes (
    kind       text NOT NULL CHECK (kind IN ('facts', 'snippets')),
    scope_key  text COLLATE "C" NOT NULL,
    model      text NOT NULL,
    dims       integer NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, scope_key, model)
);
-- a keyed hash of the scope key (sql/0019), which a large scope's own HNSW index names
ALTER TABLE agent_memory.fact_embeddings ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
ALTER TABLE agent_memory.snippet_embeddings ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
ALTER TABLE agent_memory.ann_indexes ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
-- tenant mode (sql/0016_tenants.sql): a tenant reads its own scope's vectors only
DO $$
BEGIN
    IF to_regprocedure('agent_memory.protect_vectors()') IS NOT NULL THEN
        PERFORM agent_memory.protect_vectors();
    END IF;
END
$$;
"""

# the last table CREATE makes: when it is there, so is the rest
EXISTS = "SELECT to_regclass('agent_memory.ann_indexes') IS NOT NULL"

# the scopes a statement is about (the three parts of each, as arrays), with each one's place
# in the list, from 1 (a scope named twice is read once)
SCOPES = """(SELECT agent_memory.scope_key(u, a, w) AS k, min(i) AS i
     FROM unnest(%(users)s::text[], %(agents)s::text[], %(workflows)s::text[])
          WITH ORDINALITY AS s(u, a, w, i)
     GROUP BY 1)"""

# current facts with no embedding from this model (new facts, or all after a change of model)
# that it has not refused, in id order; {scopes}: of the listed scopes only (their place in the
# list comes back), or of all
_MISSING = """
SELECT m.id, m.content, {place}
FROM agent_memory.memory_items m {scopes}
LEFT JOIN agent_memory.fact_embeddings e ON e.fact_id = m.id AND e.model = %(model)s
WHERE e.fact_id IS NULL AND m.superseded_at IS NULL AND m.id > %(after)s
  AND NOT EXISTS (SELECT 1 FROM agent_memory.fact_embedding_rejections r
                  WHERE r.fact_id = m.id AND r.model = %(model)s)
ORDER BY m.id
LIMIT %(limit)s
"""

# messages with no embedding from this model, in id order, as _MISSING
_MISSING_SNIPPETS = """
SELECT m.id, m.content, {place}
FROM agent_memory.snippets m {scopes}
LEFT JOIN agent_memory.snippet_embeddings e ON e.snippet_id = m.id AND e.model = %(model)s
WHERE e.snippet_id IS NULL AND m.id > %(after)s
ORDER BY m.id
LIMIT %(limit)s
"""

_OFSCOPES = {"place": "k.i", "scopes": f"JOIN {SCOPES} AS k ON k.k = m.scope_key"}
_OF_ALL = {"place": "NULL::bigint", "scopes": ""}
MISSING = {True: _MISSING.format(**_OF_ALL), False: _MISSING.format(**_OFSCOPES)}
MISSING_SNIPPETS = {
    True: _MISSING_SNIPPETS.format(**_OF_ALL),
    False: _MISSING_SNIPPETS.format(**_OFSCOPES),
}

# the vectors come packed in one float4[] (see Packed): row t's is the slice at t.at of
# length t.n; a length of 0 marks a message the model refused (a NULL vector)
STORE_SNIPPETS = """
INSERT INTO agent_memory.snippet_embeddings (snippet_id, scope_key, scope_tag, model, embedding)
SELECT f, m.scope_key, agent_memory.scope_tag(m.scope_key), %(model)s,
       CASE WHEN t.n > 0 THEN (%(values)s::real[])[t.at:t.at + t.n - 1]::vector END
FROM unnest(%(ids)s::bigint[], %(at)s::int[], %(n)s::int[]) AS t(f, at, n)
JOIN agent_memory.snippets m ON m.id = f
ON CONFLICT (snippet_id) DO UPDATE SET model = EXCLUDED.model, embedding = EXCLUDED.embedding
"""

STORE = """
INSERT INTO agent_memory.fact_embeddings (fact_id, scope_key, scope_tag, model, embedding)
SELECT f, m.scope_key, agent_memory.scope_tag(m.scope_key), %(model)s,
       (%(values)s::real[])[t.at:t.at + t.n - 1]::vector
FROM unnest(%(ids)s::bigint[], %(at)s::int[], %(n)s::int[]) AS t(f, at, n)
JOIN agent_memory.memory_items m ON m.id = f
ON CONFLICT (fact_id) DO UPDATE
SET model = EXCLUDED.model, embedding = EXCLUDED.embedding, created_at = now()
"""

# one refusal per fact: a fact is refused by the model it was last tried with
REJECT = """
INSERT INTO agent_memory.fact_embedding_rejections (fact_id, model, reason)
SELECT f, %(model)s, r
FROM unnest(%(ids)s::bigint[], %(reasons)s::text[]) AS t(f, r)
WHERE EXISTS (SELECT 1 FROM agent_memory.memory_items m WHERE m.id = f)
ON CONFLICT (fact_id) DO UPDATE
SET model = EXCLUDED.model, reason = EXCLUDED.reason, rejected_at = now()
"""

# the refusals of facts purged since (no foreign key cascades them: see migration 8)
PRUNE_REJECTIONS = """
DELETE FROM agent_memory.fact_embedding_rejections r
WHERE NOT EXISTS (SELECT 1 FROM agent_memory.memory_items m WHERE m.id = r.fact_id)
"""

FORGET_REJECTIONS = "DELETE FROM agent_memory.fact_embedding_rejections WHERE model = %(model)s"

COUNTS = """
SELECT count(*) FILTER (WHERE e.model = %(model)s),
       count(*) FILTER (WHERE (e.fact_id IS NULL OR e.model <> %(model)s)
                        AND r.fact_id IS NULL),
       count(r.fact_id) FILTER (WHERE e.fact_id IS NULL OR e.model <> %(model)s)
FROM agent_memory.memory_items m
LEFT JOIN agent_memory.fact_embeddings e ON e.fact_id = m.id
LEFT JOIN agent_memory.fact_embedding_rejections r
       ON r.fact_id = m.id AND r.model = %(model)s
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


def vector_text(vector: Sequence[float]) -> str:
    """pgvector's text form, so no adapter has to be registered on pooled connections."""
    # an inject sends its question's vector twice (the fact ranking and the snippet search),
    # and formatting costs far more than a look-up
    return _vector_text(tuple(vector))


@functools.lru_cache(maxsize=16)
def _vector_text(vector: tuple[float, ...]) -> str:
    # nine significant digits give back every float4 (what pgvector stores) exactly
    return "[" + ",".join(map("{:.9g}".format, vector)) + "]"


def scopes_params(scopes: Sequence[Scope] | None) -> dict[str, Any]:
    """The parameters of :data:`SCOPES`: the parts of each scope, as three arrays."""
    listed = scopes or ()
    return {
        "users": [s.user_id for s in listed],
        "agents": [s.agent_id for s in listed],
        "workflows": [s.workflow_id for s in listed],
    }


class Packed:
    """Vectors packed as one float4[] in PostgreSQL's binary form, with each one's place in
    it, sent as one binary parameter: formatting a vector as text costs about a hundred times
    what packing it does. ``None`` stands for a missing vector (length 0)."""

    def __init__(self, vectors: Sequence[Sequence[float] | None]) -> None:
        lengths = [0 if v is None else len(v) for v in vectors]
        self.n = lengths
        self.at = list(itertools.accumulate([1, *lengths[:-1]])) if lengths else []
        flat = np.fromiter(
            itertools.chain.from_iterable(v for v in vectors if v is not None),
            dtype=">f4",
            count=sum(lengths),
        )
        # each element as (its length in bytes, 4; its value), after a one-dimension header
        cells = np.empty((flat.size, 2), dtype=">i4")
        cells[:, 0] = 4
        cells[:, 1] = flat.view(">i4")
        header = (
            struct.pack(">iii", 1, 0, _FLOAT4) + struct.pack(">ii", flat.size, 1)
            if flat.size
            else struct.pack(">iii", 0, 0, _FLOAT4)
        )
        self.payload = header + cells.tobytes()

    def params(self) -> dict[str, Any]:
        return {"values": self, "at": self.at, "n": self.n}


_FLOAT4 = psycopg.postgres.types["float4"].oid


class _PackedDumper(Dumper):
    format = Format.BINARY
    oid = psycopg.postgres.types["float4"].array_oid

    def dump(self, obj: Packed) -> bytes:
        return obj.payload


def _cursor(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[Any]:
    """A cursor that sends :class:`Packed` vectors (the dumper is the cursor's own: nothing is
    registered on the connection or globally)."""
    cur = conn.cursor()
    cur.adapters.register_dumper(Packed, _PackedDumper)
    return cur


async def missing(
    conn: psycopg.AsyncConnection[Any],
    model: str,
    scopes: Sequence[Scope] | None,
    limit: int,
    after: int = 0,
) -> list[tuple[int, str, int | None]]:
    """Up to ``limit`` current facts (of ``scopes``, or of all) with no embedding from
    ``model``, in id order from after ``after`` (so a long run never rescans what it has
    done): (id, text, the place of its scope in ``scopes``, from 0; None for all)."""
    return await _missing(conn, MISSING, model, scopes, limit, after)


async def missing_snippets(
    conn: psycopg.AsyncConnection[Any],
    model: str,
    scopes: Sequence[Scope] | None,
    limit: int,
    after: int = 0,
) -> list[tuple[int, str, int | None]]:
    """Up to ``limit`` messages (of ``scopes``, or of all) with no embedding from ``model``,
    as :func:`missing` gives facts."""
    return await _missing(conn, MISSING_SNIPPETS, model, scopes, limit, after)


async def _missing(
    conn: psycopg.AsyncConnection[Any],
    statements: dict[bool, str],
    model: str,
    scopes: Sequence[Scope] | None,
    limit: int,
    after: int,
) -> list[tuple[int, str, int | None]]:
    params = {**scopes_params(scopes), "model": model, "limit": limit, "after": after}
    cur = await conn.execute(statements[scopes is None], params)
    return [
        (int(r[0]), str(r[1]), None if r[2] is None else int(r[2]) - 1)
        for r in await cur.fetchall()
    ]


async def store(
    conn: psycopg.AsyncConnection[Any], model: str, ids: list[int], vectors: list[list[float]]
) -> int:
    """Store (or replace) these facts' embeddings; a fact purged meanwhile is skipped."""
    cur = _cursor(conn)
    await cur.execute(STORE, {"model": model, "ids": ids, **Packed(vectors).params()})
    return cur.rowcount


async def reject(
    conn: psycopg.AsyncConnection[Any], model: str, ids: list[int], reasons: list[str]
) -> int:
    """Record that ``model`` refused these facts (a fact purged meanwhile is skipped), and
    drop the refusals of facts purged since the last time."""
    await conn.execute(PRUNE_REJECTIONS)
    cur = await conn.execute(REJECT, {"model": model, "ids": ids, "reasons": reasons})
    return cur.rowcount


async def forget_rejections(conn: psycopg.AsyncConnection[Any], model: str) -> int:
    """Forget what ``model`` refused, so the next run asks it again; how many."""
    cur = await conn.execute(FORGET_REJECTIONS, {"model": model})
    return cur.rowcount


async def store_snippets(
    conn: psycopg.AsyncConnection[Any],
    model: str,
    ids: list[int],
    vectors: list[list[float] | None],
) -> int:
    """Store these messages' embeddings (None: the model refused the message)."""
    cur = _cursor(conn)
    await cur.execute(STORE_SNIPPETS, {"model": model, "ids": ids, **Packed(vectors).params()})
    return cur.rowcount


async def counts(conn: psycopg.AsyncConnection[Any], model: str) -> tuple[int, int, int]:
    """(current facts embedded by ``model``, still to embed, refused by ``model``)."""
    cur = await conn.execute(COUNTS, {"model": model})
    row = await cur.fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)
