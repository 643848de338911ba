"""CPU time, client and server, for benchmarks/turn_cpu.py: this process's own (``time.
process_time``), the server's processes' read from ``/proc`` (a server on this machine: the
embedded one, or a local ``DATABASE_URL``), the statements an operation sends (captured from
psycopg's async cursor), and each captured statement run again alone on one connection.

A backend's CPU is read from ``/proc/<pid>/schedstat`` (nanoseconds on the CPU) where the kernel
has it, else from ``/proc/<pid>/stat`` (utime + stime, in clock ticks of 10 ms here). Both count
CPU only: time spent waiting for another process, for the disk or for a core that other work
holds is not in them, which is why these figures hold up on a shared machine where wall time
does not.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.raw_cursor import RawCursorMixin

from agent_memory.db import dual, native
from agent_memory.db.query_vector import sendable

_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds process ``pid`` has used (user and system), None if it cannot be read."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    except (OSError, ValueError, IndexError):
        return None


def is_local_postgres(pid: int) -> bool:
    """True when ``pid`` is a PostgreSQL process of this machine whose CPU can be read."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"postgres" in command and process_cpu_s(pid) is not None


_BACKENDS = """
SELECT pid, backend_type = 'client backend' AND datname = current_database()
FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = current_database()
   OR backend_type IN ('walwriter', 'checkpointer', 'background writer',
                       'autovacuum launcher', 'autovacuum worker')
"""


@dataclass
class ServerClock:
    """The CPU of the server's processes: ``backends`` (this database's client connections)
    and ``background`` (WAL writer, checkpointer, background writer, autovacuum), each summed;
    None where the server is not on this machine."""

    backends: list[int]
    background: list[int]

    @classmethod
    async def of(cls, conn: psycopg.AsyncConnection[Any], only_self: bool = False) -> ServerClock:
        """This database's backends (``only_self``: ``conn``'s alone) and the background."""
        rows = await (await conn.execute(_BACKENDS)).fetchall()
        me = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone() or (0,))[0]
        backends = [int(p) for p, client in rows if client and (not only_self or p == me)]
        background = [int(p) for p, client in rows if not client]
        if not backends or not is_local_postgres(backends[0]):
            return cls([], [])
        return cls(backends, [p for p in background if is_local_postgres(p)])

    @property
    def local(self) -> bool:
        return bool(self.backends)

    def read(self) -> tuple[float, float]:
        """(backends, background) CPU seconds so far (a process gone since counts 0)."""
        return (
            sum(process_cpu_s(p) or 0.0 for p in self.backends),
            sum(process_cpu_s(p) or 0.0 for p in self.background),
        )


async def spent(
    call: Callable[[int], Awaitable[Any]], n: int, clock: ServerClock
) -> dict[str, float | None]:
    """Per call of ``call(i)`` for i in 0..n-1, in ms: this process's CPU (``client_ms``), the
    server's backends' (``server_ms``) and background processes' (``background_ms``)."""
    server0, background0 = clock.read()
    started = time.process_time()
    for i in range(n):
        await call(i)
    client = time.process_time() - started
    server1, background1 = clock.read()
    local = clock.local
    return {
        "client_ms": round(client * 1000 / n, 4),
        "server_ms": round((server1 - server0) * 1000 / n, 4) if local else None,
        "background_ms": round((background1 - background0) * 1000 / n, 4) if local else None,
    }


def total_ms(figures: dict[str, Any]) -> float:
    """Client + server CPU per call (the client's alone where the server's is unknown)."""
    return float(figures["client_ms"] + (figures["server_ms"] or 0.0))


def _mean(samples: list[dict[str, float | None]]) -> dict[str, Any]:
    """The mean of rounds of equal size, and client + server as ``total_ms``."""
    out: dict[str, Any] = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        out[key] = None if None in values else round(sum(v or 0.0 for v in values) / len(values), 4)
    out["total_ms"] = round(total_ms(out), 4)
    return out


