"""The meaning side of a ranking: the ``vector_hits`` CTE, a scope's (or each level's) rows
nearest to the question's vector, read by comparing every vector or through the scope's own
HNSW index (:mod:`agent_memory.db.ann_indexes`). The rankings that use it are in
:mod:`agent_memory.db.recall` (facts), :mod:`agent_memory.db.level_reads` (facts over levels)
and :mod:`agent_memory.db.snippets` (messages)."""

from __future__ import annotations

from psycopg import sql

from agent_memory.db.ann_indexes import AnnIndex
from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.db.levels import level_key


def vector_hits(
    table: str,
    embeddings: str,
    key: str,
    where: str,
    ann: AnnIndex | None = None,
    levels: tuple[AnnIndex | None, ...] | None = None,
    queue: str | None = None,
) -> str:
    """The CTE ``vector_hits(id, r, n)``: the rows of ``table`` (alias ``m``) that ``where``
    admits, nearest to the question's vector first, ``n`` their cosine similarity to it,
    clipped at 0. With ``vector_floor`` and at least ``candidates`` rows found, ``n`` is the
    similarity above the last of them, ``(s - s_last) / (1 - s_last)``: what a question is
    like to every row of a scope says nothing about any one (see the module). Their vectors
    are in ``embeddings`` (keyed by ``key``, with the scope's ``scope_key``): the scope's
    nearest ``2 * candidates`` of the model are read first, then those ``where`` admits are
    kept. A stored vector of other dimensions than the question's (the model's output size
    changed) counts as unrelated rather than failing.

    ``ann``: the scope's own HNSW index (:func:`agent_memory.db.ann_indexes.ensure_ann_index`);
    the nearest are read from it, approximately, instead of comparing every vector of the
    scope. The statement then names the index's scope tag and model as constants, as its
    partial predicate does, so that any plan of it can use the index, a prepared one's too.

    ``levels``: ``where`` reads several levels of memory (:mod:`agent_memory.db.levels`), one
    entry per level in their order, each that level's own index or None; each level's nearest
    are read as one scope's are, and the nearest of them all kept. The levels with an index
    share one scope's reading of it: each reads ``2 * candidates`` divided among them (an HNSW
    scan costs about in proportion to the queue it keeps, ``hnsw.ef_search``, whatever its
    limit), so three large levels cost about what one does. A level with no index is small and
    read in full; with one large level, it reads all ``2 * candidates`` as if it were alone.

    ``queue``: one scope's index is read for this many nearest (an expression of the
    statement's parameters) instead of ``2 * candidates``, the scan's queue sized to match.
    """
    passing = (table, where)
    # an iterative scan keeps only the rows ``where`` admits (see _nearest): not read again
    kept = all(index is not None and index.iterative for index in (levels or (ann,)))
    if levels is None:
        nearest = _nearest(embeddings, key, f"e.{SCOPE_MATCH}", ann, queue=queue, passing=passing)
    else:
        share = sum(level is not None for level in levels)
        each = "\n                      UNION ALL ".join(
            "("
            + _nearest(
                embeddings, key, f"e.scope_key = {level_key(n)}", level, share, None, passing
            )
            + ")"
            for n, level in enumerate(levels)
        )
        nearest = f"""SELECT id, distance FROM ({each}) AS each_level
                      ORDER BY distance LIMIT 2 * %(candidates)s"""
    found = f"""SELECT nearest.id, nearest.distance FROM ({nearest}) AS nearest
                ORDER BY nearest.distance LIMIT %(candidates)s"""
    if not kept:
        found = f"""SELECT m.id, nearest.distance
                FROM ({nearest}) AS nearest
                CROSS JOIN LATERAL {by_id(table, "nearest.id")} AS m
                WHERE {where}
                ORDER BY nearest.distance LIMIT %(candidates)s"""
    return f"""vector_hits AS (
    SELECT id, r, CASE WHEN floor > 0 THEN greatest(similarity - floor, 0) / (1 - floor)
                       ELSE greatest(similarity, 0) END AS n
    FROM (SELECT id, row_number() OVER (ORDER BY distance, id) AS r, 1 - distance AS similarity,
                 CASE WHEN %(vector_floor)s::bool AND count(*) OVER () >= %(candidates)s
                      THEN least(1 - max(distance) OVER (), 0.999999) ELSE 0 END AS floor
          FROM ({found}) AS found) AS ranked
)"""


