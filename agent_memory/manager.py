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
import re
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from time import monotonic
from typing import Any, Literal

import psycopg
from langchain_core.runnables import RunnableConfig, RunnableLambda
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from agent_memory import decay as decay_math
from agent_memory.consolidation import RunSummary
from agent_memory.db import embeddings as embedding_repo
from agent_memory.db import episodes as episode_repo
from agent_memory.db import facts as fact_repo
from agent_memory.db import recall as recall_repo
from agent_memory.db import snippets as snippet_repo
from agent_memory.db.connection import Database, resolve
from agent_memory.db.dual import Steps, run_async, run_sync
from agent_memory.db.embeddings import AnnIndex
from agent_memory.db.pool import setup_schema
from agent_memory.embedding import QueryEmbedder
from agent_memory.errors import InvalidMessageError
from agent_memory.graph.state import latest_messages, latest_user_text, scope_from
from agent_memory.messages import clean_text, serialize_messages
from agent_memory.models import (
    Episode,
    FactKind,
    HistoryEntry,
    MemoryItem,
    Scope,
    Snippet,
    WorkingMemoryFrame,
)
from agent_memory.settings import DatabaseSettings, Settings, use_settings

log = logging.getLogger(__name__)

# the start of a very long message is what relevance is measured against
MAX_QUERY_CHARS = 2000

# a scope's HNSW index is looked up again after this long (the flows may have built one), and
# the memory of which scopes have one is cleared past this many
_ANN_RECHECK_S = 60.0
_ANN_KNOWN_MAX = 100_000

# snippets: how many the search returns for the budget to choose from, the longest text one
# may inject (a pasted document is not a memory), and the token estimate
_SNIPPET_CANDIDATES = 50
_SNIPPET_MAX_CHARS = 400
_CHARS_PER_TOKEN = 4

# how long an inject waits for a second connection to search snippets beside its facts
_SPARE_WAIT_S = 0.001


# A question about time or change, for which the facts' dates are worth their tokens.
_ABOUT_TIME = re.compile(
    r"\b(?:when|since|until|how long|what (?:year|month|day|date)|which (?:year|month|day)|"
    r"dates?|ago|before|after|earlier|later|first|last|latest|recent(?:ly)?|previous(?:ly)?|"
    r"still|any ?more|no longer|used to|now|nowadays|these days|current(?:ly)?|changed?|"
    r"moved|switched|new)\b",
    re.I,
)


def _date_phrase(kind: str, since: datetime) -> str:
    """How a prompt says when a fact became true: an event happened on a day, a plan was
    said on one, anything else holds since."""
    day = since.astimezone(UTC).date().isoformat()
    return {"event": f"on {day}", "plan": f"said on {day}"}.get(kind, f"since {day}")


def _words(text: str) -> set[str]:
    """The words that say what a text is about, roughly: those of four letters or more."""
    return {w for w in re.findall(r"\w+", text.lower()) if len(w) > 3}


def _covers(fact: set[str], snippet: set[str]) -> bool:
    """True when a fact says what a snippet says (most of the shorter one's words)."""
    if not fact or not snippet:
        return False
    return len(fact & snippet) >= 0.8 * min(len(fact), len(snippet))


# how far ahead of this machine's clock an episode's time may be (clocks differ a little)
_CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class _SnippetQuery:
    """One snippet search: its scope, parameters and the question's vector (None: by full
    text alone)."""

    scope: Scope
    params: dict[str, Any]
    vector: list[float] | None


@dataclass
class _Recall:
    """How one inject ranks: importance only; by the priors alone (no question); or by
    relevance to the question, by full text, meaning, or both fused."""

    ranking: Literal["importance", "priors", "text", "vector", "hybrid"]
    day: date
    at: datetime  # the moment a used fact's decay clock restarts at
    before: datetime  # history up to here
    params: dict[str, Any] = field(default_factory=dict)
    vector: list[float] | None = None
    dated: bool = False  # the frame says since when each fact is true

    def by_text(self) -> dict[str, Any]:
        """The parameters of the same inject ranked by full text alone (the fallback when the
        ranking by meaning fails)."""
        self.ranking, self.vector = "text", None
        self.params["text"] = self.params.get("question")
        return self.params