Call = Callable[[int], Awaitable[Any]]
ROUNDS = 5  # the calls measured, in rounds that take turns


def _from(call: Call, start: int) -> Call:
    return lambda i: call(start + i)


async def interleaved(calls: dict[str, Call], n: int, clock: ServerClock) -> dict[str, Any]:
    """:func:`spent` for each of ``calls`` (``call(i)``, i < n) in ROUNDS rounds of n / ROUNDS
    calls that take turns, so that other work on the machine weighs on each alike; with
    ``total_ms``."""
    per = max(n // ROUNDS, 1)
    samples: dict[str, list[dict[str, float | None]]] = {name: [] for name in calls}
    for r in range(ROUNDS):
        for name, call in calls.items():
            samples[name].append(await spent(_from(call, r * per), per, clock))
    return {name: _mean(each) for name, each in samples.items()}


# ---- the statements an operation sends ------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """One statement as psycopg was asked to run it (``raw``: on a raw cursor, native ``$n``
    placeholders and positional values, as agent_memory.db.native sends long statements;
    ``source``: such a statement's text and named values before that conversion)."""

    query: Any
    params: Any
    raw: bool
    source: tuple[str, Mapping[str, Any]] | None = None

    @property
    def text(self) -> str:
        return self.query if isinstance(self.query, str) else repr(self.query)


def without(s: Sent, name: str) -> Sent:
    """``s`` with its value ``name`` None: the same statement (and plan) with a side of a
    ranking left out (``vector``: meaning; ``text``: full text); ``s`` if it has no such."""
    if s.source is not None:
        query, values = s.source
        if name not in values:
            return s
        changed = {**values, name: None}
        converted = native.native_form(query, changed)
        assert converted is not None
        return Sent(converted[0], converted[1], True, (query, changed))
    if isinstance(s.params, Mapping) and name in s.params:
        return Sent(s.query, {**s.params, name: None}, s.raw)
    return s


@contextmanager
def captured() -> Iterator[list[Sent]]:
    """Every statement run on an async cursor of psycopg (a raw one's too) in the block."""
    seen: list[Sent] = []
    original, original_form = psycopg.AsyncCursor.execute, native.native_form
    # what agent_memory.db.dual converted last: the next raw execute runs it, with no await
    # between them for another task to come in
    converted: list[tuple[str, Mapping[str, Any]]] = []

    def native_form(query: str, params: Any) -> tuple[str, list[Any]] | None:
        out = original_form(query, params)
        if out is not None:
            converted[:] = [(query, params)]
        return out

    async def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        raw = isinstance(self, RawCursorMixin)
        source = converted.pop() if raw and converted else None
        seen.append(Sent(query, params, raw, source))
        return await original(self, query, params, **kwargs)

    psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]
    dual.native_form = native_form  # type: ignore[attr-defined]
    try:
        yield seen
    finally:
        psycopg.AsyncCursor.execute = original  # type: ignore[method-assign]
        dual.native_form = original_form  # type: ignore[attr-defined]


def grouped(sent: list[Sent]) -> dict[str, list[Sent]]:
    """The statements by their text, in order of first use."""
    out: dict[str, list[Sent]] = {}
    for s in sent:
        out.setdefault(s.text, []).append(s)
    return out


_SPACE = re.compile(r"\s+")
_TABLE = re.compile(r"agent_memory\.(\w+)")


def label(text: str) -> str:
    """A statement's first 80 characters, its white space folded."""
    return _SPACE.sub(" ", text).strip()[:80]


def tables(text: str) -> list[str]:
    """The agent_memory relations and functions a statement names, in order of first use."""
    return list(dict.fromkeys(_TABLE.findall(text)))


