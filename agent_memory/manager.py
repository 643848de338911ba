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
schedules (``agent-memory serve``); `consolidate` and `decay` run the same flows now.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import date
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool

from agent_memory.backend import Backend
from agent_memory.consolidation import RunSummary
from agent_memory.conversation_search import ConversationSearch
from agent_memory.db.connection import Database, resolve
from agent_memory.db.pool import setup_schema
from agent_memory.fact_search import FactSearch
from agent_memory.forwarding import forward
from agent_memory.graph.state import latest_messages, latest_user_text, scope_from
from agent_memory.indexing import Indexing, IndexLater
from agent_memory.inject import Injector
from agent_memory.management import Management
from agent_memory.models import Scope
from agent_memory.reads import Reads
from agent_memory.recording import Recorder
from agent_memory.settings import DatabaseSettings, Settings, settings_in_force
from agent_memory.store import AgentMemoryStore
from agent_memory.store.host import opens
from agent_memory.tools import memory_tools

if TYPE_CHECKING:  # imported when the methods are called
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.graph import StateGraph
    from langgraph.store.base import TTLConfig

log = logging.getLogger(__name__)


class MemoryManager:
    """Persistent memory for LangGraph agents, on PostgreSQL.

    One object for its callers, made of parts over one `agent_memory.backend.Backend`
    (settings, pools, the read replica's, the question embedder): recording
    (`agent_memory.recording`), inject (`agent_memory.inject`), the searches of facts
    and of past conversations (`agent_memory.fact_search`,
    `agent_memory.conversation_search`), indexing (`agent_memory.indexing`) and
    management (`agent_memory.management`); its methods are theirs, forwarded.
    """

    def __init__(self, settings: Settings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self._backend = backend = Backend.open(settings, database)
        # AGENT_MEMORY_READ_DATABASE_URL: where inject and search read (agent_memory.reads)
        reads = Reads(backend)
        self._conversations = ConversationSearch(backend, reads)
        self._injector = Injector(backend, reads, self._conversations)
        self._fact_search = FactSearch(backend, reads)
        self._indexing = Indexing(backend)
        self._later = IndexLater.of(self._indexing, settings.memory.index_after_s)
        self._recorder = Recorder(backend, self._later)
        self._management = Management(backend)
        self.inject_node: RunnableLambda[Any, dict[str, Any]] = RunnableLambda(
            self._inject_sync, afunc=self._inject_async, name="inject_memory"
        )
        self.record_node: RunnableLambda[Any, dict[str, Any]] = RunnableLambda(
            self._record_sync, afunc=self._record_async, name="record_memory"
        )

    @property
    def backend(self) -> Backend:
        """What the parts share: the settings, the database, its pools (and the read
        replica's), the question embedder. For code built on the manager (the Store, the
        tools); an agent needs none of it."""
        return self._backend

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
        backend = manager.backend
        await backend.apool()
        if backend.replica is not None:  # starts connecting, without waiting
            await backend.replica.pools.apool()
        # the first question of the process must not pay for loading the embedding model
        await asyncio.to_thread(backend.queries.warm)
        return manager

    @classmethod
    def create_sync(
        cls,
        database_url: str | None = None,
        *,
        settings: Settings | None = None,
        migrate: bool = True,
    ) -> MemoryManager:
        """`create` for code without an event loop (sync graphs, scripts)."""
        settings = cls._prepare(database_url, settings)
        database = resolve(settings.db)
        if migrate:
            setup_schema(database, settings.memory)
        manager = cls(settings, database)
        manager.backend.queries.warm()
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
        """`checkpointer` for sync graphs (a ``PostgresSaver``)."""
        from agent_memory.checkpoints import checkpointer

        return checkpointer(self.database.dsn, schema)

    async def close(self) -> None:
        """Close the connection pools. The manager cannot be used afterwards."""
        await self._later.stop()  # no drain in the background from now on
        await self._backend.aclose()

    def close_sync(self) -> None:
        self._later.stop_sync()
        self._backend.close()

    async def __aenter__(self) -> MemoryManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- the parts' methods (each documented where it is implemented) -------------------

    record = forward("_recorder", Recorder.record)
    record_many = forward("_recorder", Recorder.record_many)
    record_sync = forward("_recorder", Recorder.record_sync)
    episodes = forward("_recorder", Recorder.episodes)
    facts = forward("_recorder", Recorder.facts)
    inject = forward("_injector", Injector.inject)
    inject_sync = forward("_injector", Injector.inject_sync)
    search = forward("_fact_search", FactSearch.search)
    search_conversations = forward("_conversations", ConversationSearch.search_conversations)
    index_pending = forward("_indexing", Indexing.index_pending)
    index_pending_sync = forward("_indexing", Indexing.index_pending_sync)
    erase = forward("_management", Management.erase)
    erase_user = forward("_management", Management.erase_user)
    erase_scope = forward("_management", Management.erase_scope)
    erase_namespace = forward("_management", Management.erase_namespace)
    erase_left_behind = forward("_management", Management.erase_left_behind)
    create_tenant = forward("_management", Management.create_tenant)
    drop_tenant = forward("_management", Management.drop_tenant)
    tenants = forward("_management", Management.tenants)
    readable_facts = forward("_management", Management.readable_facts)
    readable_fact = forward("_management", Management.readable_fact)
    add_fact = forward("_management", Management.add_fact)
    update_fact = forward("_management", Management.update_fact)
    forget_fact = forward("_management", Management.forget_fact)
    export = forward("_management", Management.export)
    export_user = forward("_management", Management.export_user)

    def store(
        self,
        namespace: tuple[str, ...] | None = None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        workflow_id: str | None = None,
        ttl: TTLConfig | None = None,
    ) -> AgentMemoryStore:
        """This memory as a LangGraph Store (``graph.compile(store=manager.store())``):
        ``namespace`` the memory namespaces' template (default: the setting
        ``store_namespace``, ``("memories", "{user_id}")``), ``ttl`` its items' TTLs (as
        ``PostgresStore``'s), the other arguments the scope parts the template leaves out.
        See `agent_memory.store`."""
        return AgentMemoryStore(
            self,
            namespace=namespace,
            user_id=user_id,
            agent_id=agent_id,
            workflow_id=workflow_id,
            ttl=ttl,
        )

    def tools(self) -> list[BaseTool]:
        """``remember``, ``recall`` and ``forget`` as LangChain tools for an agent; their scope
        comes from the run's config (see `agent_memory.tools`)."""
        return memory_tools(self._backend, self._injector)

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

        With `decay`, the one place the library reaches up to ``agent_memory_flows`` (the
        documented exception of the layer contract); it imports Prefect on first call.
        """
        from agent_memory_flows.api_server import reporting_server
        from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
        from agent_memory_flows.outcome import run_for_summary

        filters: dict[str, Any] = {"scope": scope.as_dict()} if scope else {}
        # the run reads this manager's settings; other managers' runs and the process keep theirs
        with settings_in_force(self.settings):
            async with reporting_server(self.settings.prefect):
                # a run where some scope failed ends Failed in Prefect; here it is a summary
                return await run_for_summary(
                    consolidation_flow, ConsolidationParams(**filters, **params)
                )

    async def decay(
        self, scope: Scope | None = None, *, as_of: date | None = None, **params: Any
    ) -> dict[str, Any]:
        """Run the Prefect decay flow now (all scopes, or just ``scope``)."""
        from agent_memory_flows.api_server import reporting_server
        from agent_memory_flows.decay import DecayParams, decay_flow

        filters: dict[str, Any] = {"scope": scope.as_dict()} if scope else {}
        with settings_in_force(self.settings):
            async with reporting_server(self.settings.prefect):
                result: dict[str, Any] = await decay_flow(
                    DecayParams(**filters, as_of=as_of, **params)
                )
        return result


opens(MemoryManager)  # what AgentMemoryStore.from_conn_string opens (agent_memory.store.host)
