"""python -m benchmarks.ranking_functions [--quick] [--rounds N] [--per-round N]

Could the ranking statements be SQL functions at no cost (issue 41, item 4)? The statement
the default inject sends (the facts' ranking over the person's levels and the snippet search,
as one: agent_memory.db.together) and the one-scope fact ranking, each read through a scope's
own HNSW index, are captured from psycopg as they are sent, and each is made a ``LANGUAGE sql
STABLE`` set-returning function in
a schema of this benchmark's (its body the statement in ``$n`` placeholders, the index's scope
tag, model and dimensions turned into arguments that the calling statement passes as
literals, so that once PostgreSQL inlines the function its partial index still applies). Per
statement, the figures:

* ``same_rows`` - the function returns what the statement does, for every captured question
* ``plan`` - the generic plans (``force_generic_plan``, read by ``EXPLAIN EXECUTE`` of the
  prepared statements): ``inlined`` (no Function Scan of it), ``hnsw`` (whether each reads the
  scope's own index), ``identical``, and ``same`` once the differences known to be of form
  alone are set aside (the function's typmod cast written as a call, an ``int2`` parameter
  cast to the function's ``int4`` argument, a projection of the function's columns). On a
  tiny scope the two may differ where the planner's costs are near a tie
* ``generic`` and ``custom`` - CPU per run, the agent's process and the backend, the statement
  as the drivers send it now (a raw cursor, :mod:`agent_memory.db.native`) and the function's
  call, in alternated rounds on one connection each: planned once (``force_generic_plan``, the
  agent's pool) and planned on every run (``force_custom_plan``: the pool with
  ``AGENT_MEMORY_DB_GENERIC_PLANS=false``, and any statement before psycopg prepares it); each
  as the median of the rounds' ratios, function over statement.

The data are ``benchmarks.turn_cpu``'s (one scope with its person's level, neighbours around).
"""

from __future__ import annotations

import asyncio
import random
import re
import statistics
import sys
from typing import Any

import psycopg

from agent_memory import MemoryManager
from agent_memory.db import ann_indexes, native, recall
from agent_memory.db.connection import GENERIC_PLANS
from agent_memory.db.embeddings import vector_text
from agent_memory.db.query_vector import QueryVector
from agent_memory.settings import LOCAL_MODEL
from benchmarks import _cpu
from benchmarks._common import bench_database, emit, machine_busy, machine_cpu, parser
from benchmarks._synthetic import question
from benchmarks._turn_data import SCOPE, load

DB = "agent_memory_bench_ranking_functions"
FULL = {"facts": 600, "messages": 3000, "neighbours": 50, "rounds": 10, "per_round": 40}
QUICK = {"facts": 200, "messages": 1200, "neighbours": 10, "rounds": 4, "per_round": 10}
QUESTIONS = 50
SCHEMA = "ranking_bench"

# the SQL type of each value a ranking statement takes
TYPES = {
    **dict.fromkeys(["text", "user_id", "agent_id", "workflow_id", "model", "fusion"], "text"),
    **dict.fromkeys(["level_user_ids", "level_agent_ids", "level_workflow_ids"], "text[]"),
    **dict.fromkeys(["day", "candidates", "limit", "queue"], "int"),
    **dict.fromkeys(["vector_floor", "text_gate", "replies"], "bool"),
    **dict.fromkeys(["since", "until"], "timestamptz"),
    **dict.fromkeys(
        ["min_importance", "rrf_k", "w_text", "w_vector", "half_life", "w_importance"], "float8"
    ),
    **dict.fromkeys(["w_recency", "prior_weight"], "float8"),
    "vector": "vector",
}
_ANN = re.compile(r"e\.scope_tag = '([0-9a-f]+)' AND e\.model = '([^']+)'")
_DIMS = re.compile(r"::(vector|halfvec)\((\d+)\)")
# the cast of a vector to each type at a size, as a function a parameter may size
_CAST = {"vector": "vector", "halfvec": "vector_to_halfvec"}


