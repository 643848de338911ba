"""The Store's vector index (``agent_memory.store_vectors``, sql/0021_store_vectors.sql): the
vectors of an item's embedded fields, and the search that ranks items by them.

A vector is kept as ``real[]`` and cast to pgvector's ``vector(dims)`` (or ``halfvec(dims)``)
where it is compared, so one table holds vectors of any length and only the search needs the
extension. :func:`ensure_index` builds, per length and distance, the expression index such a
cast can use. The distances and scores are LangGraph's PostgresStore's: cosine similarity
(``1 - <=>``), inner product (``-<#>``), or the negative euclidean distance (``-<->``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from psycopg import sql

from agent_memory.db import pgvector
from agent_memory.db.dual import Run, Steps
from agent_memory.db.store import Row, namespace_params
from agent_memory.db.store_ttl import ident, live

Distance = Literal["cosine", "inner_product", "l2"]
VectorType = pgvector.VectorType

# the operator (smaller is nearer) and the score it gives, of each distance
_OPERATORS: dict[str, tuple[str, str]] = {
    "cosine": ("<=>", "1 - {d}"),
    "inner_product": ("<#>", "-({d})"),
    "l2": ("<->", "-({d})"),
}
_OPS_CLASS = {"cosine": "cosine_ops", "inner_product": "ip_ops", "l2": "l2_ops"}

_REPLACE = """
INSERT INTO agent_memory.store_vectors AS v (item_id, field_path, embedding, scope_key)
SELECT s.id, f.path, (%(flat)s::real[])[(f.at - 1) * %(dims)s::int + 1 : f.at * %(dims)s::int],
       s.scope_key
FROM agent_memory.store_items s, unnest(%(paths)s::text[]) WITH ORDINALITY AS f(path, at)
WHERE s.namespace = %(ns)s::text[] AND s.key = %(key)s
ON CONFLICT (item_id, field_path) DO UPDATE SET
    embedding = EXCLUDED.embedding, scope_key = EXCLUDED.scope_key, updated_at = now()
"""


def cast(vector_type: VectorType, dims: int) -> sql.Composable:
    """The type a search compares as: ``vector(dims)`` or ``halfvec(dims)``."""
    return sql.SQL("{}({})").format(sql.SQL(vector_type), sql.Literal(int(dims)))


def replace_steps(
    ns: tuple[str, ...], key: str, vectors: Sequence[tuple[str, Sequence[float]]]
) -> Steps[None]:
    """Make ``vectors`` (``(field_path, vector)``, all of one length) the vectors of item
    ``(ns, key)``, written already in this transaction: its other fields' vectors go."""
    params: dict[str, Any] = {"ns": list(ns), "key": key}
    if vectors:
        dims = len(vectors[0][1])
        params.update(
            paths=[path for path, _ in vectors],
            flat=[float(x) for _, vector in vectors for x in vector],
            dims=dims,
        )
        yield Run(_REPLACE, params, "none")
    yield Run(
        """SELECT agent_memory.store_vectors_keep(s.id, %(kept)s::text[])
FROM agent_memory.store_items s WHERE s.namespace = %(ns)s::text[] AND s.key = %(key)s""",
        {**params, "kept": [path for path, _ in vectors]},
        "none",
    )


def search_steps(
    prefix: tuple[str, ...],
    query: Sequence[float],
    *,
    distance: Distance,
    vector_type: VectorType,
    condition: str,
    params: Mapping[str, Any],
    limit: int,
    offset: int,
) -> Steps[list[Row]]:
    """The visible items under ``prefix`` that pass ``condition`` (a filter on alias ``s``),
    each scored by its nearest field of ``query``'s length, best first; items with no such
    vector (put with ``index=False``) after them, scored None, as langgraph's stores do."""
    dims = len(query)
    op, score = _OPERATORS[distance]
    as_type = cast(vector_type, dims).as_string(None)
    nearest = f"min((v.embedding::{as_type}) {op} %(query)s::{as_type})"
    under = (
        "s.namespace >= %(ns)s::text[] AND s.namespace < %(ns_end)s::text[]" if prefix else "TRUE"
    )
    rows = yield Run(
        f"""SELECT s.namespace, s.key, s.value, s.created_at, s.updated_at,
       {score.format(d=nearest)} AS score, {ident("s")}
FROM agent_memory.store_items s
LEFT JOIN agent_memory.store_vectors v
       ON v.item_id = s.id AND cardinality(v.embedding) = %(dims)s
WHERE {under} AND s.visible AND {live("s")} AND {condition}
GROUP BY s.namespace, s.key
ORDER BY score DESC NULLS LAST, s.namespace, s.key
LIMIT %(limit)s OFFSET %(offset)s""",
        {
            **params,
            **namespace_params(prefix),
            "query": [float(x) for x in query],
            "dims": dims,
            "limit": limit,
            "offset": offset,
        },
    )
    return [
        (tuple(r[0]), str(r[1]), r[2], r[3], r[4], None if r[5] is None else float(r[5]), str(r[6]))
        for r in rows
    ]


def count_steps(prefix: tuple[str, ...], condition: str, params: Mapping[str, Any]) -> Steps[int]:
    """How many items :func:`search_steps` can return under ``prefix`` (scored or not)."""
    under = (
        "s.namespace >= %(ns)s::text[] AND s.namespace < %(ns_end)s::text[]" if prefix else "TRUE"
    )
    row = yield Run(
        f"""SELECT count(*) FROM agent_memory.store_items s
WHERE {under} AND s.visible AND {live("s")} AND {condition}""",
        {**params, **namespace_params(prefix)},
        "one",
    )
    return int(row[0]) if row else 0


def pgvector_steps() -> Steps[tuple[tuple[int, ...], bool] | None]:
    """The version of pgvector the server offers, and whether it is installed; None when the
    server has none."""
    row = yield Run(
        """SELECT coalesce(e.extversion, a.default_version), e.extversion IS NOT NULL
FROM pg_available_extensions a LEFT JOIN pg_extension e ON e.extname = a.name
WHERE a.name = 'vector'""",
        None,
        "one",
    )
    if row is None or row[0] is None:
        return None
    return pgvector.parse(str(row[0])), bool(row[1])


def create_extension_steps() -> Steps[None]:
    """Install pgvector in this database."""
    yield Run("CREATE EXTENSION IF NOT EXISTS vector", None, "none")


def index_steps(
    *,
    dims: int,
    distance: Distance,
    vector_type: VectorType,
    kind: str,
    options: Mapping[str, int],
) -> Steps[None]:
    """Create the approximate index of ``dims``-long vectors for ``distance`` (``kind``
    ``hnsw`` or ``ivfflat``; none for ``flat`` or a length pgvector cannot index), the one
    :func:`search_steps`' cast can use."""
    if kind == "flat" or dims > pgvector.INDEX_DIMS[vector_type]:
        return
    name = f"store_vectors_{vector_type}{dims}_{distance}_{kind}_idx"
    with_options = (
        sql.SQL(" WITH ({})").format(
            sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(int(v)))
                for k, v in sorted(options.items())
            )
        )
        if options
        else sql.SQL("")
    )
    statement = sql.SQL(
        "CREATE INDEX IF NOT EXISTS {} ON agent_memory.store_vectors USING {}"
        " ((embedding::{}) {}){} WHERE cardinality(embedding) = {}"
    ).format(
        sql.Identifier(name),
        sql.SQL(kind),
        cast(vector_type, dims),
        sql.SQL(f"{vector_type}_{_OPS_CLASS[distance]}"),
        with_options,
        sql.Literal(int(dims)),
    )
    yield Run(statement.as_string(None), None, "none")
