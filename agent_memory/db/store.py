"""The LangGraph Store's rows (``agent_memory.store_items``, sql/0015_store_items.sql) and the
facts its memory namespaces show.

What one read sees is :func:`items_cte`: the store's rows under a namespace (a memory item
while its fact is current, a document always; neither once its TTL has run out,
:mod:`agent_memory.db.store_ttl`), and the current facts of the memory namespaces there that no
row shows yet (facts consolidation wrote), each under a key made from its id
(:func:`fact_key`). Writes are in :mod:`agent_memory.db.store_writes`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from agent_memory.db.dual import Run, Steps
from agent_memory.db.fragments import SCOPE_MATCH, importance_on
from agent_memory.db.fulltext import text_hits
from agent_memory.db.levels import LEVELS_MATCH, levels_params
from agent_memory.db.store_levels import level_namespaces
from agent_memory.db.store_ttl import ident, live
from agent_memory.errors import InvalidStoreRequestError
from agent_memory.models import SCOPE_FIELDS, Scope

# A fact no store row shows yet is the item of this key: a UUID (LangMem's tools take memory
# ids as UUIDs) whose last twelve hex digits are the fact's id.
_FACT_KEY_HEAD = "fac70000-0000-4000-8000-"
_FACT_KEY = re.compile(r"^fac70000-0000-4000-8000-([0-9a-f]{12})$")
FACT_KEY_SQL = f"'{_FACT_KEY_HEAD}' || lpad(to_hex(m.id), 12, '0')"


def fact_key(fact_id: int) -> str:
    """The store key of fact ``fact_id``."""
    return f"{_FACT_KEY_HEAD}{fact_id:012x}"


def fact_of_key(key: str) -> int | None:
    """The fact id a store key names (see :func:`fact_key`); None for any other key."""
    match = _FACT_KEY.match(key)
    return int(match.group(1), 16) if match else None


# ---- filters ----------------------------------------------------------------------------

_COMPARISONS = {"$eq": "=", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _json(value: Any, where: str) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidStoreRequestError(f"{where} {value!r:.80} is not JSON: {exc}") from None


def filter_sql(filter: Mapping[str, Any] | None, alias: str, params: dict[str, Any]) -> str:
    """The condition of a search ``filter`` on ``alias``'s value (its parameters are added to
    ``params``): ``{"field": value}`` matches equal values, ``{"field": {"$op": value}}``
    compares with one of ``$eq $ne $gt $gte $lt $lte``. As in LangGraph's PostgresStore a
    field is a top-level key, and an item that lacks it matches no condition on it; unlike it,
    an order comparison holds only between values of one JSON type (numbers compare as
    numbers, not as text). An unknown operator is refused, naming it."""
    if filter is None:
        return "TRUE"
    if not isinstance(filter, Mapping):
        raise InvalidStoreRequestError(
            f"search filter {filter!r:.80} is not a mapping of fields to values"
        )
    clauses: list[str] = []
    for field, wanted in filter.items():
        if not isinstance(field, str):
            raise InvalidStoreRequestError(f"search filter field {field!r} is not a string")
        conditions: list[tuple[str, Any]]
        if isinstance(wanted, Mapping) and any(str(k).startswith("$") for k in wanted):
            conditions = []
            for op, operand in wanted.items():
                if op not in _COMPARISONS:
                    raise InvalidStoreRequestError(
                        f"search filter on {field!r} uses the unknown operator {op!r};"
                        f" known: {' '.join(_COMPARISONS)}"
                    )
                conditions.append((op, operand))
        else:
            conditions = [("$eq", wanted)]
        for op, operand in conditions:
            n = len(params)
            params[f"fk{n}"] = field
            params[f"fv{n}"] = _json(operand, f"search filter value of {field!r}")
            lhs = f"({alias}.value -> %(fk{n})s)"
            rhs = f"%(fv{n})s::jsonb"
            clause = f"{lhs} {_COMPARISONS[op]} {rhs}"
            if op not in ("$eq", "$ne"):
                clause += f" AND jsonb_typeof({lhs}) = jsonb_typeof({rhs})"
            clauses.append(f"({clause})")
    return " AND ".join(clauses) or "TRUE"


# ---- reads ------------------------------------------------------------------------------


def _render(fields: list[str | None], params: dict[str, Any]) -> str:
    """The memory namespace of fact ``m`` as an SQL array (the template's literals as
    parameters ``t0``, ``t1``, ...)."""
    labels = []
    for i, name in enumerate(fields):
        if name is None:
            labels.append(f"%(t{i})s::text")
        else:
            labels.append(f"m.{name}")
    return f"ARRAY[{', '.join(labels)}]::text[]"


def _fact_scope(
    fields: list[str | None],
    fixed: Mapping[str, str | None],
    bound: Mapping[str, str],
    params: dict[str, Any],
) -> str:
    """The facts whose memory namespace the bound parts (and the fixed ones) allow."""
    if all(name in bound or name in fixed for name in SCOPE_FIELDS):
        parts = {**fixed, **bound}
        params.update({name: parts[name] for name in SCOPE_FIELDS})
        return f"m.{SCOPE_MATCH}"
    clauses = []
    for name in SCOPE_FIELDS:
        if name in bound:
            params[f"b_{name}"] = bound[name]
            clauses.append(f"m.{name} = %(b_{name})s")
        elif name in fixed:
            params[f"b_{name}"] = fixed[name]
            clauses.append(f"m.{name} IS NOT DISTINCT FROM %(b_{name})s::text")
        elif name in fields:
            clauses.append(f"m.{name} IS NOT NULL AND strpos(m.{name}, '.') = 0")
    return " AND ".join(clauses)


def namespace_params(namespace: tuple[str, ...]) -> dict[str, Any]:
    """``ns`` and ``ns_end``: the namespaces under ``ns`` (itself included) are the range
    [ns, ns_end), as arrays compare label by label: ``ns`` with its last label followed by the
    lowest character a label may hold (\\x01; labels have no NUL), so that the primary key's
    index finds them."""
    end = [*namespace[:-1], namespace[-1] + "\x01"] if namespace else []
    return {"ns": list(namespace), "ns_end": end}


def row_halves(namespace: tuple[str, ...], exact: bool) -> int:
    """How many of :func:`items_cte`'s parts are rows (they come first)."""
    return len(_under("s.namespace", namespace, exact))


