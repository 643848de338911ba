"""python -m benchmarks.turn_cpu [--quick] [--facts N] [--messages N] [--iterations N]
                                [--neighbours N]

Where a turn's CPU goes (issue 40, item 1): CPU per default inject and per record, this
process's (the client) and the server's separately, and per statement. ``python -m
benchmarks.load`` reports the same figures under ``cpu_per_turn``.

The data: one scope (user and agent, so the default inject also reads the person's level, as
AGENT_MEMORY_SHARE=user has it) with N current facts (default 600) and M messages (default
3,000) recorded through ``MemoryManager.record`` two a turn (queued, then their sentences made
snippets by the drain, as in production). Facts and snippets are embedded by the bundled model,
the scope's full-text statistics folded and its HNSW indexes built as the flows would leave
them (one for the snippets from 2,000 vectors; none for 600 facts). Around it, 100 other
scopes (--neighbours) with a tenth as much each, drawn in SQL, so the tables' statistics, and
the generic plans made from them, are those of a database of many scopes.

The figures, per call, each an average over --iterations calls after a warm-up (in rounds
that take turns with the references):

* inject - ``MemoryManager.inject`` with the default settings (hybrid ranking over the levels,
  snippets searched in the same statement, agent_memory.db.together): ``client_ms`` (this
  process's CPU, ``time.process_time``), split into the question's embedding (the bundled
  model), psycopg's work for the statements (from their runs below), choosing the snippets
  (``chosen_snippets`` on the arguments the injects gave it) and the rest (planning the
  inject, building the frame, the pool, asyncio); ``server_ms`` (the CPU of the database's
  client backends, read from /proc); ``background_ms`` (WAL writer, checkpointer, background
  writer, autovacuum)
* record - ``MemoryManager.record`` of a two-message turn, the same figures, and the server
  CPU of its INSERT with the triggers off (``server_ms_without_triggers``: since schema 26 the
  trigger queues the episode for the drain that makes its sentences snippets; a superuser's
  session only)
* statements - each statement the injects (and some records) sent, captured from psycopg's
  cursor (a raw one's too) and run again in the order sent on one connection set up as the
  pool's (generic plans, the HNSW queue size), each run's CPU read around it: its server and
  client CPU per run, how often an operation sends it, and its share of the operation's CPU
  (server + client); a ranking's server CPU also with each side left out, meaning or full
  text (the same statement with its vector, or its text, None: both rankings' side at once).
  Their shares leave out the client work above that is not a statement's
* references - ``SELECT 1`` on that connection, and importance-only inject
  (AGENT_MEMORY_INJECT_RANKING=importance) on a manager of its own

Server CPU needs the server on this machine (the embedded one, or a local DATABASE_URL). Where
the server keeps pg_stat_statements, its time per call is reported beside (elapsed time in the
server, not CPU); the embedded server does not have it. Bound (issue 40): CPU per default
inject, client + server, <= 3 ms at 600 facts and 3,000 messages per scope.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from agent_memory import MemoryManager
from agent_memory import frame as frame_module
from agent_memory.db import recall
from agent_memory.db.connection import GENERIC_PLANS
from agent_memory.db.recall import Ranked
from agent_memory.models import Snippet
from agent_memory.settings import MemorySettings, Settings
from agent_memory.snippet_choice import chosen_snippets
from benchmarks import _cpu
from benchmarks._common import (
    bench_database,
    emit,
    machine_busy,
    machine_cpu,
    parser,
)
from benchmarks._synthetic import question
from benchmarks._turn_data import SCOPE, load, turn

DB = "agent_memory_bench_turn_cpu"
BOUND_MS = 3.0  # CPU per default inject, client + server (issue 40)
FULL = {"facts": 600, "messages": 3000, "iterations": 1000, "neighbours": 100}
QUICK = {"facts": 150, "messages": 1800, "iterations": 60, "neighbours": 10}
SIDES = ("vector", "text")  # the sides of a ranking, each left out in turn
CAPTURED = 200  # records whose statements are captured and run again


async def statements(
    conn: psycopg.AsyncConnection[Any],
    sent: list[_cpu.Sent],
    per: int,
    whole_ms: float,
    clock: _cpu.ServerClock,
    pgss: bool,
) -> list[dict[str, Any]]:
    """The statements of ``sent`` (what ``per`` operations sent) run again on ``conn`` in
    turn (``clock``: its backend): each one's CPU per run, runs per operation, and share of
    the operation's ``whole_ms`` (client + server); the largest share first. A ranking's
    server CPU is also given with each of its sides left out (``server_ms_without_vector``,
    ``server_ms_without_text``: the same statement with that value None)."""
    out = []
    groups = _cpu.grouped(sent)
    sides = {}
    for side in SIDES:
        if any(_cpu.without(s, side) is not s for s in sent):
            sides[side] = await _cpu.in_turn(conn, [_cpu.without(s, side) for s in sent], clock)
    for text, cpu in (await _cpu.in_turn(conn, sent, clock)).items():
        calls = float(cpu.pop("runs") or 0) / per
        row: dict[str, Any] = {
            "statement": _cpu.label(text),
            "reads": _cpu.tables(text),
            "calls_per_operation": round(calls, 3),
            **cpu,
            "share": round(_cpu.total_ms(cpu) * calls / whole_ms, 3),
        }
        for side, figures in sides.items():
            if groups[text][0].params != _cpu.without(groups[text][0], side).params:
                row[f"server_ms_without_{side}"] = figures[text]["server_ms"]
        if pgss:  # its own pass: reset, then the statement alone
            await _cpu.pgss_reset(conn)
            await _cpu.replayed(conn, groups[text], per, clock)
            row["server_ms_pg_stat_statements"] = await _cpu.pgss_ms(conn, per, per)
        out.append(row)
    return sorted(out, key=lambda r: -float(r["share"]))


async def replay_connection(dsn: str, settings: Settings) -> psycopg.AsyncConnection[Any]:
    """A connection set up as the agent's pool sets up its own: generic plans (unless the
    settings turn them off), and the HNSW queue size inject gives a session."""
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    if settings.db.generic_plans:
        await conn.execute(GENERIC_PLANS)
    candidates = settings.memory.inject_candidates
    await conn.execute(recall.ANN_EF_SEARCH, {"candidates": candidates, "local": False})
    return conn


@contextmanager
def choices() -> Iterator[list[tuple[Any, ...]]]:
    """The arguments of every choice of snippets an inject makes in the block (the frame's
    Python work, measured alone afterwards)."""
    seen: list[tuple[Any, ...]] = []

    def record(found: list[Snippet], facts: Ranked, tokens: int) -> list[Snippet]:
        seen.append((found, facts, tokens))
        return chosen_snippets(found, facts, tokens)

    frame_module.chosen_snippets = record  # type: ignore[attr-defined]
    try:
        yield seen
    finally:
        frame_module.chosen_snippets = chosen_snippets  # type: ignore[attr-defined]


async def inject_cpu(
    manager: MemoryManager,
    importance: MemoryManager,
    conn: psycopg.AsyncConnection[Any],
    n: int,
    pgss: bool,
) -> dict[str, Any]:
    """CPU per default inject, split, with its statements and the references."""
    asks = [question(random.Random(i)) for i in range(n)]
    for i in range(20):  # warm-up
        await manager.inject(SCOPE, query=asks[i % n])
        await importance.inject(SCOPE, query=asks[i % n])
    clock = await _cpu.ServerClock.of(conn)  # every backend of this database
    own = await _cpu.ServerClock.of(conn, only_self=True)  # the replays' alone
    with _cpu.captured() as sent, choices() as chose:
        frames = [await manager.inject(SCOPE, query=q) for q in asks]  # the same mix

    def default(i: int) -> Awaitable[Any]:
        return manager.inject(SCOPE, query=asks[i])

    def by_importance(i: int) -> Awaitable[Any]:
        return importance.inject(SCOPE, query=asks[i])

    async def embedding(i: int) -> Any:
        return await manager.backend.queries.embed(asks[i])  # the call inject makes

    async def choice(i: int) -> Any:
        return chosen_snippets(*chose[i % len(chose)])

    cpu = await _cpu.interleaved(
        {"inject": default, "importance": by_importance, "embedding": embedding, "choice": choice},
        n,
        clock,
    )
    inject = cpu["inject"]
    select1 = await _cpu.replayed(conn, [_cpu.Sent("SELECT 1", None, False)], n, own)
    if pgss:
        inject["server_ms_pg_stat_statements"] = await _cpu.pgss_per_call(conn, default, n)
        cpu["importance"]["server_ms_pg_stat_statements"] = await _cpu.pgss_per_call(
            conn, by_importance, n
        )
    listed = await statements(conn, sent, n, inject["total_ms"], own, pgss)
    split = {
        "query_embedding_ms": cpu["embedding"]["client_ms"],
        "statements_ms": round(sum(r["client_ms"] * r["calls_per_operation"] for r in listed), 4),
        "snippet_choice_ms": cpu["choice"]["client_ms"],
    }
    split["other_ms"] = round(inject["client_ms"] - sum(split.values()), 4)
    inject["client_split"] = split
    return {
        "ranking": frames[-1].ranking,
        "snippets_per_inject": round(sum(len(f.snippets) for f in frames) / len(frames), 1),
        "inject": inject,
        "statements": listed,
        "references": {
            "select1": {**select1, "total_ms": round(_cpu.total_ms(select1), 4)},
            "inject_importance": cpu["importance"],
            "inject_over_importance": round(inject["total_ms"] / cpu["importance"]["total_ms"], 1),
            "inject_over_select1": round(inject["total_ms"] / _cpu.total_ms(select1), 1),
        },
        "server_cpu": "the backends' CPU from /proc (schedstat, else stat)"
        if clock.local
        else "the server is not on this machine: its CPU is unknown (null)",
    }


async def record_cpu(
    manager: MemoryManager, conn: psycopg.AsyncConnection[Any], n: int, pgss: bool
) -> dict[str, Any]:
    """CPU per record of a turn, with its statement (each adds a turn to the scope)."""
    rng = random.Random(7)
    said = [turn(rng) for _ in range(n + CAPTURED)]
    clock = await _cpu.ServerClock.of(conn)
    own = await _cpu.ServerClock.of(conn, only_self=True)
    with _cpu.captured() as sent:
        for i in range(CAPTURED):
            await manager.record(SCOPE, said[n + i])

    async def record(i: int) -> Any:
        return await manager.record(SCOPE, said[i])

    figures = (await _cpu.interleaved({"record": record}, n, clock))["record"]
    listed = await statements(conn, sent, CAPTURED, figures["total_ms"], own, pgss)
    figures["server_ms_without_triggers"] = await without_triggers(conn, sent, own)
    return {"record": figures, "statements": listed}


async def without_triggers(
    conn: psycopg.AsyncConnection[Any], sent: list[_cpu.Sent], clock: _cpu.ServerClock
) -> float | None:
    """The server CPU per operation of the statements ``sent`` with the session's triggers
    off (session_replication_role = replica): what a record's INSERT costs without the
    trigger that makes its snippets. None where this role may not turn them off."""
    try:
        await conn.execute("SET session_replication_role = replica")
    except psycopg.Error:
        return None
    try:
        runs = await _cpu.in_turn(conn, sent, clock)
    finally:
        await conn.execute("RESET session_replication_role")
    if not clock.local:
        return None
    total = sum(float(r["server_ms"] or 0) * float(r["runs"] or 0) for r in runs.values())
    return round(total / len(sent), 4)


async def measure(dsn: str, facts: int, messages: int, n: int, neighbours: int) -> dict[str, Any]:
    """Load the scope into the migrated database at ``dsn`` and measure (see the module)."""
    load_before = os.getloadavg()
    busy = machine_cpu()
    manager = await MemoryManager.create(dsn, migrate=False)
    importance = await MemoryManager.create(
        dsn, settings=Settings(memory=MemorySettings(inject_ranking="importance")), migrate=False
    )
    try:
        data = await load(manager, dsn, facts, messages, neighbours)
        conn = await replay_connection(dsn, manager.settings)
        try:
            pgss_reason = await _cpu.pg_stat_statements(conn)
            pgss = pgss_reason is None
            injected = await inject_cpu(manager, importance, conn, n, pgss)
            recorded = await record_cpu(manager, conn, n, pgss)  # last: records add turns
        finally:
            await conn.close()
    finally:
        await manager.close()
        await importance.close()
    inject = injected.pop("inject")
    inject_listed, record_listed = injected.pop("statements"), recorded["statements"]
    result = {
        **injected,
        "inject": inject,
        "record": recorded["record"],
        "statements": {
            "inject": inject_listed,
            "inject_share_sum": round(sum(r["share"] for r in inject_listed), 3),
            "record": record_listed,
            "record_share_sum": round(sum(r["share"] for r in record_listed), 3),
        },
        "pg_stat_statements": "used: server time per call, elapsed (not CPU)"
        if pgss
        else pgss_reason,
    }
    full = facts >= FULL["facts"] and messages >= FULL["messages"]
    total = result["inject"]["total_ms"]
    known = result["inject"]["server_ms"] is not None
    return {
        "data": data,
        "iterations": n,
        **result,
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "machine_busy": machine_busy(busy),
        "bound": {"inject_total_ms": f"<= {BOUND_MS} at 600 facts and 3,000 messages a scope"},
        "within_bound": total <= BOUND_MS if full and known else None,
    }


def run(
    dsn: str, *, facts: int, messages: int, iterations: int, neighbours: int = 0
) -> dict[str, Any]:
    """The figures against a migrated database at ``dsn`` (see the module)."""
    return asyncio.run(measure(dsn, facts, messages, iterations, neighbours))


def in_own_database(quick: bool, **sizes: int) -> dict[str, Any]:
    """:func:`run` in a fresh database of its own (a fresh embedded server unless
    DATABASE_URL is set), at the quick or the full size unless ``sizes`` say otherwise."""
    with bench_database(DB) as (_admin, dsn):
        return run(dsn, **{**(QUICK if quick else FULL), **sizes})


def main(argv: list[str] | None = None) -> int:
    cli = parser("turn_cpu", __doc__, quick=f"{QUICK['facts']} facts, {QUICK['messages']} messages")
    cli.add_argument("--facts", type=int, default=None)
    cli.add_argument("--messages", type=int, default=None)
    cli.add_argument("--iterations", type=int, default=None)
    cli.add_argument("--neighbours", type=int, default=None, help="other scopes (default 100)")
    args = cli.parse_args(argv)
    given = {k: v for k in FULL if (v := getattr(args, k)) is not None}
    emit(in_own_database(args.quick, **given))
    return 0  # the bound is judged from "within_bound" in the JSON


if __name__ == "__main__":
    sys.exit(main())
