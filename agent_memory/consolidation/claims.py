"""A run's claims on the scopes it consolidates: one run per scope at a time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg

from agent_memory.db import claims as claim_repo
from agent_memory.db.connection import Database
from agent_memory.models import Scope

# a claim outlives any statement: the server's idle-in-transaction limit must not end it
_NO_IDLE_LIMIT = "SET idle_in_transaction_session_timeout = 0"


class ScopeClaims:
    """One run's claims on scopes: row locks on their claim rows (:mod:`agent_memory.db.claims`),
    each call's scopes held by a transaction of its own on a connection of its own until they
    are released (a run releases what one call claimed together: a group's scopes).

    The connections live no longer than the run, so the locks disappear exactly when the run
    does (finished, crashed or killed), which is how a later run knows a 'running' job is dead.
    If a connection breaks (the database restarted), its claims are gone with it; the next
    claim connects anew. Batches already under way stay safe without their lock: a write marks
    only episodes still pending, so an overlapping run cannot consolidate one twice.
    """

    def __init__(self, database: Database) -> None:
        self.database = database
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        # the connection whose transaction holds each scope claimed, and what each holds
        self._holder: dict[Scope, psycopg.AsyncConnection[Any]] = {}
        self._held: dict[int, set[Scope]] = {}
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, database: Database) -> ScopeClaims:
        return cls(database)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        async with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed and not conn.broken:
                    return conn
        conn = await self.database.aconnect(autocommit=True)
        await conn.execute(_NO_IDLE_LIMIT)
        return conn

    async def claim_each(self, scopes: Sequence[Scope]) -> list[bool]:
        """For each of ``scopes``, True if this run now owns it, False if a live run does; in
        two short round trips."""
        if not scopes:
            return []
        params = claim_repo.columns(scopes)
        conn = await self._connection()
        try:
            await conn.execute(claim_repo.ENSURE, params)  # committed: autocommit
            await conn.execute("BEGIN")
            rows = await (await conn.execute(claim_repo.CLAIM, params)).fetchall()
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.close()
            raise
        owned = [bool(row[0]) for row in rows]
        mine = {scope for scope, ours in zip(scopes, owned, strict=True) if ours}
        if not mine:
            await self._finish(conn)
            return owned
        async with self._lock:
            self._held[id(conn)] = mine
            for scope in mine:
                self._holder[scope] = conn
        return owned

    async def _finish(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """End ``conn``'s transaction (its locks with it) and keep it for the next claim."""
        try:
            await conn.execute("ROLLBACK")
        except psycopg.Error:  # a broken connection has dropped its locks anyway
            with contextlib.suppress(Exception):
                await conn.close()
            return
        async with self._lock:
            self._idle.append(conn)

    async def release_each(self, scopes: Sequence[Scope]) -> None:
        """Let go of ``scopes``; a transaction's locks end once all it holds are released."""
        done: list[psycopg.AsyncConnection[Any]] = []
        async with self._lock:
            for scope in scopes:
                conn = self._holder.pop(scope, None)
                if conn is None:
                    continue
                held = self._held.get(id(conn), set())
                held.discard(scope)
                if not held:
                    self._held.pop(id(conn), None)
                    done.append(conn)
        for conn in done:
            await self._finish(conn)

    async def close(self) -> None:
        async with self._lock:
            conns = [*self._idle, *self._holder.values()]
            self._idle, self._holder, self._held = [], {}, {}
        for conn in {id(c): c for c in conns}.values():
            with contextlib.suppress(Exception):
                await conn.close()
