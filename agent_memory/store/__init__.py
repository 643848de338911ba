"""``AgentMemoryStore``: LangGraph's long-term memory interface (``BaseStore``) over agent-memory.

Agents get it as any store: ``graph.compile(store=store)``, ``create_agent(..., store=store)``,
``get_store()`` in a node, LangMem's memory tools. Namespaces map to scopes by a template
(`agent_memory.store.namespaces`, default ``("memories", "{user_id}")``):

* an item put in a *memory namespace* is a fact of that scope, written at once (no source
  episode: said directly), with the value's ``importance`` (a number in (0, 1]) and ``kind``
  when it gives them. Inject sees it, decay fades it, consolidation reinforces or supersedes
  it. Its text is read from the value, never its JSON: ``content`` (or ``text``, ``memory``,
  ``fact``) when that holds text, else its fields as ``name: text``
  (`agent_memory.fact_text` gives the rule). Putting a new wording supersedes the old
  fact, deleting invalidates it: both are kept as history. The facts consolidation wrote
  appear there too, under keys made from their ids;
* every other item is a JSON document, kept as put; one under a scope's memory namespace
  (``("memories", "alice", "profile")``) belongs to that scope, and export and erasure
  include it.

``search`` with a ``query`` ranks a memory namespace's facts by the project's relevance ranking
(the hybrid of full text and meaning inject uses, `agent_memory.db.recall`) and documents
by full text, best first; the items that do not match follow, the latest updated first, as
every search without a query orders them (as LangGraph's ``PostgresStore`` does). Filters take
``$eq $ne $gt $gte $lt $lte``. TTLs work as ``PostgresStore``'s (`agent_memory.store.ttl`).
Each ``batch`` runs in one transaction: its reads, then its writes. With ``index=``
(LangGraph's ``IndexConfig``), searches rank by vectors instead (`agent_memory.store.index`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langgraph.store.base import (
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from pydantic import ValidationError

from agent_memory.conversation_search import MAX_QUERY_CHARS
from agent_memory.db import fact_edits, store_writes
from agent_memory.db import store as store_repo
from agent_memory.db.dual import Steps, Transaction, run_async, run_sync
from agent_memory.db.facts import upsert_params
from agent_memory.errors import InvalidStoreRequestError
from agent_memory.fact_text import TEXT_FIELDS, check_text, memory_text
from agent_memory.messages import clean_text
from agent_memory.models import FACT_KINDS, Fact
from agent_memory.store import namespaces, reads
from agent_memory.store.host import StoreHost, opener
from agent_memory.store.index import StoreIndex
from agent_memory.store.limits import InvalidStoreNamespaceError, check_key
from agent_memory.store.loop import StoreLoop
from agent_memory.store.namespaces import DEFAULT_TEMPLATE, NamespaceTemplate, check_labels
from agent_memory.store.plan import Plan, Write
from agent_memory.store.ttl import TTLStore, check_ttl
from agent_memory.store.values import check_chars

if TYPE_CHECKING:
    from agent_memory.settings import Settings

__all__ = [
    "DEFAULT_TEMPLATE",
    "TEXT_FIELDS",
    "AgentMemoryStore",
    "NamespaceTemplate",
    "memory_text",
]


class AgentMemoryStore(TTLStore):
    """A LangGraph ``BaseStore`` (sync and async) over agent-memory's database (see the
    module).

    Example::

        manager = MemoryManager.create_sync()
        store = manager.store()            # namespaces ("memories", "{user_id}")
        graph = builder.compile(store=store)
        store.put(("memories", "alice"), "tea", {"content": "Alice drinks green tea"})
        store.search(("memories", "alice"), query="what does alice drink?")
    """

    __slots__ = (
        "_backend",
        "_index",
        "_loop",
        "_owns_manager",
        "embeddings",
        "index_config",
        "manager",
        "template",
    )

    def __init__(
        self,
        manager: StoreHost,
        *,
        namespace: Sequence[str] | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        workflow_id: str | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        """A store over ``manager``'s database. ``namespace``: the memory namespaces'
        template (default: the setting ``store_namespace``); ``user_id``, ``agent_id``,
        ``workflow_id``: the scope parts the template leaves out (None: unset); ``index``:
        a vector index as LangGraph's PostgresStore takes it (`.index`); ``ttl``: as
        ``PostgresStore``'s (`agent_memory.store.ttl`)."""
        self.manager = manager
        self._backend = manager.backend
        memory = self._backend.settings.memory
        self._init_ttl(ttl)
        self.template = NamespaceTemplate(
            namespace if namespace is not None else memory.store_namespace,
            user_id=user_id,
            agent_id=agent_id,
            workflow_id=workflow_id,
            share=memory.share,
        )
        self._owns_manager = False
        self._index = StoreIndex(index) if index else None
        self.index_config = self._index.config if self._index else None
        self.embeddings = self._index.embeddings if self._index else None
        self._loop = StoreLoop(self._abatch_now, self._plan)  # agent_memory.store.loop

    # ---- construction ------------------------------------------------------------------

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str | None = None, *, settings: Settings | None = None, **kwargs: Any
    ) -> Iterator[AgentMemoryStore]:
        """A store on its own manager for the database at ``conn_string`` (None: the
        configured one, the embedded PostgreSQL by default), closed on exit."""
        manager = opener().create_sync(conn_string, settings=settings)
        try:
            store = cls(manager, **kwargs)
            store._owns_manager = True
            yield store
        finally:
            manager.close_sync()

    @classmethod
    @asynccontextmanager
    async def afrom_conn_string(
        cls, conn_string: str | None = None, *, settings: Settings | None = None, **kwargs: Any
    ) -> AsyncIterator[AgentMemoryStore]:
        """`from_conn_string` for async code."""
        manager = await opener().create(conn_string, settings=settings)
        try:
            store = cls(manager, **kwargs)
            store._owns_manager = True
            yield store
        finally:
            await manager.close()

    def setup(self) -> None:
        """Apply the schema's migrations (done already by ``MemoryManager.create``; kept for
        code written for LangGraph's ``PostgresStore``)."""
        from agent_memory.db.pool import setup_schema

        setup_schema(self._backend.database, self._backend.settings.memory)
        if self._index is not None:
            with self._backend.spool().connection() as conn:
                run_sync(conn, self._index.setup_steps())

    async def asetup(self) -> None:
        """`setup` for async code."""
        import asyncio

        await asyncio.to_thread(self.setup)

    # ---- BaseStore ---------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in one transaction: the reads first, then the writes (on the store's
        event loop's thread: ``asyncio.InvalidStateError``, see `.loop`)."""
        ops = list(ops)
        if (sent := self._loop.sync(type(self).__name__, ops)) is not None:
            return sent
        plan = self._plan(ops)
        if self._index is not None:
            self._index.prepare_sync(self._backend, plan)
        for index, text in plan.queries.items():  # none left when the index embedded them
            plan.vectors[index] = self._backend.queries.embed_sync(text)
        with self._backend.spool().connection() as conn:
            return run_sync(conn, self._steps(plan))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` for async code; one operation joins its loop's accumulated batch."""
        return await self._loop.submit(list(ops))

    async def _abatch_now(self, ops: list[Op]) -> list[Result]:
        plan = self._plan(ops)
        if self._index is not None:
            await self._index.aprepare(self._backend, plan)
        for index, text in plan.queries.items():
            plan.vectors[index] = await self._backend.queries.embed(text)
        pool = await self._backend.apool()
        async with pool.connection() as conn:
            return await run_async(conn, self._steps(plan))

    # ---- checking a batch --------------------------------------------------------------

    def _plan(self, ops: Iterable[Op]) -> Plan:
        ops = list(ops)
        plan = Plan(len(ops))
        for index, op in enumerate(ops):
            if isinstance(op, PutOp):
                item = (self._namespace(op.namespace), check_key(op.key))
                plan.writes[item] = Write(op, *self._checked_put(op))
            elif isinstance(op, GetOp):
                self._namespace(op.namespace)
                check_key(op.key)
                plan.reads.append((index, op))
            elif isinstance(op, SearchOp):
                self._check_search(op)
                plan.reads.append((index, op))
                text = self._question(op.query)
                if text and (self._index or self._ranks_by_meaning(tuple(op.namespace_prefix))):
                    plan.queries[index] = text
            elif isinstance(op, ListNamespacesOp):
                namespaces.match_conditions(op)
                plan.reads.append((index, op))
            else:
                raise InvalidStoreRequestError(f"unknown store operation {op!r:.120}")
        return plan

    @staticmethod
    def _namespace(namespace: Any) -> tuple[str, ...]:
        labels = check_labels(namespace)
        if not labels:
            raise InvalidStoreNamespaceError("an item's namespace cannot be empty")
        return labels

    def _checked_put(self, op: PutOp) -> tuple[str | None, dict[str, Any] | None]:
        """Refuse a put that cannot be kept (naming it); its value as JSON text and a memory
        item's fact parameters."""
        where = f"item {op.key!r:.80} of {tuple(op.namespace)!r:.200}"
        check_ttl(op.ttl, where)
        if op.value is None:
            return None, None
        if not isinstance(op.value, Mapping):
            raise InvalidStoreRequestError(
                f"{where}: value {op.value!r:.80} is a {type(op.value).__name__}, not a mapping"
            )
        try:
            encoded = json.dumps(dict(op.value), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidStoreRequestError(f"{where}: value is not JSON ({exc})") from None
        check_chars(where, op.value)
        size = len(encoded.encode("utf-8"))
        limit = self._backend.settings.memory.store_max_value_bytes
        if size > limit:
            raise InvalidStoreRequestError(
                f"{where}: value is {size} bytes of JSON, over the limit of {limit}"
                " (AGENT_MEMORY_STORE_MAX_VALUE_BYTES)"
            )
        scope = self.template.memory_scope(tuple(op.namespace))
        if scope is None:
            return encoded, None
        fact = upsert_params(scope, self._fact(where, op.value), datetime.now(UTC), None)
        return encoded, fact

    def _fact(self, where: str, value: Mapping[str, Any]) -> Fact:
        importance = value.get("importance")
        if isinstance(importance, bool) or not isinstance(importance, (int, float)):
            importance = self._backend.settings.memory.store_importance
        elif not 0 < importance <= 1:
            raise InvalidStoreRequestError(f"{where}: importance {importance!r} is not in (0, 1]")
        kind = value.get("kind")
        try:
            return Fact(
                content=check_text(
                    memory_text(value), f"{where}: its memory", InvalidStoreRequestError
                ),
                importance=float(importance),
                kind=kind if kind in FACT_KINDS else "general",
            )
        except ValidationError as exc:
            problem = exc.errors()[0]
            raise InvalidStoreRequestError(
                f"{where}: its memory cannot be stored: {problem['msg']}"
            ) from None

    def _check_search(self, op: SearchOp) -> None:
        check_labels(op.namespace_prefix, "namespace prefix")
        store_repo.filter_sql(op.filter, "items", {})
        for name in ("limit", "offset"):
            value = getattr(op, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidStoreRequestError(
                    f"search {name} {value!r} is not a whole number >= 0"
                )
        if op.query is not None and not isinstance(op.query, str):
            raise InvalidStoreRequestError(f"search query {op.query!r:.80} is not a string")

    @staticmethod
    def _question(query: str | None) -> str:
        text = clean_text((query or "")[:MAX_QUERY_CHARS])
        return text if text.strip() else ""

    def _ranks_by_meaning(self, prefix: tuple[str, ...]) -> bool:
        return (
            self.template.reading(prefix) is not None
            and self._backend.settings.memory.inject_ranking in ("hybrid", "vector")
            and self._backend.settings.embedding.active_model is not None
        )

    # ---- running a batch ---------------------------------------------------------------

    def _steps(self, plan: Plan) -> Steps[list[Result]]:
        writes = [write.op for write in plan.writes.values()]
        if (
            self._index is None
            and not plan.reads
            and len(writes) == 1
            and writes[0].value is not None
        ):
            # a put alone, without an index, is one statement: a transaction of its own
            return (yield from self._batch_steps(plan))
        result: list[Result] = yield Transaction(self._batch_steps(plan))
        return result

    def _batch_steps(self, plan: Plan) -> Steps[list[Result]]:
        for index, read in plan.reads:
            if isinstance(read, GetOp):
                plan.results[index] = yield from self._get_steps(read)
            elif isinstance(read, SearchOp):
                plan.results[index] = yield from self._search_steps(read, plan.vectors.get(index))
            else:
                plan.results[index] = yield from store_repo.namespaces_steps(
                    self.template.labels,
                    self.template.fields,
                    self.template.fixed,
                    namespaces.match_conditions(read),
                    read.max_depth,
                    read.limit,
                    read.offset,
                    self.template.share != "exact",
                )
        # in key order: two batches that write the same keys lock them in one order
        for (ns, key), (op, value, fact) in sorted(plan.writes.items(), key=lambda w: w[0]):
            scope = self.template.memory_scope(ns)
            if value is None:
                yield from store_writes.delete_steps(ns, key, scope)
                yield from self._forget_level_steps(ns, key)
            elif scope is not None and fact is not None:
                yield from store_writes.put_memory_steps(ns, key, value, scope, fact, op.ttl)
            else:
                owner = self.template.owner(ns)
                yield from store_writes.put_document_steps(ns, key, value, owner, op.ttl)
            if self._index is not None and op.value is not None:
                yield from self._index.write_steps(plan, ns, key)
        return plan.results

    def _forget_level_steps(self, ns: tuple[str, ...], key: str) -> Steps[None]:
        """A delete of the key of a fact of another level that ``ns`` shows (see
        `.namespaces`) forgets that fact at its own level, as the ``forget`` tool does."""
        reading = self.template.reading(ns)
        named = store_repo.fact_of_key(key)
        if reading is not None and reading[1] and named is not None:
            yield from fact_edits.forget_steps(reading[1], named)

    def _get_steps(self, op: GetOp) -> Steps[Item | None]:
        return (yield from reads.get_steps(self.template, op))

    def _search_steps(self, op: SearchOp, vector: list[float] | None) -> Steps[list[SearchItem]]:
        text = self._question(op.query)
        if self._index is not None and text:
            found = yield from self._index.search_steps(op, vector)
            return (yield from reads.facts_after_vectors_steps(self.template, op, found))
        model = self._backend.queries.model if vector is not None else None
        ranking = reads.Ranking(self._backend.settings.memory, model)
        return (yield from reads.search_steps(self.template, ranking, op, text, vector))