def _under(column: str, namespace: tuple[str, ...], exact: bool) -> list[str]:
    """The conditions that together select ``namespace`` (``exact``) or it and every
    namespace under it: one for itself, one for those under it (each read through the
    primary key's index, itself in ``updated_at`` order through the latest items' index)."""
    if exact:
        return [f"{column} = %(ns)s::text[]"]
    if not namespace:
        return ["TRUE"]
    return [
        f"{column} = %(ns)s::text[]",
        f"{column} > %(ns)s::text[] AND {column} < %(ns_end)s::text[]",
    ]


def items_cte(
    labels: tuple[str, ...],
    fields: list[str | None],
    fixed: Mapping[str, str | None],
    bound: Mapping[str, str] | None,
    *,
    namespace: tuple[str, ...],
    exact: bool,
    params: dict[str, Any],
    rows_where: str = "TRUE",
    facts_where: str = "TRUE",
    levels: Sequence[Scope] = (),
) -> list[str]:
    """The parts of what a read sees (see the module), each a SELECT of ``(ident, namespace,
    key, value, created_at, updated_at, fact_id)``: the store's visible rows of ``namespace``
    (``exact``; else also those of every namespace under it, a part of their own) that pass
    ``rows_where`` (alias ``s``), and the facts no row shows that pass ``facts_where`` (alias
    ``m``). ``bound``: the scope parts the namespace fixes of the memory namespaces under it,
    None when none lie under it (there is no facts' part then). ``levels``: the levels of
    memory whose facts ``namespace`` shows too (:func:`levels_half`)."""
    for i, literal in enumerate(labels):
        params[f"t{i}"] = literal
    params.update(namespace_params(namespace))
    halves = [
        f"""SELECT {ident("s")} AS ident, s.namespace, s.key, s.value, s.created_at,
           s.updated_at, s.fact_id
    FROM agent_memory.store_items s
    WHERE {under} AND s.visible AND {live("s")} AND {rows_where}"""
        for under in _under("s.namespace", namespace, exact)
    ]
    if levels:
        halves.append(levels_half(levels, params, facts_where))
    if bound is None:
        return halves
    importance = importance_on("m.expires_day", "%(day)s", "m.half_life")
    facts = f"""SELECT 'f' || m.id AS ident, {_render(fields, params)} AS namespace,
           {FACT_KEY_SQL} AS key,
           jsonb_build_object('content', m.content, 'kind', m.kind,
                              'importance', round({importance}::numeric, 4)) AS value,
           m.created_at, m.updated_at, m.id AS fact_id
    FROM agent_memory.memory_items m
    WHERE m.superseded_at IS NULL AND NOT m.shown
      AND {_fact_scope(fields, fixed, bound, params)} AND {facts_where}"""
    return [*halves, facts]