def function_sql(name: str, query: str, columns: list[str]) -> tuple[str, str]:
    """CREATE FUNCTION ``name`` of ``query`` returning ``columns`` (each "name type"), and the
    statement that calls it (``%(name)s`` placeholders; a scope index's constants literal)."""
    converted = native.native(query)
    assert converted is not None
    body, names = converted
    args = [f"p_{n} {TYPES[n]}" for n in names]
    call = [f"%({n})s" for n in names]
    found = _ANN.search(body)
    if found is not None:
        tag, model = found.groups()
        dims_found = _DIMS.search(body)
        assert dims_found is not None
        held, dims = dims_found.groups()
        k, v, cast = len(names), names.index("vector") + 1, _CAST[held]
        for old, new in (
            (f"'{tag}'", f"${k + 1}"),
            (f"'{model}'", f"${k + 2}"),
            (f"e.embedding::{held}({dims})", f"{cast}(e.embedding, ${k + 3}, true)"),
            (f"${v}::{held}({dims})", f"{cast}(${v}::vector, ${k + 3}, true)"),
            (f"vector_dims(e.embedding) = {dims}", f"vector_dims(e.embedding) = ${k + 3}"),
        ):
            body = body.replace(old, new)
        args += ["p_scope_tag text", "p_ann_model text", "p_dims int"]
        call += [f"'{tag}'", "'" + model.replace("%", "%%") + "'", dims]
    create = (
        f"CREATE FUNCTION {name}({', '.join(args)}) RETURNS TABLE({', '.join(columns)})"
        f" LANGUAGE sql STABLE AS $body${body}$body$"
    )
    return create, f"SELECT * FROM {name}({', '.join(call)})"


def as_function(conn: psycopg.Connection[Any], n: int, query: str, values: dict[str, Any]) -> str:
    """Create the function of ``query`` (its columns as it returns them); its call."""
    cur = conn.execute(query, values)
    columns = [
        f"c{i} {conn.execute('SELECT format_type(%s, NULL)', (d.type_code,)).fetchone()[0]}"  # type: ignore[index]
        for i, d in enumerate(cur.description or [])
    ]
    create, call = function_sql(f"{SCHEMA}.ranking_{n}", query, columns)
    conn.execute(create)
    return call


def generic_plan(conn: psycopg.Connection[Any], query: str, values: dict[str, Any]) -> list[str]:
    """The lines of ``query``'s generic plan, as the prepared statement psycopg made holds it."""
    for _ in range(6):  # psycopg prepares a statement on its fifth run
        conn.execute(query, values).fetchall()
    converted = native.native(query)
    assert converted is not None
    text, names = converted
    row = conn.execute(
        "SELECT name, parameter_types::text FROM pg_prepared_statements WHERE statement = %s",
        (text,),
    ).fetchone()
    assert row is not None, "not prepared"
    types = [t.strip('"') for t in str(row[1]).strip("{}").split(",")]
    args = ", ".join(f"%({n})s::{t}" for n, t in zip(names, types, strict=True))
    explain = f"EXPLAIN (COSTS OFF) EXECUTE {row[0]}({args})"
    return [str(r[0]) for r in psycopg.ClientCursor(conn).execute(explain, values).fetchall()]


_CALL_CAST = re.compile(r"vector\(([\w.$]+), (\d+), true\)")


def known_form(lines: list[str]) -> list[str]:
    """A plan's lines with the differences of form alone set aside (see the module)."""
    out = [line.strip().removeprefix("->  ") for line in lines]
    if out and out[0].startswith("Subquery Scan on ranking_"):
        out = out[1:]
    return [
        re.sub(r"\((\$\d+)\)::integer", r"\1", _CALL_CAST.sub(r"(\1)::vector(\2)", line))
        for line in out
    ]


def _reads_index(plan: list[str]) -> bool:
    """Whether ``plan`` reads a scope's own HNSW index (ann_indexes names them ``*_ann_*``)."""
    return any("_ann_" in line for line in plan)