def _nearest(
    embeddings: str,
    key: str,
    scope: str,
    ann: AnnIndex | None,
    share: int = 1,
    queue: str | None = None,
    passing: tuple[str, str] | None = None,
) -> str:
    """One scope's ``2 * candidates`` nearest vectors (``scope``: the condition on ``e``);
    through its index ``ann``, ``1 / share`` of them, or ``queue`` (see :func:`vector_hits`).
    ``passing``: the rows' table and the condition on them (alias ``m``) that the search keeps,
    applied inside an iterative scan of ``ann``."""
    limit = "2 * %(candidates)s"
    rows = ""
    exact = "e.embedding <=> %(vector)s::vector"
    if ann is None:
        distance = exact
        match = f"{scope} AND e.model = %(model)s"
        dims = "vector_dims(e.embedding) = vector_dims(%(vector)s::vector)"
    else:
        d, held = int(ann.dims), ann.vector_type
        # the index's own expression, which a plan must name to read it
        distance = f"e.embedding::{held}({d}) <=> %(vector)s::{held}({d})"
        # %% : psycopg reads the statement's other text for placeholders
        scope_tag = sql.Literal(ann.scope_tag).as_string().replace("%", "%%")
        model = sql.Literal(ann.model).as_string().replace("%", "%%")
        match = f"e.scope_tag = {scope_tag} AND e.model = {model}"
        dims = f"vector_dims(e.embedding) = {d} AND e.embedding IS NOT NULL"
        sized = queue if share == 1 else f"(2 * %(candidates)s + {share - 1}) / {share}"
        if sized is not None:
            # The scan's queue is sized for what it reads alone: ef_search is read when the
            # scan starts, which is after the one-time filter (an init plan) above it has run;
            # set for the statement's transaction only, so the session keeps its own
            # (ANN_EF_SEARCH)
            limit = sized
            match += f""" AND (SELECT set_config('hnsw.ef_search',
                                 least(1000, {limit})::text, true)) IS NOT NULL"""
        if ann.iterative and passing is not None:
            # pgvector 0.8: the scan goes on past its queue until the limit's rows pass the
            # search's own filter (an iterative index scan, strict order, up to
            # hnsw.max_scan_tuples), so a filter that drops most of the nearest (superseded
            # facts, a date range) still finds the nearest that pass it. Set, like ef_search,
            # for the statement's transaction, before the scan starts
            # (the condition inside the row's own subquery, where its names are the row's)
            table, where = passing
            rows = f"""CROSS JOIN LATERAL (SELECT 1 FROM {table} m
                                            WHERE m.id = e.{key} AND {where} OFFSET 0) AS kept"""
            match += """ AND (SELECT set_config('hnsw.iterative_scan', 'strict_order', true))
                              IS NOT NULL"""
    # a halfvec index orders at half precision: the rows it returns are scored whole
    scored = exact if ann is not None and ann.vector_type == "halfvec" else distance
    return f"""SELECT e.{key} AS id, {scored} AS distance
                      FROM {embeddings} e {rows}
                      WHERE %(vector)s::text IS NOT NULL AND {match} AND {dims}
                      ORDER BY {distance} LIMIT {limit}"""


# pgvector's own default queue of an HNSW scan (hnsw.ef_search): a search that reads an index
# for fewer rows still keeps this many, the size its graph's recall is documented at
HNSW_DEFAULT_QUEUE = 40

NO_VECTOR_HITS = """vector_hits AS (
    SELECT NULL::bigint AS id, NULL::bigint AS r, NULL::float8 AS n WHERE false
)"""


def by_id(table: str, id_: str) -> str:
    """The row of ``table`` whose id is ``id_``, as a subquery to join LATERAL: read through
    the primary key once per candidate. A plain join is planned for a candidate count the
    planner cannot know in a prepared statement's generic plan, and it hashes the whole table
    for a few dozen candidates (OFFSET 0 keeps the subquery from being merged into a join)."""
    return f"(SELECT * FROM {table} WHERE id = {id_} OFFSET 0)"
