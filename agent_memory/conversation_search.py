"""Searching a scope's past conversations by relevance (the episodic tier): on its own
(`ConversationSearch.search_conversations`) and beside an inject's ranking, on a second
pooled connection when one is free, with the scope's own nearest-neighbour index when it has
one. (The search of facts is `agent_memory.fact_search`.)
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from agent_memory import decay as decay_math
from agent_memory.backend import Backend
from agent_memory.db import fusion
from agent_memory.db import snippets as snippet_repo
from agent_memory.db.dual import Steps, run_async, run_sync
from agent_memory.errors import InvalidMessageError
from agent_memory.messages import clean_text
from agent_memory.models import (
    Scope,
    Snippet,
)
from agent_memory.reads import Reads

log = logging.getLogger(__name__)

# the start of a very long message is what relevance is measured against
MAX_QUERY_CHARS = 2000

# how long an inject waits for a second connection to search snippets beside its facts
_SPARE_WAIT_S = 0.001


@dataclass(frozen=True)
class SnippetQuery:
    """One snippet search: its scope, parameters and the question's vector (None: by full
    text alone)."""

    scope: Scope
    params: dict[str, Any]
    vector: list[float] | None


def as_moment(value: datetime | date | None, name: str) -> datetime | None:
    """``value`` as an aware datetime (a date: its start, UTC); a naive datetime is refused."""
    if value is None or (isinstance(value, datetime) and value.tzinfo is not None):
        return value
    if isinstance(value, datetime):
        raise InvalidMessageError(
            f"{name} {value.isoformat()} has no time zone; pass an aware datetime or a date"
        )
    return datetime.combine(value, time(), UTC)


class ConversationSearch:
    """Conversation search over ``backend``'s pools and settings, reading on the replica when
    there is one (``reads``)."""

    def __init__(self, backend: Backend, reads: Reads) -> None:
        self.settings = backend.settings
        self._queries = backend.queries
        self._ann = backend.ann
        self._reads = reads
        self._lock = threading.Lock()
        self._searcher: ThreadPoolExecutor | None = None  # inject_sync's snippet searches

    def close(self) -> None:
        """No more searches beside a sync inject: their threads end."""
        with self._lock:
            searcher = self._searcher
        if searcher is not None:
            searcher.shutdown()

    def steps(self, query: SnippetQuery | None) -> Steps[list[Snippet]]:
        """The snippet search of an inject (none without a query), on its connection."""
        if query is None:
            return []
        try:
            ann = (yield from self._ann.steps("snippets", query.scope)) if query.vector else None
            return (yield from snippet_repo.search_steps(query.params, query.vector, ann))
        except psycopg.Error as exc:  # best effort: the facts are what inject owes
            log.warning("searching past conversations failed: %s", exc)
            return []

    # The snippet search and the fact ranking are independent statements: an inject runs the
    # search on a second pooled connection beside the ranking when one is free at once. It
    # never waits for one: callers that each hold a connection and wait for another could
    # starve the pool, so a busy pool runs both on the caller's connection, one after the other.

    async def beside(
        self, pool: AsyncConnectionPool, query: SnippetQuery | None
    ) -> asyncio.Task[list[Snippet]] | None:
        if query is None:
            return None
        try:
            spare = await pool.getconn(timeout=_SPARE_WAIT_S)
        except PoolTimeout:
            return None

        async def search() -> list[Snippet]:
            try:
                return await run_async(spare, self.steps(query))
            finally:
                await pool.putconn(spare)

        return asyncio.create_task(search())

    def beside_sync(
        self, pool: ConnectionPool, query: SnippetQuery | None
    ) -> Future[list[Snippet]] | None:
        if query is None:
            return None
        try:
            spare = pool.getconn(timeout=_SPARE_WAIT_S)
        except PoolTimeout:
            return None

        def search() -> list[Snippet]:
            try:
                return run_sync(spare, self.steps(query))
            finally:
                pool.putconn(spare)

        try:
            return self._search_threads().submit(search)
        except RuntimeError:  # closing: no thread to run it on
            pool.putconn(spare)
            return None

    def _search_threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._searcher is None:
                self._searcher = ThreadPoolExecutor(
                    max_workers=self.settings.db.pool_max_size,
                    thread_name_prefix="agent-memory-search",
                )
            return self._searcher

    async def search_conversations(
        self,
        scope: Scope,
        query: str,
        *,
        since: datetime | date | None = None,
        until: datetime | date | None = None,
        limit: int = 10,
    ) -> list[Snippet]:
        """The messages of ``scope``'s past conversations most relevant to ``query``, best
        first, each with its speaker and time: by full text, and by meaning once the flows
        have embedded them. ``since``/``until`` bound when they were said ([since, until); a
        date means its start, UTC). Works before consolidation has run.

        Example::

            for s in await manager.search_conversations(scope, "dentist", since=date(2026, 3, 1)):
                print(s.line())
        """
        start, end = as_moment(since, "since"), as_moment(until, "until")
        if start is not None and end is not None and start >= end:
            raise InvalidMessageError(
                f"since {start.isoformat()} is not before until {end.isoformat()}"
            )
        if not 1 <= limit <= 1000:
            raise InvalidMessageError(f"limit {limit} is not between 1 and 1000")
        m = self.settings.memory
        text = clean_text(query[:MAX_QUERY_CHARS])
        if not text.strip():
            return []
        params = snippet_repo.search_params(
            scope,
            text,
            on=decay_math.today(),
            since=start,
            until=end,
            limit=limit,
            candidates=max(m.inject_candidates, limit),
            fusion=fusion.Fusion.of(m),
            replies=m.inject_snippet_replies,
        )
        vector = None
        if self.settings.embedding.active_model is not None:
            vector = await self._queries.embed(text)
            params["model"] = self._queries.model

        async def read(
            _pool: AsyncConnectionPool, conn: psycopg.AsyncConnection[Any], _primary: bool
        ) -> list[Snippet]:
            try:
                ann = await run_async(conn, self._ann.steps("snippets", scope)) if vector else None
                return await snippet_repo.search(conn, params, vector, ann)
            except psycopg.Error as exc:  # e.g. pgvector dropped: full text alone
                if vector is None:
                    raise
                log.warning("searching by meaning failed (%s); by full text alone", exc)
                return await snippet_repo.search(conn, params)

        return (await self._reads.run(read))[0]