def compare(dsn: str, query: str, call: str, values: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows and generic plans of ``query`` and of its function's ``call``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(GENERIC_PLANS)
        conn.execute(recall.ANN_EF_SEARCH, {"candidates": 50, "local": False})
        same_rows = all(
            conn.execute(query, v).fetchall() == conn.execute(call, v).fetchall() for v in values
        )
        now, fn = generic_plan(conn, query, values[0]), generic_plan(conn, call, values[0])
    return {
        "same_rows": same_rows,
        "plan": {
            "inlined": not any("Function Scan on ranking_" in line for line in fn),
            "hnsw": {"statement": _reads_index(now), "function": _reads_index(fn)},
            "identical": now == fn,
            "same": known_form(now) == known_form(fn),
        },
    }


async def _connection(dsn: str, mode: str) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await conn.execute(GENERIC_PLANS if mode == "generic" else f"SET plan_cache_mode = {mode}")
    await conn.execute(recall.ANN_EF_SEARCH, {"candidates": 50, "local": False})
    return conn


async def _as_sent(conn: psycopg.AsyncConnection[Any], query: str, values: Any) -> None:
    """The statement as the drivers send it now (agent_memory.db.dual)."""
    form = native.native_form(query, values)
    assert form is not None
    await (await psycopg.AsyncRawCursor(conn).execute(*form)).fetchall()


async def _called(conn: psycopg.AsyncConnection[Any], call: str, values: Any) -> None:
    await (await conn.execute(call, values)).fetchall()


Sample = dict[str, float | None]


async def _rounds(
    dsn: str, mode: str, query: str, call: str, values: list[dict[str, Any]], rounds: int, per: int
) -> list[tuple[Sample, Sample]]:
    """CPU per run of the statement and of the call, ``rounds`` alternated rounds of ``per``
    runs, on a connection each planning in ``mode`` (a plan_cache_mode, or ``generic``)."""
    now, fn = await _connection(dsn, mode), await _connection(dsn, mode)
    try:
        clocks = [await _cpu.ServerClock.of(c, only_self=True) for c in (now, fn)]
        for i in range(10):
            await _as_sent(now, query, values[i % len(values)])
            await _called(fn, call, values[i % len(values)])
        pairs = []
        for r in range(rounds):
            at = [values[(r * per + i) % len(values)] for i in range(per)]
            a = await _cpu.spent(lambda i: _as_sent(now, query, at[i]), per, clocks[0])  # noqa: B023
            b = await _cpu.spent(lambda i: _called(fn, call, at[i]), per, clocks[1])  # noqa: B023
            pairs.append((a, b))
        return pairs
    finally:
        await now.close()
        await fn.close()


async def cpu(
    dsn: str, query: str, call: str, values: list[dict[str, Any]], rounds: int, per: int
) -> dict[str, Any]:
    """CPU per run of the statement and of its function's call (see the module), each mode."""
    out: dict[str, Any] = {}
    for name, mode in (("generic", "generic"), ("custom", "force_custom_plan")):
        pairs = await _rounds(dsn, mode, query, call, values, rounds, per)
        figures = {
            f"{side}_{key}": round(statistics.median(p[n][key] or 0.0 for p in pairs), 4)
            for n, side in enumerate(("statement", "function"))
            for key in ("client_ms", "server_ms")
        }
        for key in ("client_ms", "server_ms"):
            ratios = [(b[key] or 0.0) / (a[key] or 1.0) for a, b in pairs]
            figures[f"ratio_{key}"] = round(statistics.median(ratios), 3)
        out[name] = figures
    return out


async def captured(dsn: str) -> dict[str, list[dict[str, Any]]]:
    """The long statements the default inject sends (and the one-scope fact ranking through
    the scope's facts index), each with the values of every question asked."""
    manager = await MemoryManager.create(dsn, migrate=False)
    asks = [question(random.Random(i)) for i in range(QUESTIONS)]
    try:
        with _cpu.captured() as sent:
            for ask in asks:
                await manager.inject(SCOPE, query=ask)
    finally:
        await manager.close()
    out: dict[str, list[dict[str, Any]]] = {}
    for s in sent:
        if s.source is not None:
            # the question's vector as text: the plans are read through a client-side cursor
            values = {
                k: vector_text(v.values) if isinstance(v, QueryVector) else v
                for k, v in s.source[1].items()
            }
            out.setdefault(s.source[0], []).append(values)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        ann = await ann_indexes.ann_index(conn, "facts", SCOPE, LOCAL_MODEL)
    assert ann is not None
    levels = next(v for q, v in out.items() if "memory_items" in q)
    one_scope = [{k: x for k, x in v.items() if not k.startswith("level_")} for v in levels]
    out[recall.ranked_hybrid_ann(ann)] = one_scope
    return out


async def measure(dsn: str, sizes: dict[str, int]) -> dict[str, Any]:
    busy = machine_cpu()
    manager = await MemoryManager.create(dsn, migrate=False)
    try:
        data = await load(manager, dsn, sizes["facts"], sizes["messages"], sizes["neighbours"])
    finally:
        await manager.close()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # the scope's own indexes, whatever its size (the facts are below the flows' threshold)
        for kind in ("facts", "snippets"):
            await ann_indexes.ensure_ann_index(conn, kind, SCOPE, LOCAL_MODEL, 1)
        await conn.execute("ANALYZE")
    statements = await captured(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        calls = [as_function(conn, n, q, v[0]) for n, (q, v) in enumerate(statements.items())]
    results = []
    for call, (query, values) in zip(calls, statements.items(), strict=True):
        results.append(
            {
                "statement": _cpu.label(query),
                "chars": {"statement": len(query), "call": len(call)},
                **compare(dsn, query, call, values),
                **await cpu(dsn, query, call, values, sizes["rounds"], sizes["per_round"]),
            }
        )
    return {"data": data, "statements": results, "machine_busy": machine_busy(busy)}


def main(argv: list[str] | None = None) -> int:
    cli = parser("ranking_functions", __doc__, quick="a smaller scope, fewer rounds")
    cli.add_argument("--rounds", type=int, default=None)
    cli.add_argument("--per-round", type=int, default=None)
    args = cli.parse_args(argv)
    sizes = {**(QUICK if args.quick else FULL)}
    for key in ("rounds", "per_round"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    with bench_database(DB) as (_admin, dsn):
        return emit(asyncio.run(measure(dsn, sizes)))


if __name__ == "__main__":
    sys.exit(main())
