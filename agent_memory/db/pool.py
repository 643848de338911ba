"""Opening a database for use: resolve it, bring the schema up to date, open a pool."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

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


class Pools:
    """A database's hot-path pools for one manager: an async pool per event loop (a psycopg
    pool belongs to the loop it was opened in) and one sync pool, each opened on first use.

    ``wait``: opening waits for the first connection (up to the connect timeout), so a
    database that is away fails the first call; without it (a read replica) the caller's own
    wait for a connection is the only one. ``close_timeout``: how long closing waits for the
    pool's workers (one stuck connecting to a server that does not answer is left behind).
    """

    def __init__(
        self,
        database: Database,
        *,
        name: str = "agent-memory",
        wait: bool = True,
        timeout_ms: int | None = None,
        close_timeout: float = 5.0,
    ) -> None:
        self.database = database
        self.closed = False
        self._name, self._wait, self._timeout_ms = name, wait, timeout_ms
        self._close_timeout = close_timeout
        self._async: dict[int, tuple[asyncio.AbstractEventLoop, AsyncConnectionPool]] = {}
        self._sync: ConnectionPool | None = None
        self._lock = threading.Lock()
        self._opening: dict[int, asyncio.Lock] = {}

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this MemoryManager is closed")

    async def apool(self) -> AsyncConnectionPool:
        """The async pool of the running event loop."""
        self._check_open()
        loop = asyncio.get_running_loop()
        entry = self._async.get(id(loop))
        if entry is not None and entry[0] is loop:
            return entry[1]
        with self._lock:  # one creation lock per loop, so concurrent first calls share a pool
            opening = self._opening.setdefault(id(loop), asyncio.Lock())
        async with opening:
            entry = self._async.get(id(loop))
            if entry is not None and entry[0] is loop:
                return entry[1]
            pool = self.database.async_pool(
                hot_path=True, name=self._name, timeout_ms=self._timeout_ms
            )
            await pool.open(wait=self._wait, timeout=self.database.settings.connect_timeout)
            self._async[id(loop)] = (loop, pool)
            return pool

    def spool(self) -> ConnectionPool:
        """The sync pool."""
        self._check_open()
        with self._lock:
            if self._sync is None:
                pool = self.database.sync_pool(
                    hot_path=True, name=f"{self._name}-sync", timeout_ms=self._timeout_ms
                )
                pool.open(wait=self._wait, timeout=self.database.settings.connect_timeout)
                self._sync = pool
            return self._sync

    async def aclose(self) -> None:
        """Close every pool (each async one in its own loop, when that loop still runs)."""
        self.closed = True
        pools, self._async = self._async, {}
        current = asyncio.get_running_loop()
        for loop, pool in pools.values():
            if loop is current:
                await pool.close(timeout=self._close_timeout)
            elif not loop.is_closed():
                asyncio.run_coroutine_threadsafe(pool.close(timeout=self._close_timeout), loop)
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Close the sync pool (for code without an event loop)."""
        self.closed = True
        with self._lock:
            pool, self._sync = self._sync, None
        if pool is not None:
            pool.close(timeout=self._close_timeout)
