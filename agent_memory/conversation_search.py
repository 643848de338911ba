"""Searching a scope's past conversations by relevance (the episodic tier): on its own
(`ConversationSearch.search_conversations`) and for an inject, whose search runs in one
statement with its facts' ranking (`agent_memory.db.together`), with the scope's own
nearest-neighbour index when it has one. (The search of facts is `agent_memory.fact_search`.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from agent_memory import decay as decay_math
from agent_memory.backend import Backend
from agent_memory.db import fusion
from agent_memory.db import snippets as snippet_repo
from agent_memory.db.dual import Steps, run_async
from agent_memory.db.recall import Ranking
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

    def ranking_steps(self, query: SnippetQuery) -> Steps[Ranking]:
        """The statement of an inject's snippet search (to run with its facts' ranking)."""
        ann = (yield from self._ann.steps("snippets", query.scope)) if query.vector else None
        return snippet_repo.search_ranking(query.params, query.vector, ann)

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
