"""One body, two faces: a database operation written once runs the same on a sync and an async
connection, errors thrown into it where it can handle them."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
import pytest

from agent_memory.db.dual import Connection, Run, Steps, Transaction, dual
from agent_memory.db.native import NATIVE_FROM, native, native_form


def sized(values: list[int]) -> Steps[dict[str, Any]]:
    """Every kind of step: a fetch, a count, one row, a broken statement caught, the
    connection itself, and a transaction that is rolled back by the error inside it."""
    rows = yield Run("SELECT unnest(%s::int[]) ORDER BY 1", (values,))
    yield Run("CREATE TEMP TABLE IF NOT EXISTS dual_t (v int)", None, "none")
    count = yield Run("INSERT INTO dual_t SELECT unnest(%s::int[])", (values,), "count")
    one = yield Run("SELECT count(*) FROM dual_t", None, "one")
    try:
        yield Run("SELECT no_such_column FROM dual_t")
        caught = None
    except psycopg.errors.UndefinedColumn as exc:
        caught = type(exc).__name__
        yield Run("ROLLBACK", None, "none")  # the failed statement ended the transaction
    conn = yield Connection()
    try:
        yield Transaction(broken())
        raised = False
    except psycopg.errors.DivisionByZero:
        raised = True
    return {
        "raised": raised,
        "rows": [r[0] for r in rows],
        "count": count,
        "one": one[0],
        "caught": caught,
        "autocommit": conn.autocommit,
    }


def broken() -> Steps[None]:
    yield Run("SELECT 1 / 0")


run_it, run_it_sync = dual(sized)


def expected() -> dict[str, Any]:
    return {
        "raised": True,
        "rows": [1, 2, 3],
        "count": 3,
        "one": 3,
        "caught": "UndefinedColumn",
        "autocommit": False,
    }


def test_the_sync_face(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        assert run_it_sync(conn, [3, 1, 2]) == expected()
    assert run_it_sync.__name__ == "sized_sync" and run_it.__name__ == "sized"


async def test_the_async_face(database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        assert await run_it(conn, [3, 1, 2]) == expected()


def test_an_error_the_body_does_not_handle_reaches_the_caller(database_url: str) -> None:
    def failing() -> Steps[int]:
        yield Run("SELECT 1 / 0")
        return 1

    _, failing_sync = dual(failing)
    with psycopg.connect(database_url) as conn, pytest.raises(psycopg.errors.DivisionByZero):
        failing_sync(conn)


# ---- errors inside a transaction: the contract in agent_memory.db.dual's docstring ----


def _insert(value: int) -> Steps[None]:
    yield Run("INSERT INTO dual_keys VALUES (%s)", (value,), "none")


def recovering() -> Steps[dict[str, Any]]:
    """In a transaction: a failed statement caught in place leaves the transaction aborted;
    one in a Transaction of its own (a savepoint) leaves it usable."""
    yield Transaction(_insert(1))
    try:
        yield Transaction(_insert(1))  # the key is taken: only the savepoint is rolled back
        savepoint = "inserted"
    except psycopg.errors.UniqueViolation:
        savepoint = "UniqueViolation"
    yield Transaction(_insert(2))  # the outer transaction goes on
    with contextlib.suppress(psycopg.errors.UniqueViolation):  # caught in place
        yield Run("INSERT INTO dual_keys VALUES (1)", None, "none")
    try:
        yield Run("SELECT 1")
        after = "ran"
    except psycopg.errors.InFailedSqlTransaction:
        after = "InFailedSqlTransaction"
    return {"savepoint": savepoint, "after": after}


def outer() -> Steps[Any]:
    yield Run("CREATE TEMP TABLE IF NOT EXISTS dual_keys (k int PRIMARY KEY)", None, "none")
    try:
        result = yield Transaction(recovering())
    except psycopg.errors.InFailedSqlTransaction:
        result = None
    rows = yield Run("SELECT k FROM dual_keys ORDER BY k")
    return result, [r[0] for r in rows]


recover, recover_sync = dual(outer)


def test_inside_a_transaction_only_a_savepoint_recovers_from_an_error(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        got = recover_sync(conn)
    # the body went on after the savepoint, then learned that a statement caught in place
    # aborted the transaction, which rolled back everything in it
    assert got == ({"savepoint": "UniqueViolation", "after": "InFailedSqlTransaction"}, [])


async def test_inside_a_transaction_the_async_face_keeps_the_same_contract(
    database_url: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        got = await recover(conn)
    assert got == ({"savepoint": "UniqueViolation", "after": "InFailedSqlTransaction"}, [])


# ---- long statements: converted to native placeholders once (agent_memory.db.native) ----

# A statement longer than psycopg converts once and caches: a name used twice, a literal %,
# and a comment long enough to pass the limit.
LONG = (
    "SELECT %(a)s::int + %(b)s::int AS sum, %(a)s::int AS a, '100%%' AS pct, "
    "%(words)s::text[] AS words -- " + "x" * NATIVE_FROM
)


def long_steps(params: dict[str, Any]) -> Steps[list[Any]]:
    rows: list[Any] = yield Run(LONG, params)
    return rows


long_run, long_run_sync = dual(long_steps)


def test_a_long_statement_is_converted_once_to_native_placeholders() -> None:
    assert native(LONG) == (
        "SELECT $1::int + $2::int AS sum, $1::int AS a, '100%' AS pct, $3::text[] AS words -- "
        + "x" * NATIVE_FROM,
        ("a", "b", "words"),
    )
    # any other placeholder: psycopg's own conversion, which knows them all
    assert native("SELECT %s, %(a)s") is None
    assert native("SELECT %(a)b") is None
    assert native("SELECT 1 %") is None
    # the values in placeholder order, each once; keys the statement does not name are left
    assert native_form(LONG, {"words": [], "b": 2, "a": 1, "x": 0}) == (native(LONG)[0], [1, 2, []])
    # shorter statements, and positional values, are psycopg's as before
    assert native_form("SELECT %(a)s", {"a": 1}) is None
    assert native_form(LONG, (1, 2, [])) is None


def test_a_long_statement_runs_as_psycopg_runs_it_on_both_faces(database_url: str) -> None:
    params = {"a": 2, "b": 3, "words": ["it's", "50%"], "unused": object()}
    want = [(5, 2, "100%", ["it's", "50%"])]
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute(LONG, params).fetchall() == want  # psycopg's own conversion
        for _ in range(6):  # past psycopg's prepare threshold (5): prepared as before
            assert long_run_sync(conn, params) == want
        prepared = conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ["SELECT $1::int + $2::int AS sum%"],
        ).fetchone()
        assert prepared == (1,)


async def test_a_long_statement_runs_on_the_async_face(database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        assert await long_run(conn, {"a": 1, "b": 1, "words": []}) == [(2, 1, "100%", [])]


def test_a_long_statement_missing_a_value_names_it(database_url: str) -> None:
    with (
        psycopg.connect(database_url) as conn,
        pytest.raises(psycopg.ProgrammingError, match="query parameter missing: words"),
    ):
        long_run_sync(conn, {"a": 1, "b": 2})
