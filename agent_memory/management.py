"""Managing what memory holds about a person: facts added, corrected and forgotten by hand
(history kept), export (one JSON document), erasure (one transaction, with a record of it
that keeps no content) and tenant roles. A part of
`agent_memory.manager.MemoryManager`."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import psycopg
import psycopg_pool

from agent_memory import erasure as erasing
from agent_memory import export as exporting
from agent_memory.backend import Backend
from agent_memory.checkpoints import CHECKPOINT_SCHEMA, async_checkpointer
from agent_memory.db import facts as fact_repo
from agent_memory.db import tenants as tenant_repo
from agent_memory.db.connection import secure
from agent_memory.db.vacuum import DEFAULT_REWRITE_MAX_BYTES
from agent_memory.decay import today
from agent_memory.erasure import ErasureSummary, Selection
from agent_memory.errors import InvalidStoreRequestError, UnknownFactError, UnknownScopeError
from agent_memory.fact_text import fact_of
from agent_memory.models import FactKind, MemoryItem, Scope
from agent_memory.store.namespaces import NamespaceTemplate


class Management:
    """Export, erasure, tenant roles and facts by hand, over ``backend``'s primary pool."""

    def __init__(self, backend: Backend) -> None:
        self.settings = backend.settings
        self.database = backend.database
        self._backend = backend

    async def _apool(self) -> psycopg_pool.AsyncConnectionPool:
        return await self._backend.apool()

    async def _forget_in_orchestrator(self, scopes: list[Scope]) -> dict[str, int]:
        """Delete what Prefect's database holds of erased ``scopes``; how much of each kind
        went. A documented exception of the layer contract, like ``consolidate``: erasure
        reaches up to ``agent_memory_flows.erasure``, importing Prefect when called."""
        from agent_memory_flows.erasure import forget_in_prefect

        return await forget_in_prefect(scopes, self.settings)

    async def erase(
        self,
        scope: Scope,
        *,
        thread_pattern: str | None = None,
        checkpoint_schema: str = CHECKPOINT_SCHEMA,
        rewrite_max_bytes: int = DEFAULT_REWRITE_MAX_BYTES,
    ) -> dict[str, int]:
        """Erase everything memory holds about exactly ``scope`` (`erase_user` takes
        every scope of a person): its episodes, facts (superseded ones too) with their sources,
        vectors, message index, cached model answers, its Store items (memories and
        documents), job rows with their errors, failure streak, summaries, decay runs,
        nearest-neighbour indexes, and its checkpoint threads (those whose state or
        configuration names the scope, and those whose id maps to it as ``agent-memory
        backfill checkpoints`` maps them: ``thread_pattern``, or a thread id as the
        ``user_id``); and the facts of other levels that its conversations alone support
        (``derived_facts``; see `erase_scope`). One transaction, then the tables are vacuumed
        (see `agent_memory.erasure.erase`); what stays is a record in
        ``agent_memory.erasures``: when, the SHA-256 of the scope's label, and how many rows of
        each kind went (the counts returned, with ``prefect_*``: what went from Prefect's
        database, when one is in use). A scope memory holds nothing about raises
        `UnknownScopeError`, naming it, and writes nothing."""
        summary = await self.erase_scope(
            scope,
            thread_pattern=thread_pattern,
            checkpoint_schema=checkpoint_schema,
            rewrite_max_bytes=rewrite_max_bytes,
        )
        removed = dict(summary.scopes[0].removed)
        removed.update(summary.derived.counts())
        removed.update(summary.orchestrator)
        return removed

    async def erase_scope(
        self,
        scope: Scope,
        *,
        thread_pattern: str | None = None,
        checkpoint_schema: str = CHECKPOINT_SCHEMA,
        rewrite_max_bytes: int = DEFAULT_REWRITE_MAX_BYTES,
        dry_run: bool = False,
    ) -> ErasureSummary:
        """`erase`, returning the whole `ErasureSummary`: with each level's facts learned from
        the scope's conversations (``summary.derived``: gone, kept because other conversations
        or a hand support them, revived). ``dry_run``: what it would do, writing nothing."""
        return await self._erase(
            Selection.of(scope), thread_pattern, checkpoint_schema, rewrite_max_bytes, dry_run
        )

    async def erase_user(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        workflow_id: str | None = None,
        thread_pattern: str | None = None,
        checkpoint_schema: str = CHECKPOINT_SCHEMA,
        rewrite_max_bytes: int = DEFAULT_REWRITE_MAX_BYTES,
        dry_run: bool = False,
    ) -> ErasureSummary:
        """Erase a person: `erase` for every scope whose user is ``user_id`` (whatever
        its agent or workflow; only ``agent_id`` / ``workflow_id``'s where given), with every
        checkpoint thread whose state or configuration names one of them (or whose id maps to
        one), and every fact of any other level that their conversations alone support, in
        one transaction. The summary lists each scope erased with its counts and threads, each
        level's facts learned from those conversations (``derived``: gone, kept, revived) and
        what became of the tables' files. ``dry_run``: the same summary of what it would do,
        writing nothing. A person memory holds nothing about raises `UnknownScopeError`,
        naming them, and writes nothing.

        Example::

            summary = await manager.erase_user("alex")
            [s.scope.label for s in summary.scopes]   # ['user=alex', 'user=alex agent=support']
        """
        return await self._erase(
            Selection.person(user_id, agent_id, workflow_id),
            thread_pattern,
            checkpoint_schema,
            rewrite_max_bytes,
            dry_run,
        )

    async def erase_namespace(
        self,
        namespace: tuple[str, ...],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        workflow_id: str | None = None,
        dry_run: bool = False,
    ) -> ErasureSummary:
        """`erase_scope` of the scope whose Store memory namespace ``namespace`` is, read as
        ``manager.store(user_id=..., agent_id=..., workflow_id=...)`` reads it (the setting
        ``store_namespace``, the other arguments the parts it leaves out): for example
        ``erase_namespace(("memories", "alex"), agent_id="support")`` erases ``(alex,
        support)`` with what its conversations alone taught other levels. A namespace that is
        no scope's memory namespace (a document's, one under a memory namespace) raises
        `InvalidStoreRequestError`, naming it, and erases nothing: delete documents through the
        Store."""
        template = NamespaceTemplate(
            self.settings.memory.store_namespace,
            user_id=user_id,
            agent_id=agent_id,
            workflow_id=workflow_id,
        )
        scope = template.memory_scope(tuple(namespace))
        if scope is None:
            raise InvalidStoreRequestError(
                f"namespace {tuple(namespace)!r} is no scope's memory namespace (template"
                f" {template.labels!r}): not erased"
            )
        return await self.erase_scope(scope, dry_run=dry_run)

    async def erase_left_behind(
        self,
        *,
        checkpoint_schema: str = CHECKPOINT_SCHEMA,
        rewrite_max_bytes: int = DEFAULT_REWRITE_MAX_BYTES,
        dry_run: bool = False,
    ) -> erasing.LeftBehind:
        """Erase the facts an erasure before schema 31 left at another level, with no source
        (`agent_memory.erasure.erase_left_behind`); ``dry_run``: list them, writing nothing."""
        return await erasing.erase_left_behind(
            await self._apool(),
            checkpoint_schema=checkpoint_schema,
            rewrite_max_bytes=rewrite_max_bytes,
            dry_run=dry_run,
        )

    async def _erase(
        self,
        selection: Selection,
        thread_pattern: str | None,
        checkpoint_schema: str,
        rewrite_max_bytes: int,
        dry_run: bool,
    ) -> ErasureSummary:
        summary = await erasing.erase(
            await self._apool(),
            selection,
            thread_pattern=thread_pattern,
            checkpoint_schema=checkpoint_schema,
            rewrite_max_bytes=rewrite_max_bytes,
            dry_run=dry_run,
        )
        if dry_run:
            return summary
        # Prefect's database too, once PostgreSQL has committed
        forgotten = await self._forget_in_orchestrator([s.scope for s in summary.scopes])
        return replace(summary, orchestrator=forgotten)

    async def create_tenant(self, scope: Scope) -> str:
        """Tenant mode: the connection URL of a login role that row-level security confines to
        ``scope`` (made now; for a scope that has one, the same role with a new password), for
        agent-facing code: ``MemoryManager.create(url)`` there sees and writes that scope's
        rows only, whatever SQL it runs. This manager (the owner) keeps running the pipeline.
        On the embedded server, the first tenant makes the server ask every role for its
        password (the owner's is kept in the data directory); another server is refused while
        its ``pg_hba.conf`` trusts any connection. The tenant writes Store rows only under its
        scope's memory namespace by the setting ``store_namespace``. It reads the facts of the
        levels of memory its scope reads under ``share`` (as set now: run this again after
        changing it), and writes its own scope's only.
        Raises `ConfigurationError` where the database has no tenant group role."""
        # the embedded server asks every role for its password from now on
        await asyncio.to_thread(secure, self.database)
        namespace = NamespaceTemplate(self.settings.memory.store_namespace).render(scope)
        pool = await self._apool()
        async with pool.connection() as conn, conn.transaction():
            reads = scope.levels(self.settings.memory.share)
            role, password = await tenant_repo.create(conn, scope, namespace, reads)
            dsn = conn.info.dsn
        params = psycopg.conninfo.conninfo_to_dict(dsn)
        params.update(user=role, password=password)
        return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})

    async def drop_tenant(self, scope: Scope) -> str:
        """Drop ``scope``'s tenant role (its open sessions end); the role's name. A scope with
        none raises `UnknownScopeError`."""
        pool = await self._apool()
        async with pool.connection() as conn, conn.transaction():
            role = await tenant_repo.drop(conn, scope)
        if role is None:
            raise UnknownScopeError(f"{scope.label} has no tenant role")
        return role

    async def tenants(self) -> list[tuple[str, Scope]]:
        """Every tenant role with its scope, oldest first."""
        pool = await self._apool()
        async with pool.connection() as conn:
            return [(role, scope) for role, scope, _ in await tenant_repo.listed(conn)]

    def _readable(self, scope: Scope | None) -> tuple[Scope, ...] | None:
        """The scopes whose facts ``scope`` may change: those it reads (None: any)."""
        return None if scope is None else scope.levels(self.settings.memory.share)

    async def readable_facts(self, scope: Scope) -> list[MemoryItem]:
        """The current facts ``scope`` reads: its own and those of the levels of memory it
        reads (``share``), most important first; each one's level is
        ``filed_under(fact).level``."""
        pool = await self._apool()
        day = today()
        found: list[MemoryItem] = []
        async with pool.connection() as conn:
            for level in scope.levels(self.settings.memory.share):
                found += await fact_repo.items(conn, level, day)
        return sorted(found, key=lambda f: (-f.importance, f.id))

    async def readable_fact(self, scope: Scope, fact_id: int) -> MemoryItem:
        """The current fact ``fact_id`` if ``scope`` reads it (its own, or a level of memory it
        reads); another user's or a sibling scope's raises `UnknownFactError` as a missing
        one does. One read, whatever the scope holds."""
        pool = await self._apool()
        async with pool.connection() as conn:
            return await _current(conn, fact_id, self._readable(scope))

    async def add_fact(
        self, scope: Scope, content: str, *, importance: float = 0.5, kind: FactKind = "general"
    ) -> MemoryItem:
        """Write a fact for ``scope`` now, as said directly (no source episode): a fact it
        already holds, reworded or not, is reinforced instead of copied. The stored fact."""
        fact = fact_of(content, importance, kind)
        pool = await self._apool()
        async with pool.connection() as conn, conn.transaction():
            written = await fact_repo.upsert(conn, scope, [fact], datetime.now(UTC), None)
            stored = await fact_repo.get(conn, next(iter(written.ids.values())), today())
        assert stored is not None
        return stored

    async def update_fact(
        self,
        fact_id: int,
        content: str,
        *,
        importance: float | None = None,
        scope: Scope | None = None,
    ) -> MemoryItem:
        """Correct a current fact: the new wording becomes a fact of the same scope and kind
        (the fact's own level), and the old one is kept, superseded by it (its history). The
        new fact. ``scope``: the fact must be one ``scope`` reads (its own or a level of memory
        it reads under ``share``); another user's or a sibling's is as unknown as none."""
        pool = await self._apool()
        async with pool.connection() as conn, conn.transaction():
            old = await _current(conn, fact_id, self._readable(scope))
            at = filed_under(old)
            fact = fact_of(content, old.importance if importance is None else importance, old.kind)
            now = datetime.now(UTC)
            new_id = next(iter((await fact_repo.upsert(conn, at, [fact], now, None)).ids.values()))
            if new_id != fact_id:
                await fact_repo.supersede(conn, at, fact_id, new_id, None, now)
            stored = await fact_repo.get(conn, new_id, today())
        assert stored is not None
        return stored

    async def forget_fact(self, fact_id: int, *, scope: Scope | None = None) -> MemoryItem:
        """Invalidate a current fact, at its own level: inject never returns it again; it is
        kept, superseded, as history (`erase` removes a scope's facts for good). The
        forgotten fact. ``scope``: as `update_fact`'s."""
        pool = await self._apool()
        async with pool.connection() as conn, conn.transaction():
            old = await _current(conn, fact_id, self._readable(scope))
            now = datetime.now(UTC)
            await fact_repo.supersede(conn, filed_under(old), fact_id, None, None, now)
            stored = await fact_repo.get(conn, fact_id, today())
        assert stored is not None
        return stored

    async def export(self, scope: Scope) -> dict[str, Any]:
        """Everything memory holds about exactly ``scope`` as one JSON-ready document
        (`export_user` covers every scope of a person): its facts, superseded ones too
        (their history: since when and until when each was true, what replaced it), each with
        the ids of the episodes it came from (its provenance), its episodes with their
        messages and summaries, oldest first, and the items of its own that were put through
        the Store (``store_items``: namespace, key, value, the fact a memory is). A scope
        memory holds nothing about raises `UnknownScopeError`, naming it."""
        pool = await self._apool()
        async with pool.connection() as conn:
            document = await exporting.scope_document(conn, scope)
            if document is not None:
                document["derived_facts"] = await exporting.derived_documents(conn, [scope])
        if document is None:
            raise UnknownScopeError(f"memory holds nothing about {scope.label}: nothing to export")
        return document

    async def export_user(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        workflow_id: str | None = None,
        thread_pattern: str | None = None,
        checkpoint_schema: str = CHECKPOINT_SCHEMA,
    ) -> dict[str, Any]:
        """Everything memory holds about a person, over the scopes and threads
        `erase_user` would erase: ``{"user_id", "exported_at", "scopes": [one
        `export` document per scope], "derived_facts": [the facts filed at other levels that
        their conversations taught, each with its ``scope``, ``level``, ``source_episodes`` and
        ``"erasure": "removes"`` or ``"keeps"``], "checkpoint_threads": [{"thread_id", "scope",
        "values": the latest checkpoint's values (messages, working memory...)}]}``. A person
        memory holds nothing about raises `UnknownScopeError`, naming them."""
        selection = Selection.person(user_id, agent_id, workflow_id)
        pool = await self._apool()
        async with pool.connection() as conn:
            threads = await erasing.threads_of(conn, selection, checkpoint_schema, thread_pattern)
            scopes = []
            taken = await erasing.scopes_of(conn, selection, threads.values())
            for scope in taken:
                document = await exporting.scope_document(conn, scope)
                if document is not None:
                    scopes.append(document)
            derived = await exporting.derived_documents(conn, taken)
        thread_documents = []
        if threads:
            async with async_checkpointer(self.database.dsn, checkpoint_schema) as saver:
                thread_documents = await exporting.thread_documents(saver, threads)
        if not scopes and not thread_documents:
            raise UnknownScopeError(
                f"memory holds nothing about {selection.label}: nothing to export"
            )
        return {
            "user_id": user_id,
            "exported_at": datetime.now(UTC).isoformat(),
            "scopes": scopes,
            "derived_facts": derived,
            "checkpoint_threads": thread_documents,
        }


async def _current(
    conn: psycopg.AsyncConnection[Any], fact_id: int, readable: tuple[Scope, ...] | None = None
) -> MemoryItem:
    """The current fact ``fact_id``; filed under one of ``readable`` where it is given (one
    elsewhere is as unknown as a missing one)."""
    fact = await fact_repo.get(conn, fact_id, today())
    if (
        fact is None
        or fact.superseded_at is not None
        or (readable is not None and filed_under(fact) not in readable)
    ):
        raise UnknownFactError(f"no current fact with id {fact_id}")
    return fact


def filed_under(fact: MemoryItem) -> Scope:
    """The scope ``fact`` is filed under (its level: ``filed_under(fact).level``)."""
    return Scope(fact.user_id, fact.agent_id, fact.workflow_id)
