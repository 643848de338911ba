"""Searching a scope's facts by relevance (`FactSearch.search`), as inject ranks them
but over every current fact, reading on the replica when there is one. (The search of past
conversations is `agent_memory.conversation_search`.)"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from agent_memory import decay as decay_math
from agent_memory.backend import Backend
from agent_memory.conversation_search import MAX_QUERY_CHARS
from agent_memory.db import facts as fact_repo
from agent_memory.db import fusion
from agent_memory.db import level_reads as level_repo
from agent_memory.db import recall as recall_repo
from agent_memory.errors import InvalidMessageError
from agent_memory.messages import clean_text
from agent_memory.models import Scope, ScoredFact
from agent_memory.reads import Reads

log = logging.getLogger(__name__)


class FactSearch:
    """The search of facts over ``backend``'s pools and settings (``reads``: where it reads)."""

    def __init__(self, backend: Backend, reads: Reads) -> None:
        self.settings = backend.settings
        self._queries = backend.queries
        self._reads = reads

    async def search(self, scope: Scope, query: str, *, limit: int = 10) -> list[ScoredFact]:
        """``scope``'s current facts that match ``query`` (and those of the levels of memory it
        reads, AGENT_MEMORY_SHARE), best first, ranked as inject ranks
        them (by full text and by meaning, see `agent_memory.db.recall`) but over every
        current fact, however faded; facts that do not match are left out. Reading them does
        not reinforce them.

        Example::

            for fact in await manager.search(scope, "coffee"):
                print(f"{fact.score:.2f} {fact.content}")
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidMessageError(f"limit {limit!r} is not between 1 and 1000")
        if not isinstance(query, str):
            raise InvalidMessageError(f"query {query!r:.80} is not a string")
        text = clean_text(query[:MAX_QUERY_CHARS])
        if not text.strip():
            return []
        m = self.settings.memory
        vector = None
        if m.inject_ranking in ("hybrid", "vector") and self.settings.embedding.active_model:
            vector = await self._queries.embed(text)
        day = decay_math.today()
        params = fusion.search_params(m, scope, text, limit, by_meaning=vector is not None, on=day)
        if vector is not None:
            params["model"] = self._queries.model
        levels = scope.levels(m.share)

        async def read(
            _pool: AsyncConnectionPool, conn: psycopg.AsyncConnection[Any], _primary: bool
        ) -> list[ScoredFact]:
            try:
                rows = await self._ranked(conn, params, levels, vector)
            except psycopg.Error as exc:  # e.g. pgvector dropped: full text alone
                if vector is None:
                    raise
                log.warning("searching by meaning failed (%s); by full text alone", exc)
                by_text = fusion.search_params(m, scope, text, limit, by_meaning=False, on=day)
                rows = await self._ranked(conn, by_text, levels)
            found = []
            for fact_id, _, _, score in rows:
                fact = await fact_repo.get(conn, fact_id, day) if score > 0 else None
                if fact is not None:
                    found.append(ScoredFact(**fact.model_dump(), score=score))
            return found

        return (await self._reads.run(read))[0]

    @staticmethod
    async def _ranked(
        conn: psycopg.AsyncConnection[Any],
        params: dict[str, Any],
        levels: tuple[Scope, ...],
        vector: list[float] | None = None,
    ) -> recall_repo.Ranked:
        """A search's ranking: of the scope, or of all the levels it reads."""
        if len(levels) == 1:
            return await recall_repo.ranked(conn, params, vector)
        rows, _ = await level_repo.ranked_levels(conn, params, levels, vector)
        return rows