async def run_one(conn: psycopg.AsyncConnection[Any], s: Sent) -> None:
    """Run ``s`` as it was run, and fetch what it returns."""
    sendable(conn)  # a ranking's vector (agent_memory.db.query_vector)
    if s.raw:
        cur: Any = await psycopg.AsyncRawCursor(conn).execute(s.query, s.params)
    else:
        cur = await conn.execute(s.query, s.params)
    if cur.description is not None:
        await cur.fetchall()


async def replayed(
    conn: psycopg.AsyncConnection[Any], each: list[Sent], n: int, clock: ServerClock
) -> dict[str, float | None]:
    """CPU per run of the statement whose captured runs are ``each``, run ``n`` times in a row
    on ``conn`` (its values taken in turn), after ten unmeasured runs (psycopg prepares a
    statement on its fifth); ``clock`` reads ``conn``'s backend alone."""
    for i in range(10):
        await run_one(conn, each[i % len(each)])
    return await spent(lambda i: run_one(conn, each[i % len(each)]), n, clock)


async def in_turn(
    conn: psycopg.AsyncConnection[Any], sent: list[Sent], clock: ServerClock
) -> dict[str, dict[str, float | None]]:
    """Every statement of ``sent`` run again on ``conn`` in the order it was sent (so each
    meets the caches the others leave, as it does in the operation: the same statement run
    in a row costs the server about a sixth less), each run's CPU read around it: per
    statement text, its runs and CPU per run in ms (``clock``: ``conn``'s backend alone).
    Each statement is first run ten times unmeasured (psycopg prepares on the fifth)."""
    for each in grouped(sent).values():
        for i in range(10):
            await run_one(conn, each[i % len(each)])
    pid = clock.backends[0] if clock.local else None
    runs: dict[str, list[float]] = {}
    for s in sent:
        server0 = process_cpu_s(pid) if pid else None
        started = time.process_time()
        await run_one(conn, s)
        client = time.process_time() - started
        server1 = process_cpu_s(pid) if pid else None
        server = server1 - server0 if server0 is not None and server1 is not None else 0.0
        totals = runs.setdefault(s.text, [0.0, 0.0, 0.0])
        totals[0] += 1
        totals[1] += client
        totals[2] += server
    return {
        text: {
            "runs": n,
            "client_ms": round(client * 1000 / n, 4),
            "server_ms": round(server * 1000 / n, 4) if pid else None,
        }
        for text, (n, client, server) in runs.items()
    }


# ---- pg_stat_statements, where the server has it ------------------------------------------

_PGSS = "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
_PGSS_RESET = "SELECT pg_stat_statements_reset()"
# this database's statements run at least %s times since the reset: their time per call
_PGSS_READ = """
SELECT coalesce(sum(total_exec_time + total_plan_time), 0), coalesce(sum(calls), 0)
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls >= %s
"""


async def pg_stat_statements(conn: psycopg.AsyncConnection[Any]) -> str | None:
    """None when the server keeps pg_stat_statements and this role may reset it; else why
    not (the embedded server has no such extension)."""
    try:
        if await (await conn.execute(_PGSS)).fetchone() is None:
            return "not installed in this database (the embedded server does not ship it)"
        await conn.execute(_PGSS_RESET)
    except psycopg.Error as exc:
        return f"unusable here: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return None


async def pgss_reset(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute(_PGSS_RESET)


async def pgss_per_call(conn: psycopg.AsyncConnection[Any], call: Call, n: int) -> float:
    """pg_stat_statements' server time per call of ``call`` (its own pass: reset, n calls)."""
    await pgss_reset(conn)
    for i in range(n):
        await call(i)
    return await pgss_ms(conn, n // 2, n)


async def pgss_ms(conn: psycopg.AsyncConnection[Any], n: int, per: int) -> float:
    """Server time (executing and planning, as pg_stat_statements counts it: elapsed, not
    CPU) of the statements run at least ``n`` times since the reset, per ``per`` calls."""
    row = await (await conn.execute(_PGSS_READ, (n,))).fetchone()
    return round(float(row[0]) / per, 4) if row else 0.0
