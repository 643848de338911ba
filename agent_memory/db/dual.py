"""One body for the sync and the async face of a database operation.

An operation is written once, as a generator that yields the statements it needs (:class:`Run`,
:class:`Connection`, :class:`Transaction`) and receives what each gave back; :func:`dual`
makes the two faces of it, one that runs it on an ``AsyncConnection`` and one on a
``Connection``. What differs between them, awaiting, is in the two drivers below and nowhere
else (the statement to send and the value a step gets back are shared), so the faces cannot
drift apart. A statement's error is thrown into the body at its ``yield``, so a body handles
errors with a plain ``try``::

    def count_steps(scope: Scope) -> Steps[int]:
        row = yield Run(COUNT, scope.as_dict(), "one")
        return int(row[0]) if row else 0

    count, count_sync = dual(count_steps)   # await count(aconn, scope); count_sync(conn, scope)

Inside a :class:`Transaction` (or on a connection that is not in autocommit) a failed statement
aborts the transaction: the body may catch the error, but every later statement of that
transaction fails too ("current transaction is aborted"), until it ends. A body that means to
go on after a statement that may fail puts that statement in a :class:`Transaction` of its own
(a savepoint inside the outer one) and catches the error around it: the savepoint is rolled
back and the outer transaction goes on::

    try:
        yield Transaction(insert_steps(row))   # may fail: a unique key taken
    except psycopg.errors.UniqueViolation:
        ...                                    # the outer transaction is still usable

A body composes others with ``yield from`` (``rows = yield from ranked_steps(...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

import psycopg

from agent_memory.db.native import native_form

P = ParamSpec("P")
T = TypeVar("T")

Get = Literal["all", "one", "count", "none", "ids"]


@dataclass(frozen=True)
class Run:
    """Run ``query`` with ``params``; the body receives, by ``get``: ``all`` its rows, ``one``
    its first row (or None), ``count`` the rows it changed, ``none`` None, ``ids`` the first
    column of each row an ``executemany`` of ``params`` (a list) returned, in one pipeline."""

    query: str
    params: Any = None
    get: Get = "all"


@dataclass(frozen=True)
class Connection:
    """The connection itself (to read its state, never to run statements on)."""


@dataclass(frozen=True)
class Transaction:
    """Run the body ``steps`` in a transaction (a savepoint inside one); its result."""

    steps: Steps[Any]


Step = Run | Connection | Transaction
Steps = Generator[Step, Any, T]


def _next(steps: Steps[T], value: Any, error: BaseException | None) -> tuple[Step | None, T]:
    """Resume the body with ``value`` (or throw ``error`` into it): its next step, or None and
    its result."""
    try:
        step = steps.throw(error) if error is not None else steps.send(value)
    except StopIteration as done:
        return None, done.value
    return step, None  # type: ignore[return-value]


def _statement(step: Run) -> tuple[str, Any, bool]:
    """What ``step`` sends: its text, its values, and whether on a raw cursor (a long
    statement in native placeholders, see :mod:`agent_memory.db.native`)."""
    raw = native_form(step.query, step.params)
    return (step.query, step.params, False) if raw is None else (raw[0], raw[1], True)


def _value(get: Get, rowcount: int, rows: list[Any] | None) -> Any:
    """What a step of ``get`` receives from its statement's ``rows`` (read when ``get`` asks
    for rows) and ``rowcount``."""
    if get == "all":
        return rows
    if get == "one":
        return rows[0] if rows else None
    return rowcount if get == "count" else None


def _ids(row: Any, value: list[int]) -> None:
    if row is not None:
        value.append(int(row[0]))


def run_sync(conn: psycopg.Connection[Any], steps: Steps[T]) -> T:
    """Run the body on a sync connection."""
    step, result = _next(steps, None, None)
    while step is not None:
        value: Any = None
        error: BaseException | None = None
        try:
            if isinstance(step, Connection):
                value = conn
            elif isinstance(step, Transaction):
                with conn.transaction():
                    value = run_sync(conn, step.steps)
            elif step.get == "ids":
                with conn.transaction(), conn.cursor() as many:
                    many.executemany(step.query, step.params, returning=True)
                    value = []
                    _ids(many.fetchone(), value)
                    while many.nextset():
                        _ids(many.fetchone(), value)
            else:
                query, params, raw = _statement(step)
                cur: psycopg.Cursor[Any]
                if raw:
                    cur = psycopg.RawCursor(conn).execute(query, params)
                else:
                    cur = conn.execute(query, params)
                rows = cur.fetchall() if step.get in ("all", "one") else None
                value = _value(step.get, cur.rowcount, rows)
        except Exception as exc:  # the body decides: thrown in at its yield
            error = exc
        step, result = _next(steps, value, error)
    return result


async def run_async(conn: psycopg.AsyncConnection[Any], steps: Steps[T]) -> T:
    """Run the body on an async connection (as :func:`run_sync`, awaiting)."""
    step, result = _next(steps, None, None)
    while step is not None:
        value: Any = None
        error: BaseException | None = None
        try:
            if isinstance(step, Connection):
                value = conn
            elif isinstance(step, Transaction):
                async with conn.transaction():
                    value = await run_async(conn, step.steps)
            elif step.get == "ids":
                async with conn.transaction(), conn.cursor() as cur:
                    await cur.executemany(step.query, step.params, returning=True)
                    value = []
                    _ids(await cur.fetchone(), value)
                    while cur.nextset():
                        _ids(await cur.fetchone(), value)
            else:
                query, params, raw = _statement(step)
                acur: psycopg.AsyncCursor[Any]
                if raw:
                    acur = await psycopg.AsyncRawCursor(conn).execute(query, params)
                else:
                    acur = await conn.execute(query, params)
                rows = await acur.fetchall() if step.get in ("all", "one") else None
                value = _value(step.get, acur.rowcount, rows)
        except Exception as exc:  # the body decides: thrown in at its yield
            error = exc
        step, result = _next(steps, value, error)
    return result


def dual(
    body: Callable[P, Steps[T]],
) -> tuple[
    Callable[Concatenate[psycopg.AsyncConnection[Any], P], Coroutine[Any, Any, T]],
    Callable[Concatenate[psycopg.Connection[Any], P], T],
]:
    """The async and the sync face of ``body``: each takes the connection, then ``body``'s
    arguments."""

    async def on_async(
        conn: psycopg.AsyncConnection[Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await run_async(conn, body(*args, **kwargs))

    def on_sync(conn: psycopg.Connection[Any], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(conn, body(*args, **kwargs))

    for face, suffix in ((on_async, ""), (on_sync, "_sync")):
        face.__name__ = face.__qualname__ = body.__name__.removesuffix("_steps") + suffix
        face.__doc__ = body.__doc__
        face.__module__ = body.__module__
    return on_async, on_sync