# the level a fact is filed at, by its scope's parts (agent_memory.models.Scope.level)
_LEVEL = """CASE WHEN m.user_id IS NULL THEN
                 CASE WHEN m.agent_id IS NOT NULL AND m.workflow_id IS NULL THEN 'agent'
                      ELSE 'scope' END
             WHEN m.workflow_id IS NOT NULL THEN 'workflow'
             WHEN m.agent_id IS NOT NULL THEN 'user_agent' ELSE 'user' END"""


def levels_half(levels: Sequence[Scope], params: dict[str, Any], facts_where: str) -> str:
    """The current facts of ``levels`` that pass ``facts_where`` (alias ``m``), shown in the
    namespace read (``%(ns)s``) under their own keys (:func:`fact_key`), each value with its
    ``level``; but those a row of that namespace shows already, or whose key a row of it holds
    (a put of that key wrote the namespace's own item: the key is the row's)."""
    params.update(levels_params(levels))
    importance = importance_on("m.expires_day", "%(day)s", "m.half_life")
    return f"""SELECT 'f' || m.id AS ident, %(ns)s::text[] AS namespace, {FACT_KEY_SQL} AS key,
           jsonb_build_object('content', m.content, 'kind', m.kind,
                              'importance', round({importance}::numeric, 4),
                              'level', {_LEVEL}) AS value,
           m.created_at, m.updated_at, m.id AS fact_id
    FROM agent_memory.memory_items m
    WHERE m.superseded_at IS NULL AND m.{LEVELS_MATCH} AND {facts_where}
      AND NOT EXISTS (SELECT 1 FROM agent_memory.store_items h
                      WHERE h.namespace = %(ns)s::text[] AND h.fact_id = m.id)
      AND NOT EXISTS (SELECT 1 FROM agent_memory.store_items h
                      WHERE h.namespace = %(ns)s::text[] AND h.key = {FACT_KEY_SQL})"""


def _cte(halves: list[str]) -> str:
    return "items AS (" + "\n    UNION ALL\n    ".join(halves) + ")"


Row = tuple[tuple[str, ...], str, dict[str, Any], Any, Any, float | None, str]
_COLUMNS = "namespace, key, value, created_at, updated_at"


def _rows(rows: list[Any], score: bool) -> list[Row]:
    return [
        (tuple(r[0]), str(r[1]), r[2], r[3], r[4], float(r[5]) if score else None, str(r[6]))
        for r in rows
    ]


def get_steps(halves: list[str], params: dict[str, Any]) -> Steps[list[Row]]:
    """The items of :func:`items_cte`'s ``halves`` (one namespace's, keys chosen there)."""
    rows = yield Run(f"WITH {_cte(halves)} SELECT {_COLUMNS}, NULL, ident FROM items", params)
    return _rows(rows, False)


def latest_steps(
    halves: list[str],
    params: dict[str, Any],
    condition: str,
    limit: int,
    offset: int,
    seen: list[str],
) -> Steps[list[Row]]:
    """The items of ``halves`` that pass ``condition`` (a filter on alias ``items``), the
    latest updated first, leaving out those of ``seen`` (their idents). Each half is cut to
    the page's end before they are merged."""
    cut = [
        f"""(SELECT * FROM ({half}) AS items
     WHERE {condition} AND ident <> ALL(%(seen)s::text[])
     ORDER BY updated_at DESC, namespace, key LIMIT %(end)s)"""
        for half in halves
    ]
    rows = yield Run(
        f"""SELECT {_COLUMNS}, NULL, ident FROM (
    {" UNION ALL ".join(cut)}
) AS items
ORDER BY updated_at DESC, namespace, key
LIMIT %(limit)s OFFSET %(offset)s""",
        {**params, "limit": limit, "offset": offset, "end": offset + limit, "seen": seen},
    )
    return _rows(rows, False)


def of_facts_steps(
    halves: list[str], params: dict[str, Any], condition: str
) -> Steps[list[tuple[Row, int]]]:
    """The items of ``halves`` (chosen by their facts there) that pass ``condition``, each
    with its fact's id."""
    rows = yield Run(
        f"""WITH {_cte(halves)}
SELECT {_COLUMNS}, NULL, ident, fact_id FROM items WHERE {condition}""",
        params,
    )
    return [(row, int(r[7])) for row, r in zip(_rows(rows, False), rows, strict=True)]


