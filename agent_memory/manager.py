"""MemoryManager: the one object an agent needs.

Example::

    manager = await MemoryManager.create()          # DATABASE_URL, or the embedded PostgreSQL
    graph.add_node("inject_memory", manager.inject_node)
    graph.add_node("agent", agent)
    graph.add_node("record_memory", manager.record_node)
    ...
    await manager.consolidate()                      # the Prefect consolidation flow, on demand
    await manager.close()

The nodes work in async graphs (``ainvoke``) and sync graphs (``invoke``): each has an async and
a sync implementation over the same SQL. Consolidation and decay normally run on Prefect
schedules (``agent-memory serve``); :meth:`consolidate` and :meth:`decay` run the same flows now.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig, RunnableLambda
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from agent_memory import decay as decay_math
from agent_memory.consolidation import RunSummary
from agent_memory.db import episodes as episode_repo
from agent_memory.db import facts as fact_repo
from agent_memory.db.ann_indexes import AnnIndex
from agent_memory.db.connection import Database, resolve
from agent_memory.db.pool import Pools, setup_schema
from agent_memory.errors import InvalidMessageError
from agent_memory.graph.state import latest_messages, latest_user_text, scope_from
from agent_memory.indexing import Indexing, IndexLater
from agent_memory.inject import Injector
from agent_memory.management import Management
from agent_memory.messages import check_occurred_at, serialize_messages
from agent_memory.models import Episode, MemoryItem, Scope
from agent_memory.query_embedding import QueryEmbedder
from agent_memory.replica import Replica
from agent_memory.search import as_moment
from agent_memory.settings import DatabaseSettings, Settings, use_settings

if TYPE_CHECKING:  # imported when the methods are called
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.graph import StateGraph

log = logging.getLogger(__name__)


class MemoryManager(Injector, Management, Indexing):
    """Persistent memory for LangGraph agents, on PostgreSQL."""

    def __init__(self, settings: Settings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self._pools = Pools(database)
        # AGENT_MEMORY_READ_DATABASE_URL: where inject and search read (agent_memory.replica)
        self._replica = Replica(settings.db) if settings.db.read_url is not None else None
        self._searcher: ThreadPoolExecutor | None = None  # inject_sync's snippet searches
        self._lock = threading.Lock()
        self._queries = QueryEmbedder(settings.embedding, database)
        # which scopes have an HNSW index of their own (see _ann), looked up again after a while
        self._ann_known: dict[tuple[str, Scope, str], tuple[AnnIndex | None, float]] = {}
        self._later = IndexLater.of(self, settings.memory.index_after_s)  # indexes records
        self.inject_node: RunnableLambda[Any, dict[str, Any]] = RunnableLambda(
            self._inject_sync, afunc=self._inject_async, name="inject_memory"
        )
        self.record_node: RunnableLambda[Any, dict[str, Any]] = RunnableLambda(
            self._record_sync, afunc=self._record_async, name="record_memory"
        )

    # ---- construction ------------------------------------------------------------------

    @classmethod
    def _prepare(cls, database_url: str | None, settings: Settings | None) -> Settings:
        settings = settings or Settings()
        if database_url is not None:
            db = settings.db.model_dump()
            db["url"] = database_url
            settings = settings.model_copy(update={"db": DatabaseSettings(**db)})
        return settings

    @classmethod
    async def create(
        cls,
        database_url: str | None = None,
        *,
        settings: Settings | None = None,
        migrate: bool = True,
    ) -> MemoryManager:
        """Connect (starting the embedded PostgreSQL if no URL is set), migrate the schema, and
        warm up the embedding model, so the first inject pays for neither."""
        settings = cls._prepare(database_url, settings)
        database = await asyncio.to_thread(resolve, settings.db)
        if migrate:
            await asyncio.to_thread(setup_schema, database, settings.memory)
        manager = cls(settings, database)
        await manager._apool()
        if manager._replica is not None:  # starts connecting, without waiting
            await manager._replica.pools.apool()
        # the first question of the process must not pay for loading the embedding model
        await asyncio.to_thread(manager._queries.warm)
        return manager

    @classmethod
    def create_sync(
        cls,
        database_url: str | None = None,
        *,
        settings: Settings | None = None,
        migrate: bool = True,
    ) -> MemoryManager:
        """:meth:`create` for code without an event loop (sync graphs, scripts)."""
        settings = cls._prepare(database_url, settings)
        database = resolve(settings.db)
        if migrate:
            setup_schema(database, settings.memory)
        manager = cls(settings, database)
        manager._queries.warm()
        return manager

    def graph(self, agent: Any, state_schema: Any = None) -> StateGraph[Any]:
        """A ``StateGraph`` wiring ``inject_memory -> agent -> record_memory`` (uncompiled)."""
        from agent_memory.graph.state import MemoryState, memory_graph

        return memory_graph(self.inject_node, agent, self.record_node, state_schema or MemoryState)

    def checkpointer(
        self, schema: str = "agent_memory_checkpoints"
    ) -> AbstractAsyncContextManager[AsyncPostgresSaver]:
        """The in-context tier on this database: an async context manager giving LangGraph's
        ``AsyncPostgresSaver``, its tables in ``schema``. Compile the graph with it::

            async with manager.checkpointer() as saver:
                app = manager.graph(agent).compile(checkpointer=saver)
        """
        from agent_memory.checkpoints import async_checkpointer

        return async_checkpointer(self.database.dsn, schema)

    def checkpointer_sync(
        self, schema: str = "agent_memory_checkpoints"
    ) -> AbstractContextManager[PostgresSaver]:
        """:meth:`checkpointer` for sync graphs (a ``PostgresSaver``)."""
        from agent_memory.checkpoints import checkpointer

        return checkpointer(self.database.dsn, schema)

    async def close(self) -> None:
        """Close the connection pools. The manager cannot be used afterwards."""
        await self._later.stop()  # no drain in the background from now on
        self._pools.closed = True
        if self._searcher is not None:
            await asyncio.to_thread(self._searcher.shutdown)
        await self._pools.aclose()
        if self._replica is not None:
            await self._replica.pools.aclose()

    def close_sync(self) -> None:
        self._later.stop_sync()
        self._pools.closed = True
        if self._searcher is not None:
            self._searcher.shutdown()
        self._pools.close()
        if self._replica is not None:
            self._replica.pools.close()

    @property
    def _closed(self) -> bool:
        return self._pools.closed

    async def __aenter__(self) -> MemoryManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- pools ---------------------------------------------------------------------------

    async def _apool(self) -> AsyncConnectionPool:
        """The primary's async pool of the running event loop (psycopg pools belong to one
        loop): every write, and the reads that do not go to a replica."""
        return await self._pools.apool()

    def _spool(self) -> ConnectionPool:
        return self._pools.spool()

    # ---- the library API (inject and search: agent_memory.inject) -----------------------

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
        pool = await self._apool()
        async with pool.connection() as conn:
            return await episode_repo.between(conn, scope, start, end, limit)

    @staticmethod
    def _check_time(occurred_at: datetime | None) -> None:
        if occurred_at is not None:
            check_occurred_at(occurred_at)

    def _serialize(self, messages: Sequence[Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        stored, size, replaced = serialize_messages(
            messages, max_bytes=self.settings.memory.max_episode_bytes
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
        and stores nothing. Its sentences are indexed a moment later (:meth:`index_pending`).
        """
        if not messages:
            return None
        self._check_time(occurred_at)
        stored, metadata = self._serialize(messages)
        pool = await self._apool()
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
        pool = await self._apool()
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
        with self._spool().connection() as conn:
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
        pool = await self._apool()
        day = on or as_of or decay_math.today()
        async with pool.connection() as conn:
            return await fact_repo.items(conn, scope, day, history=history, as_of=as_of)

    # ---- the nodes -----------------------------------------------------------------------

    @staticmethod
    def _merge(state: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
        return {"working_memory": {**(state.get("working_memory") or {}), **update}}

    def _question(self, state: dict[str, Any]) -> str | None:
        """What relevance is measured against (nothing is read for importance ranking)."""
        if self.settings.memory.inject_ranking == "importance":
            return None
        return latest_user_text(state)

    async def _inject_async(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        frame = await self.inject(scope_from(state, config), query=self._question(state))
        return self._merge(state, frame.model_dump(mode="json"))

    def _inject_sync(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        frame = self.inject_sync(scope_from(state, config), query=self._question(state))
        return self._merge(state, frame.model_dump(mode="json"))

    @staticmethod
    def _unrecorded(state: dict[str, Any]) -> tuple[list[Any], int]:
        """The messages not recorded yet, and the count recorded after this call.

        With a checkpointer, a thread's state (messages and working_memory) carries over from
        turn to turn; recording only what came since the last record keeps every message in
        exactly one episode instead of re-storing the whole thread each turn.
        """
        messages = latest_messages(state)
        done = (state.get("working_memory") or {}).get("recorded_upto", 0)
        start = done if isinstance(done, int) and 0 <= done <= len(messages) else 0
        return messages[start:], len(messages)

    async def _record_async(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        new, upto = self._unrecorded(state)
        episode_id = await self.record(scope_from(state, config), new)
        return self._merge(state, {"recorded_episode_id": episode_id, "recorded_upto": upto})

    def _record_sync(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        new, upto = self._unrecorded(state)
        episode_id = self.record_sync(scope_from(state, config), new)
        return self._merge(state, {"recorded_episode_id": episode_id, "recorded_upto": upto})

    # ---- the flows, on demand ------------------------------------------------------------

    async def consolidate(self, scope: Scope | None = None, **params: Any) -> RunSummary:
        """Run the Prefect consolidation flow now (all pending scopes, or just ``scope``); its
        summary says which scopes failed, if any.

        With :meth:`decay`, the one place the library reaches up to ``agent_memory_flows`` (the
        documented exception of the layer contract); it imports Prefect on first call.
        """
        from agent_memory_flows.api_server import reporting_server
        from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
        from agent_memory_flows.outcome import run_for_summary

        use_settings(self.settings)
        filters: dict[str, Any] = {"scope": scope.as_dict()} if scope else {}
        async with reporting_server(self.settings.prefect):
            # a run where some scope failed ends Failed in Prefect; here it is still a summary
            return await run_for_summary(
                consolidation_flow, ConsolidationParams(**filters, **params)
            )

    async def decay(
        self, scope: Scope | None = None, *, as_of: date | None = None, **params: Any
    ) -> dict[str, Any]:
        """Run the Prefect decay flow now (all scopes, or just ``scope``)."""
        from agent_memory_flows.api_server import reporting_server
        from agent_memory_flows.decay import DecayParams, decay_flow

        use_settings(self.settings)
        filters: dict[str, Any] = {"scope": scope.as_dict()} if scope else {}
        async with reporting_server(self.settings.prefect):
            result: dict[str, Any] = await decay_flow(DecayParams(**filters, as_of=as_of, **params))
        return result
