"""Opening a database for use: resolve it, bring the schema up to date, open a pool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg_pool import AsyncConnectionPool

from agent_memory.db.connection import Database, resolve
from agent_memory.db.migrations import ensure_decay_policy, migrate, require_current, tenant_scope
from agent_memory.decay import DecayPolicy
from agent_memory.errors import DatabaseUnavailableError
from agent_memory.redact import redact
from agent_memory.settings import MemorySettings, Settings


def setup_schema(database: Database, memory: MemorySettings) -> list[str]:
    """Apply pending migrations and record the decay policy; returns migrations applied."""
    try:
        with database.connect(autocommit=True) as conn:
            if tenant_scope(conn) is not None:
                require_current(conn)  # a tenant may change nothing: the owner migrates
                return []
            applied = migrate(conn)
            ensure_decay_policy(conn, DecayPolicy.of(memory))
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailableError(
            f"cannot reach the database at {database.display}: {redact(str(exc))}"
        ) from None
    return applied


@asynccontextmanager
async def open_pool(
    settings: Settings, *, max_size: int | None = None, setup: bool = True
) -> AsyncIterator[AsyncConnectionPool]:
    """An open async pool on the configured database (schema brought up to date first)."""
    database = resolve(settings.db)
    if setup:
        await asyncio.to_thread(setup_schema, database, settings.memory)
    pool = database.async_pool(max_size=max_size)
    await pool.open(wait=True, timeout=settings.db.connect_timeout)
    try:
        yield pool
    finally:
        await pool.close()
