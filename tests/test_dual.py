"""One body, two faces: a database operation written once runs the same on a sync and an async
connection, errors thrown into it where it can handle them."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agent_memory.db.dual import Connection, Run, Steps, Transaction, dual


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
