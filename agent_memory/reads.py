"""Where inject and the searches read: on the read replica while it keeps up (see
`agent_memory.replica`), else on the primary; and the reinforcement an inject read on the
replica writes on the primary afterwards."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import date, datetime
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from agent_memory.backend import Backend
from agent_memory.db import recall as recall_repo
from agent_memory.db.replica import lag, lag_sync
from agent_memory.models import Scope

log = logging.getLogger(__name__)

T = TypeVar("T")

ARead = Callable[[AsyncConnectionPool, psycopg.AsyncConnection[Any], bool], Awaitable[T]]
SRead = Callable[[ConnectionPool, psycopg.Connection[Any], bool], T]


class Reads:
    """Where inject and search read, over ``backend``'s pools. A read is a function of a pool,
    a connection of that pool, and whether it is the primary's; it must write nothing, since it
    may run twice (on the replica, then again on the primary)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._replica = backend.replica
        self._memory = backend.settings.memory

    async def run(self, read: ARead[T]) -> tuple[T, bool]:
        """``read`` on the replica when reads may go there now, else on the primary; its result
        and whether it ran on the primary."""
        replica = self._replica
        route = replica.route() if replica is not None else "primary"
        if replica is not None and route != "primary":
            try:
                async with asyncio.timeout(replica.deadline):
                    pool = await replica.pools.apool()
                    async with pool.connection(timeout=replica.deadline) as conn:
                        if route == "replica" or replica.judge(await lag(conn)):
                            return await read(pool, conn, False), False
            except (psycopg.Error, TimeoutError) as exc:  # PoolTimeout is a psycopg.Error
                replica.failed(exc)
        pool = await self._backend.apool()
        async with pool.connection() as conn:
            return await read(pool, conn, True), True

    def run_sync(self, read: SRead[T]) -> tuple[T, bool]:
        """`run` for sync callers. Their bound on the replica is per statement (the
        server's statement timeout) and on the wait for a connection."""
        replica = self._replica
        route = replica.route() if replica is not None else "primary"
        if replica is not None and route != "primary":
            try:
                pool = replica.pools.spool()
                with pool.connection(timeout=replica.deadline) as conn:
                    if route == "replica" or replica.judge(lag_sync(conn)):
                        return read(pool, conn, False), False
            except psycopg.Error as exc:
                replica.failed(exc)
        primary = self._backend.spool()
        with primary.connection() as conn:
            return read(primary, conn, True), True

    def reinforces(self, on: date | None) -> bool:
        """Whether an inject reinforces the facts it used (not one evaluated on another day)."""
        return self._memory.inject_reinforce and on is None

    async def reinforce(self, scope: Scope, ids: list[int], at: datetime) -> None:
        """After a read on the replica: reinforce the facts it used, on the primary (best
        effort, as when read there: the facts were read already; waiting for a connection at
        most the replica's deadline, so a primary that is away does not hold the answer)."""
        if not ids or self._replica is None:
            return
        try:
            pool = await self._backend.apool()
            async with pool.connection(timeout=self._replica.deadline) as conn:
                await recall_repo.refresh(conn, scope, ids, at, self._memory.use_growth)
        except psycopg.Error as exc:
            log.warning("reinforcing the injected facts failed: %s", exc)

    def reinforce_sync(self, scope: Scope, ids: list[int], at: datetime) -> None:
        if not ids or self._replica is None:
            return
        try:
            with self._backend.spool().connection(timeout=self._replica.deadline) as conn:
                recall_repo.refresh_sync(conn, scope, ids, at, self._memory.use_growth)
        except psycopg.Error as exc:
            log.warning("reinforcing the injected facts failed: %s", exc)