def _moment(value: datetime | date | None, name: str) -> datetime | None:
    if value is None or (isinstance(value, datetime) and value.tzinfo is not None):
        return value
    if isinstance(value, datetime):
        raise InvalidMessageError(
            f"{name} {value.isoformat()} has no time zone; pass an aware datetime or a date"
        )
    return datetime.combine(value, time(), UTC)


class MemoryManager:
    """Persistent memory for LangGraph agents, on PostgreSQL."""

    def __init__(self, settings: Settings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self._async_pools: dict[int, tuple[asyncio.AbstractEventLoop, AsyncConnectionPool]] = {}
        self._sync_pool: ConnectionPool | None = None
        self._searcher: ThreadPoolExecutor | None = None  # inject_sync's snippet searches
        self._lock = threading.Lock()
        self._opening: dict[int, asyncio.Lock] = {}
        self._closed = False
        self._queries = QueryEmbedder(settings.embedding, database)
        # which scopes have an HNSW index of their own (see _ann), looked up again after a while
        self._ann_known: dict[tuple[str, Scope, str], tuple[AnnIndex | None, float]] = {}
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

    def graph(self, agent: Any, state_schema: Any = None) -> Any:
        """A ``StateGraph`` wiring ``inject_memory -> agent -> record_memory`` (uncompiled)."""
        from agent_memory.graph.state import MemoryState, memory_graph

        return memory_graph(self.inject_node, agent, self.record_node, state_schema or MemoryState)

    def checkpointer(self, schema: str = "agent_memory_checkpoints") -> Any:
        """The in-context tier on this database: an async context manager giving LangGraph's
        ``AsyncPostgresSaver``, its tables in ``schema``. Compile the graph with it::

            async with manager.checkpointer() as saver:
                app = manager.graph(agent).compile(checkpointer=saver)
        """
        from agent_memory.checkpoints import async_checkpointer

        return async_checkpointer(self.database.dsn, schema)

    def checkpointer_sync(self, schema: str = "agent_memory_checkpoints") -> Any:
        """:meth:`checkpointer` for sync graphs (a ``PostgresSaver``)."""
        from agent_memory.checkpoints import checkpointer

        return checkpointer(self.database.dsn, schema)

    async def close(self) -> None:
        """Close the connection pools. The manager cannot be used afterwards."""
        self._closed = True
        pools, self._async_pools = self._async_pools, {}
        current = asyncio.get_running_loop()
        for loop, pool in pools.values():
            if loop is current:
                await pool.close()
            elif not loop.is_closed():
                asyncio.run_coroutine_threadsafe(pool.close(), loop)
        if self._searcher is not None:
            await asyncio.to_thread(self._searcher.shutdown)
        if self._sync_pool is not None:
            await asyncio.to_thread(self._sync_pool.close)
            self._sync_pool = None

    def close_sync(self) -> None:
        self._closed = True
        if self._searcher is not None:
            self._searcher.shutdown()
        if self._sync_pool is not None:
            self._sync_pool.close()
            self._sync_pool = None

    async def __aenter__(self) -> MemoryManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- pools ---------------------------------------------------------------------------

    async def _apool(self) -> AsyncConnectionPool:
        """The async pool of the running event loop (psycopg pools belong to one loop)."""
        if self._closed:
            raise RuntimeError("this MemoryManager is closed")
        loop = asyncio.get_running_loop()
        entry = self._async_pools.get(id(loop))
        if entry is not None and entry[0] is loop:
            return entry[1]
        with self._lock:  # one creation lock per loop, so concurrent first calls share a pool
            opening = self._opening.setdefault(id(loop), asyncio.Lock())
        async with opening:
            entry = self._async_pools.get(id(loop))
            if entry is not None and entry[0] is loop:
                return entry[1]
            pool = self.database.async_pool()
            await pool.open(wait=True, timeout=self.settings.db.connect_timeout)
            self._async_pools[id(loop)] = (loop, pool)
            return pool

    def _spool(self) -> ConnectionPool:
        if self._closed:
            raise RuntimeError("this MemoryManager is closed")
        with self._lock:
            if self._sync_pool is None:
                pool = self.database.sync_pool()
                pool.open(wait=True, timeout=self.settings.db.connect_timeout)
                self._sync_pool = pool
            return self._sync_pool

    # ---- the library API -----------------------------------------------------------------

    def _plan(self, scope: Scope, query: str | None, on: date | None) -> _Recall:
        """What one inject reads: the day, the ranking and its parameters."""
        m = self.settings.memory
        day = on or decay_math.today()
        # "now" for an inject as of today; the start of the given day otherwise (tests, replays)
        at = datetime.now(UTC) if on is None else datetime.combine(on, time(), UTC)
        before = at if on is None else at + timedelta(days=1)
        dated = m.inject_dates == "always" or (
            m.inject_dates == "auto" and bool(query and _ABOUT_TIME.search(query))
        )
        if m.inject_ranking == "importance":
            return _Recall("importance", day, at, before, {}, dated=dated)
        # a pasted document is not a question: its start says what it is about
        text = clean_text((query or "")[:MAX_QUERY_CHARS])
        params = recall_repo.ranked_params(
            scope,
            text if text.strip() else None,
            on=day,
            min_importance=m.inject_min_importance,
            limit=m.inject_limit,
            candidates=m.inject_candidates,
            priors=(m.inject_weight_importance, m.inject_weight_recency),
            fusion=recall_repo.Fusion.of(m),
        )
        params["question"] = params["text"]
        ranking: Literal["priors", "text"] = "text" if params["text"] else "priors"
        return _Recall(ranking, day, at, before, params, dated=dated)

    def _wants_vector(self, plan: _Recall) -> bool:
        return (
            plan.ranking == "text"
            and self.settings.memory.inject_ranking in ("hybrid", "vector")
            and self.settings.embedding.active_model is not None
        )

    def _by_meaning(self, plan: _Recall, vector: list[float] | None) -> None:
        """Rank by meaning too, once the question has a vector (else by full text alone)."""
        if vector is None:
            return
        plan.vector = vector
        plan.params["model"] = self._queries.model
        if self.settings.memory.inject_ranking == "vector":
            plan.ranking = "vector"
            plan.params["text"] = None  # the full-text side is left out
        else:
            plan.ranking = "hybrid"

    def _snippet_query(self, scope: Scope, plan: _Recall) -> _SnippetQuery | None:
        """What the snippet search of this inject reads; None when it has none to make."""
        m = self.settings.memory
        question = plan.params.get("question")
        if not m.inject_snippets_tokens or not question or plan.ranking == "priors":
            return None
        params = snippet_repo.search_params(
            scope,
            question,
            on=plan.day,
            until=plan.before,
            limit=_SNIPPET_CANDIDATES,
            candidates=m.inject_candidates,
            fusion=recall_repo.Fusion.of(m),
        )
        params["model"] = plan.params.get("model")
        # read now: the fact ranking, running beside the search, may fall back to full text
        return _SnippetQuery(scope, params, plan.vector)

    def _chosen_snippets(self, found: list[Snippet], facts: recall_repo.Ranked) -> list[Snippet]:
        """The best snippets within the token budget, skipping what an injected fact says."""
        budget = self.settings.memory.inject_snippets_tokens * _CHARS_PER_TOKEN
        facts_say = [_words(content) for _, content, _, _ in facts]
        chosen: list[tuple[Snippet, set[str]]] = []
        for snippet in found:
            if len(snippet.content) > _SNIPPET_MAX_CHARS:
                snippet = snippet.model_copy(
                    update={"content": snippet.content[: _SNIPPET_MAX_CHARS - 1] + "\u2026"}
                )
            words = _words(snippet.content)
            # what a fact or a better snippet already says is not worth its tokens again
            if any(_covers(said, words) for said in facts_say):
                continue
            cost = len(snippet.line())
            same = next((i for i, (_, said) in enumerate(chosen) if _covers(said, words)), None)
            if same is not None:
                # the user's own words stand in for another's restatement of them, at its rank
                other = chosen[same][0]
                freed = len(other.line())
                if snippet.speaker == "user" != other.speaker and cost <= budget + freed:
                    budget += freed - cost
                    chosen[same] = (snippet.model_copy(update={"score": other.score}), words)
                continue
            if cost > budget:
                break
            budget -= cost
            chosen.append((snippet, words))
        return [snippet for snippet, _ in chosen]

    def _frame(
        self,
        scope: Scope,
        plan: _Recall,
        rows: recall_repo.Ranked,
        history: list[HistoryEntry],
        snippets: list[Snippet] | None = None,
        dates: dict[int, tuple[FactKind, datetime]] | None = None,
    ) -> WorkingMemoryFrame:
        frame = WorkingMemoryFrame(
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            workflow_id=scope.workflow_id,
            injected_facts=[content for _, content, _, _ in rows],
            fact_ids=[fact_id for fact_id, _, _, _ in rows],
            importances=[round(importance, 6) for _, _, importance, _ in rows],
            ranking=plan.ranking,
            scores=[round(score, 6) for _, _, _, score in rows]
            if plan.ranking != "importance"
            else [],
            history=history,
            snippets=self._chosen_snippets(snippets or [], rows),
            fact_dates=[_date_phrase(*dates[fact_id]) for fact_id, _, _, _ in rows]
            if dates
            else [],
        )
        frame.context = frame.render()
        return frame

    async def inject(
        self, scope: Scope, *, query: str | None = None, on: date | None = None
    ) -> WorkingMemoryFrame:
        """The facts to put in context for ``scope``, and its recent history.

        With ``AGENT_MEMORY_INJECT_RANKING=hybrid`` (the default) the facts most relevant to
        ``query`` (the latest user message) by full text and by meaning, importance and recency
        ordering comparable matches (see :mod:`agent_memory.db.recall`); with no query, the most
        important and recent. With ``importance``, the most important facts whatever is asked.
        ``on``: the day to evaluate decay on (default today).
        """
        plan = self._plan(scope, query, on)
        if self._wants_vector(plan):
            self._by_meaning(plan, await self._queries.embed(plan.params["text"]))
        pool = await self._apool()
        search = self._snippet_query(scope, plan)
        async with pool.connection() as conn:
            beside = await self._search_beside(pool, search)
            try:
                rows, history, dates = await run_async(conn, self._recall_steps(scope, plan, on))
            except BaseException:
                if beside is not None:
                    beside.cancel()
                    with suppress(BaseException):
                        await beside
                raise
            snippets = (
                await beside
                if beside is not None
                else await run_async(conn, self._search_steps(search))
            )
        return self._frame(scope, plan, rows, history, snippets, dates)

    def _recall_steps(
        self, scope: Scope, plan: _Recall, on: date | None
    ) -> Steps[
        tuple[recall_repo.Ranked, list[HistoryEntry], dict[int, tuple[FactKind, datetime]] | None]
    ]:
        """The facts of one inject (ranked, and reinforced as used), its history and dates."""
        m = self.settings.memory
        if plan.ranking == "importance":
            top = yield from fact_repo.top_steps(
                scope, m.inject_min_importance, m.inject_limit, plan.day
            )
            rows = [(i, c, imp, imp) for i, c, imp in top]
        elif plan.vector is not None:
            try:
                ann = yield from self._ann_steps("facts", scope)
                rows = yield from recall_repo.ranked_steps(plan.params, plan.vector, ann)
            except psycopg.Error as exc:  # e.g. pgvector dropped: text relevance instead
                log.warning("ranking by embeddings failed (%s); by full text instead", exc)
                rows = yield from recall_repo.ranked_steps(plan.by_text())
        else:
            rows = yield from recall_repo.ranked_steps(plan.params)
        if m.inject_reinforce and on is None:
            try:
                ids = [r[0] for r in rows]
                yield from recall_repo.refresh_steps(scope, ids, plan.at, m.use_growth)
            except psycopg.Error as exc:  # best effort: the facts were read already
                log.warning("reinforcing the injected facts failed: %s", exc)
        history = (
            (yield from recall_repo.history_steps(scope, m.inject_history, plan.before))
            if m.inject_history
            else []
        )
        dates = (yield from fact_repo.dates_steps([r[0] for r in rows])) if plan.dated else None
        return rows, history, dates

    def inject_sync(
        self, scope: Scope, *, query: str | None = None, on: date | None = None
    ) -> WorkingMemoryFrame:
        """:meth:`inject` for sync code."""
        plan = self._plan(scope, query, on)
        if self._wants_vector(plan):
            self._by_meaning(plan, self._queries.embed_sync(plan.params["text"]))
        pool = self._spool()
        search = self._snippet_query(scope, plan)
        with pool.connection() as conn:
            beside = self._search_beside_sync(pool, search)
            rows, history, dates = run_sync(conn, self._recall_steps(scope, plan, on))
            snippets = (
                beside.result()
                if beside is not None
                else run_sync(conn, self._search_steps(search))
            )
        return self._frame(scope, plan, rows, history, snippets, dates)

    def _ann_cached(
        self, kind: str, scope: Scope
    ) -> tuple[tuple[str, Scope, str], tuple[AnnIndex | None, float] | None]:
        """The scope's HNSW index of ``kind`` as last looked up, None when due a new look."""
        key = (kind, scope, self._queries.model or "")
        known = self._ann_known.get(key)
        return key, known if known is not None and known[1] > monotonic() else None

    def _ann_learned(self, key: tuple[str, Scope, str], ann: AnnIndex | None) -> AnnIndex | None:
        if len(self._ann_known) > _ANN_KNOWN_MAX:
            self._ann_known.clear()
        self._ann_known[key] = (ann, monotonic() + _ANN_RECHECK_S)
        return ann

    def _ann_steps(self, kind: str, scope: Scope) -> Steps[AnnIndex | None]:
        """The scope's own HNSW index of ``kind``, if the flows built one."""
        key, known = self._ann_cached(kind, scope)
        if known is not None:
            return known[0]
        try:
            ann = yield from embedding_repo.ann_index_steps(kind, scope, key[2])
        except psycopg.Error:  # the table is not there (an old schema): compare every vector
            ann = None
        return self._ann_learned(key, ann)

    def _search_steps(self, query: _SnippetQuery | None) -> Steps[list[Snippet]]:
        if query is None:
            return []
        try:
            ann = (yield from self._ann_steps("snippets", query.scope)) if query.vector else None
            return (yield from snippet_repo.search_steps(query.params, query.vector, ann))
        except psycopg.Error as exc:  # best effort: the facts are what inject owes
            log.warning("searching past conversations failed: %s", exc)
            return []

    # The snippet search and the fact ranking are independent statements: an inject runs the
    # search on a second pooled connection beside the ranking when one is free at once. It
    # never waits for one: callers that each hold a connection and wait for another could
    # starve the pool, so a busy pool runs both on the caller's connection, one after the other.

    async def _search_beside(
        self, pool: AsyncConnectionPool, query: _SnippetQuery | None
    ) -> asyncio.Task[list[Snippet]] | None:
        if query is None:
            return None
        try:
            spare = await pool.getconn(timeout=_SPARE_WAIT_S)
        except PoolTimeout:
            return None

        async def search() -> list[Snippet]:
            try:
                return await run_async(spare, self._search_steps(query))
            finally:
                await pool.putconn(spare)

        return asyncio.create_task(search())

    def _search_beside_sync(
        self, pool: ConnectionPool, query: _SnippetQuery | None
    ) -> Future[list[Snippet]] | None:
        if query is None:
            return None
        try:
            spare = pool.getconn(timeout=_SPARE_WAIT_S)
        except PoolTimeout:
            return None

        def search() -> list[Snippet]:
            try:
                return run_sync(spare, self._search_steps(query))
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
        start, end = _moment(since, "since"), _moment(until, "until")
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
            fusion=recall_repo.Fusion.of(m),
        )
        vector = None
        if self.settings.embedding.active_model is not None:
            vector = await self._queries.embed(text)
            params["model"] = self._queries.model
        pool = await self._apool()
        async with pool.connection() as conn:
            try:
                ann = await run_async(conn, self._ann_steps("snippets", scope)) if vector else None
                return await snippet_repo.search(conn, params, vector, ann)
            except psycopg.Error as exc:  # e.g. pgvector dropped: full text alone
                if vector is None:
                    raise
                log.warning("searching by meaning failed (%s); by full text alone", exc)
                return await snippet_repo.search(conn, params)

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
        start, end = _moment(since, "since"), _moment(until, "until")
        if start is not None and end is not None and start >= end:
            raise InvalidMessageError(
                f"since {start.isoformat()} is not before until {end.isoformat()}"
            )
        pool = await self._apool()
        async with pool.connection() as conn:
            return await recall_repo.between(conn, scope, start, end, limit)

    @staticmethod
    def _check_time(occurred_at: datetime | None) -> None:
        if occurred_at is None:
            return
        if occurred_at.tzinfo is None or occurred_at.utcoffset() is None:
            raise InvalidMessageError(
                f"occurred_at {occurred_at.isoformat()} has no time zone; pass an aware datetime"
            )
        if occurred_at > datetime.now(UTC) + _CLOCK_SKEW:
            raise InvalidMessageError(
                f"occurred_at {occurred_at.isoformat()} is in the future; an episode records a "
                "conversation that happened"
            )

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
        and stores nothing.
        """
        if not messages:
            return None
        self._check_time(occurred_at)
        stored, metadata = self._serialize(messages)
        pool = await self._apool()
        async with pool.connection() as conn:
            return await episode_repo.insert(conn, scope, stored, metadata, occurred_at)

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
            return await episode_repo.insert_many(conn, rows)

    def record_sync(
        self, scope: Scope, messages: Sequence[Any], *, occurred_at: datetime | None = None
    ) -> int | None:
        if not messages:
            return None
        self._check_time(occurred_at)
        stored, metadata = self._serialize(messages)
        with self._spool().connection() as conn:
            return episode_repo.insert_sync(conn, scope, stored, metadata, occurred_at)

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
        from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
        from agent_memory_flows.outcome import run_for_summary

        use_settings(self.settings)
        filters: dict[str, Any] = {"scope": scope.as_dict()} if scope else {}
        # a run where some scope failed ends Failed in Prefect; here it is still a summary
        return await run_for_summary(consolidation_flow, ConsolidationParams(**filters, **params))

    async def decay(
        self, scope: Scope | None = None, *, as_of: date | None = None, **params: Any
    ) -> dict[str, Any]:
        """Run the Prefect decay flow now (all scopes, or just ``scope``)."""
        from agent_memory_flows.decay import DecayParams, decay_flow

        use_settings(self.settings)
        filters: dict[str, Any] = {"scope": scope.as_dict()} if scope else {}
        result: dict[str, Any] = await decay_flow(DecayParams(**filters, as_of=as_of, **params))
        return result
