"""A run's claims on the scopes it consolidates: one run per scope at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import psycopg

from agent_memory.db import claims as claim_repo
from agent_memory.db.connection import Database
from agent_memory.models import Scope


class ScopeClaims:
    """One run's claims on scopes: session advisory locks on a connection of its own.

    The connection lives as long as the run, so the locks disappear exactly when the run does
    (finished, crashed or killed), which is how a later run knows a 'running' job is dead. If
    the connection breaks (the database restarted), the claims are gone with it; the next
    claim reconnects. Batches already under way stay safe without their lock: a write marks
    only episodes still pending, so an overlapping run cannot consolidate one twice.
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any], database: Database) -> None:
        self.conn = conn
        self.database = database
        self._reconnecting = asyncio.Lock()

    @classmethod
    async def open(cls, database: Database) -> ScopeClaims:
        return cls(await database.aconnect(autocommit=True), database)

    async def _execute(self, query: str, params: Sequence[Any]) -> list[Any]:
        conn = self.conn
        try:
            cur = await conn.execute(query, params)
        except psycopg.OperationalError:
            if not conn.broken and not conn.closed:
                raise
            async with self._reconnecting:
                if self.conn is conn:  # the first to notice reconnects, the others reuse it
                    self.conn = await self.database.aconnect(autocommit=True)
            cur = await self.conn.execute(query, params)
        return await cur.fetchall()

    async def _each(self, query: str, scopes: Sequence[Scope]) -> list[bool]:
        """``query`` (an advisory-lock call) for each scope, in one statement, in order."""
        return [bool(row[0]) for row in await self._execute(query, claim_repo.columns(scopes))]

    async def claim(self, scope: Scope) -> bool:
        """True if this run now owns the scope; False if a live run does."""
        return (await self.claim_each([scope]))[0]

    async def claim_each(self, scopes: Sequence[Scope]) -> list[bool]:
        """:meth:`claim` for each of ``scopes``, in one round trip."""
        return await self._each(claim_repo.CLAIM, scopes) if scopes else []

    async def release(self, scope: Scope) -> None:
        await self.release_each([scope])

    async def release_each(self, scopes: Sequence[Scope]) -> None:
        if scopes:
            await self._each(claim_repo.RELEASE, scopes)

    async def close(self) -> None:
        await self.conn.close()
