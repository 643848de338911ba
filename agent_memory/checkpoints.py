"""The in-context tier: LangGraph's PostgreSQL checkpointer on the memory's own database.

The checkpointer's tables live in their own schema (``agent_memory_checkpoints`` by default),
reached through the connection's ``search_path``, so one PostgreSQL holds all three tiers:
threads' checkpoints, facts and episodes. Example::

    async with manager.checkpointer() as saver:
        app = manager.graph(agent).compile(checkpointer=saver)
        await app.ainvoke(state, {"configurable": {"thread_id": "t-1"}})
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from agent_memory.errors import ConfigurationError

CHECKPOINT_SCHEMA = "agent_memory_checkpoints"
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# what the savers need of their connections (LangGraph's from_conn_string uses the same)
_SAVER_KWARGS: dict[str, Any] = {
    "autocommit": True,
    "prepare_threshold": 0,
    "row_factory": dict_row,
}


def checkpoint_conninfo(dsn: str, schema: str = CHECKPOINT_SCHEMA) -> str:
    """``dsn`` with its search_path set to ``schema``, where the saver's tables go."""
    if not _NAME.match(schema):
        raise ConfigurationError(
            f"checkpoint schema {schema!r} is not a plain lower-case SQL name ([a-z_][a-z0-9_]*)"
        )
    options = conninfo_to_dict(dsn).get("options") or ""
    return make_conninfo(dsn, options=f"{options} -c search_path={schema}".strip())


def _create_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))


@asynccontextmanager
async def async_checkpointer(
    dsn: str, schema: str = CHECKPOINT_SCHEMA, max_size: int = 4
) -> AsyncIterator[AsyncPostgresSaver]:
    """An ``AsyncPostgresSaver`` on a pool of ``dsn`` in ``schema`` (created and set up)."""
    conninfo = checkpoint_conninfo(dsn, schema)
    await asyncio.to_thread(_create_schema, dsn, schema)
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        conninfo, kwargs=_SAVER_KWARGS, max_size=max_size, open=False
    )
    await pool.open(wait=True)
    try:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        yield saver
    finally:
        await pool.close()


@contextmanager
def checkpointer(
    dsn: str, schema: str = CHECKPOINT_SCHEMA, max_size: int = 4
) -> Iterator[PostgresSaver]:
    """:func:`async_checkpointer` for sync graphs: a ``PostgresSaver``."""
    conninfo = checkpoint_conninfo(dsn, schema)
    _create_schema(dsn, schema)
    with ConnectionPool(conninfo, kwargs=_SAVER_KWARGS, max_size=max_size) as pool:
        saver = PostgresSaver(pool)  # type: ignore[arg-type]
        saver.setup()
        yield saver
