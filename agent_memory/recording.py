"""Recording conversations as episodes (one INSERT each, validated first; their sentences
indexed a moment later, `agent_memory.indexing`), and reading the tiers back as stored: a
scope's episodes between two moments, its facts on a day. A part of
`agent_memory.manager.MemoryManager`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from agent_memory import decay as decay_math
from agent_memory.backend import Backend
from agent_memory.conversation_search import as_moment
from agent_memory.db import episodes as episode_repo
from agent_memory.db import facts as fact_repo
from agent_memory.errors import InvalidMessageError
from agent_memory.indexing import IndexLater
from agent_memory.messages import check_occurred_at, serialize_messages
from agent_memory.models import Episode, MemoryItem, Scope

log = logging.getLogger(__name__)


class Recorder:
    """Records and tier reads over ``backend``'s primary pool; ``later`` indexes what was
    recorded, in the background."""

    def __init__(self, backend: Backend, later: IndexLater) -> None:
        self._backend = backend
        self._later = later

    async def episodes(
        self,
        scope: Scope,
        *,
        since: datetime | date | None = None,
        until: datetime | date | None = None,
        limit: int = 1000,
    ) -> list[Episode]:
        """The episodic tier: the scope's conversations that happened in [since, until),
        oldest first, each with its summary once consolidated. A date means its start (UTC),
        so ``since=tuesday, until=tuesday + timedelta(days=1)`` is "what happened on Tuesday"."""
        start, end = as_moment(since, "since"), as_moment(until, "until")
        if start is not None and end is not None and start >= end:
            raise InvalidMessageError(
                f"since {start.isoformat()} is not before until {end.isoformat()}"
            )
        pool = await self._backend.apool()
        async with pool.connection() as conn:
            return await episode_repo.between(conn, scope, start, end, limit)

    @staticmethod
    def _check_time(occurred_at: datetime | None) -> None:
        if occurred_at is not None:
            check_occurred_at(occurred_at)

    def _serialize(self, messages: Sequence[Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        stored, size, replaced = serialize_messages(
            messages, max_bytes=self._backend.settings.memory.max_episode_bytes
        )
        metadata: dict[str, Any] = {"bytes": size}
        if replaced:
            metadata["replaced"] = replaced
            log.warning(
                "episode text had %s that PostgreSQL cannot store; replaced with U+FFFD",
                " and ".join(replaced),
            )
        return stored, metadata

    async def record(
        self, scope: Scope, messages: Sequence[Any], *, occurred_at: datetime | None = None
    ) -> int | None:
        """Store a conversation as one episode; returns its id (None when there are no messages).

        Everything is validated before the single INSERT, so a bad message raises a clear error
        and stores nothing. Its sentences are indexed a moment later (`index_pending`).
        """
        if not messages:
            return None
        self._check_time(occurred_at)
        stored, metadata = self._serialize(messages)
        pool = await self._backend.apool()
        async with pool.connection() as conn:
            episode_id = await episode_repo.insert(conn, scope, stored, metadata, occurred_at)
        self._later.soon()
        return episode_id

    async def record_many(
        self, conversations: Sequence[tuple[Scope, Sequence[Any], datetime | None]]
    ) -> list[int]:
        """Store several conversations (scope, messages, when or None for now) as episodes in
        one transaction and one round trip: for a server that flushes many agents' sessions at
        once. All are validated first, so one bad conversation stores none; empty ones are
        refused (there is no episode to return an id for)."""
        rows = []
        for i, (scope, messages, occurred_at) in enumerate(conversations):
            if not messages:
                raise InvalidMessageError(f"conversations[{i}] has no messages")
            self._check_time(occurred_at)
            stored, metadata = self._serialize(messages)
            rows.append((scope, stored, metadata, occurred_at))
        if not rows:
            return []
        pool = await self._backend.apool()
        async with pool.connection() as conn:
            ids = await episode_repo.insert_many(conn, rows)
        self._later.soon()
        return ids

    def record_sync(
        self, scope: Scope, messages: Sequence[Any], *, occurred_at: datetime | None = None
    ) -> int | None:
        if not messages:
            return None
        self._check_time(occurred_at)
        stored, metadata = self._serialize(messages)
        with self._backend.spool().connection() as conn:
            episode_id = episode_repo.insert_sync(conn, scope, stored, metadata, occurred_at)
        self._later.soon_sync()
        return episode_id

    async def facts(
        self,
        scope: Scope,
        *,
        on: date | None = None,
        history: bool = False,
        as_of: date | None = None,
    ) -> list[MemoryItem]:
        """A scope's current facts with their importance on ``on`` (today), most important
        first; with ``history``, the facts that were superseded too; with ``as_of``, the facts
        that were true at the end of that day (UTC: said by then and not yet superseded), their
        importance on that day unless ``on`` says otherwise. Facts that decay has purged are
        not remembered on any day."""
        pool = await self._backend.apool()
        day = on or as_of or decay_math.today()
        async with pool.connection() as conn:
            return await fact_repo.items(conn, scope, day, history=history, as_of=as_of)