_DOCUMENT = f"m.fact_id IS NULL AND m.visible AND {live('m')} AND {{under}}"


def ranked_documents_steps(
    params: dict[str, Any], condition: str, text: str, limit: int
) -> Steps[list[Row]]:
    """The documents under ``%(ns)s`` that pass ``condition`` (on alias ``m``) and match
    ``text`` by full text, best first, scored as facts are (the share of the question's
    weight they hold, see :func:`agent_memory.db.fulltext.text_hits`)."""
    namespace = tuple(params["ns"])
    params.update(namespace_params(namespace))
    under = " OR ".join(f"({c})" for c in _under("m.namespace", namespace, False))
    document = _DOCUMENT.format(under=f"({under})")
    hits = text_hits("agent_memory.store_items", f"{document} AND {condition}", "updated_at")
    rows = yield Run(
        f"""WITH {hits}
SELECT m.{_COLUMNS.replace(", ", ", m.")}, h.n, {ident("m")}
FROM text_hits h JOIN agent_memory.store_items m ON m.id = h.id
WHERE h.n > 0
ORDER BY h.r""",
        {**params, "text": text, "candidates": limit},
    )
    return _rows(rows, True)


def namespaces_steps(
    labels: tuple[str, ...],
    fields: list[str | None],
    fixed: Mapping[str, str | None],
    conditions: list[tuple[str, tuple[str, ...]]],
    max_depth: int | None,
    limit: int,
    offset: int,
    levels: bool = False,
) -> Steps[list[tuple[str, ...]]]:
    """The namespaces that hold items (see the module), cut to ``max_depth`` labels, that
    match every condition: ``("prefix" | "suffix", labels)``, where ``"*"`` matches any one
    label. In label order. ``levels``: the level namespaces that hold facts too
    (:mod:`agent_memory.db.store_levels`)."""
    params: dict[str, Any] = {"depth": max_depth, "limit": limit, "offset": offset}
    for i, literal in enumerate(labels):
        params[f"t{i}"] = literal
    clauses = []
    for c, (kind, path) in enumerate(conditions):
        if not path:
            continue
        parts = [f"cardinality(namespace) >= {len(path)}"]
        for i, label in enumerate(path):
            if label == "*":
                continue
            params[f"c{c}_{i}"] = label
            at = str(i + 1) if kind == "prefix" else f"cardinality(namespace) - {len(path) - 1 - i}"
            parts.append(f"namespace[{at}] = %(c{c}_{i})s")
        clauses.append(" AND ".join(parts))
    facts_scope = _fact_scope(fields, fixed, {}, params)
    of_levels = level_namespaces(labels, fields, fixed, params) if levels else []
    rows = yield Run(
        f"""WITH held AS (
    SELECT s.namespace FROM agent_memory.store_items s WHERE s.visible AND {live("s")}
    UNION
    SELECT DISTINCT {_render(fields, params)} FROM agent_memory.memory_items m
    WHERE m.superseded_at IS NULL AND NOT m.shown AND {facts_scope}
    {"".join(f" UNION {select}" for select in of_levels)}
), cut AS (
    SELECT DISTINCT namespace[1:least(cardinality(namespace),
                                      coalesce(%(depth)s::int, cardinality(namespace)))] AS ns
    FROM held AS h(namespace)
    WHERE {" AND ".join(f"({c})" for c in clauses) or "TRUE"}
)
SELECT ns FROM cut ORDER BY ns LIMIT %(limit)s OFFSET %(offset)s""",
        params,
    )
    return [tuple(r[0]) for r in rows]


async def of_scope(conn: psycopg.AsyncConnection[Any], scope: Scope) -> list[dict[str, Any]]:
    """The Store items of ``scope`` (for its export), oldest first, JSON-ready."""
    cur = await conn.execute(
        f"""SELECT namespace, key, value, fact_id, created_at, updated_at
FROM agent_memory.store_items WHERE {SCOPE_MATCH} ORDER BY created_at, id""",
        scope.as_dict(),
    )
    return [
        {
            "namespace": list(r[0]),
            "key": r[1],
            "value": r[2],
            "fact_id": r[3],
            "created_at": r[4].isoformat(),
            "updated_at": r[5].isoformat(),
        }
        for r in await cur.fetchall()
    ]
