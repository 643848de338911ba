"""Fact embeddings (pgvector): one row per fact, tagged with the model that made it.

The tables are made by a migration (sql/0029_vector_tables.sql) that skips them when the server
has no pgvector or the migrating role may not create the extension: such a database keeps
working with full-text relevance, and :func:`ensure` makes them once it can. Vectors of any
length are stored; inject compares a scope's facts to the question exactly (the scope's rows
come through the scope index), which needs no per-model index and finds every match.

A fact whose text the model refuses (too long, against its content policy, no usable vector) is
recorded in fact_embedding_rejections (migration 8) for that model, so embedding runs go on past
it rather than asking again forever and holding back every fact after it. The fact keeps
working without an embedding (unrelated by meaning; full-text relevance still finds it); a
change of model tries it again, and so does ``agent-memory embed --retry-rejected``.
"""

from __future__ import annotations

import itertools
import logging
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

from agent_memory.db import migrations
from agent_memory.models import Scope

log = logging.getLogger(__name__)

# the last table sql/0029 makes: when it is there, so is the rest
EXISTS = "SELECT to_regclass('agent_memory.ann_indexes') IS NOT NULL"

# why the vector migration skipped the tables in this transaction ("SQLSTATE message"; empty
# when it did not skip at the extension)
SKIPPED = "SELECT current_setting('agent_memory.vectors_skipped', true)"

# why not, from the catalog, when the migration recorded no refusal (NULL: neither of these)
WHY_NOT = """
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')
        THEN 'the server has no pgvector (no vector in pg_available_extensions)'
    WHEN to_regtype('vector') IS NULL
        THEN 'pgvector is installed in schema ' || (
            SELECT n.nspname FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace
            WHERE x.extname = 'vector') || ', which is not on this role''s search_path'
END
"""

# the scopes a statement is about (the three parts of each, as arrays), with each one's place
# in the list, from 1 (a scope named twice is read once)
SCOPES = """(SELECT agent_memory.scope_key_inline(u, a, w) AS k, min(i) AS i
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


def ensure(conn: psycopg.Connection[Any]) -> str | None:
    """None when the vector tables are ready, else why not (the server has no pgvector, or this
    role may not create it), in one line. Other errors (a lost connection, a lock timeout) are
    raised: they say nothing about the server, so the caller may ask again.

    The tables are made by the vector migrations (sql/0029_vector_tables.sql and any later one
    marked so), which skip them when the extension cannot be had. When they are missing, this
    runs those migrations again (pgvector may have been installed since, or this role may
    create it where the migrating one could not), then says why not from what the migration
    recorded or from the catalog: the DDL has one home, the migration files."""
    if conn.execute(EXISTS).fetchone() == (True,):
        return None
    try:
        with conn.transaction():
            ran = migrations.apply_vector_migrations(conn)
            if conn.execute(EXISTS).fetchone() == (True,):
                return None
            # read in the transaction that set it (the setting is local to it)
            row = conn.execute(SKIPPED).fetchone()
            skipped = str(row[0]) if row and row[0] else ""
    except psycopg.errors.InsufficientPrivilege as exc:
        # pgvector is there, but this role may not make the tables (no CREATE on the schema);
        # a refusal of the extension itself is caught by the migration and recorded
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    if skipped:
        # as the error would have read: "InsufficientPrivilege: permission denied to ..."
        state, _, message = skipped.partition(" ")
        return f"{psycopg.errors.lookup(state).__name__}: {message.splitlines()[0]}"
    row = conn.execute(WHY_NOT).fetchone()
    if row and row[0]:
        return str(row[0])
    if not ran:
        return (
            f"the schema is at version {migrations.current_version(conn)}, before the vector"
            " tables' migration: run agent-memory migrate"
        )
    return "the vector tables are missing after their migrations ran: " + ", ".join(ran)


def vector_text(vector: Sequence[float]) -> str:
    """pgvector's text form (a ranking sends its question's vector in binary instead:
    :mod:`agent_memory.db.query_vector`)."""
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
