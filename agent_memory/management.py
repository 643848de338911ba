"""Managing what memory holds about a person: facts added, corrected and forgotten by hand
(history kept), export (one JSON document) and erasure (one transaction, with a record of it
that keeps no content).
:class:`~agent_memory.manager.MemoryManager` is built on it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
from langchain_core.tools import BaseTool
from psycopg import sql
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from agent_memory.backfill import scope_of_thread, thread_pattern
from agent_memory.checkpoints import CHECKPOINT_SCHEMA
from agent_memory.db import episodes as episode_repo
from agent_memory.db import erasure as erasure_repo
from agent_memory.db import facts as fact_repo
from agent_memory.db import store as store_repo
from agent_memory.db import tenants as tenant_repo
from agent_memory.db.connection import Database, secure
from agent_memory.decay import today
from agent_memory.errors import InvalidFactError, UnknownFactError, UnknownScopeError
from agent_memory.models import Fact, FactKind, MemoryItem, Scope

if TYPE_CHECKING:
    from agent_memory.settings import Settings
    from agent_memory.store import AgentMemoryStore


async def _threads(
    conn: psycopg.AsyncConnection[Any], scope: Scope, schema: str, pattern: str | None
) -> list[str]:
    """The checkpoint threads of ``schema`` that map to ``scope``, as the checkpoint backfill
    maps them (``pattern``; None: a thread id is a ``user_id``)."""
    cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.checkpoints",))
    row = await cur.fetchone()
    if not (row and row[0]):
        return []
    compiled = thread_pattern(pattern)
    query = sql.SQL("SELECT DISTINCT thread_id FROM {}.checkpoints").format(sql.Identifier(schema))
    threads = []
    for (thread,) in await (await conn.execute(query)).fetchall():
        try:
            if scope_of_thread(str(thread), compiled) == scope:
                threads.append(str(thread))
        except ValueError:  # a thread that does not fit the pattern belongs to no scope
            continue
    return threads


class Management:
    """Export and erasure over the manager's pool (the manager provides what is declared
    here)."""

    settings: Settings
    database: Database

    async def _apool(self) -> AsyncConnectionPool:
        raise NotImplementedError

    async def erase(
        self,
        scope: Scope,
        *,
        thread_pattern: str | None = None,
        checkpoint_schema: str = CHECKPOINT_SCHEMA,
    ) -> dict[str, int]:
        """Erase everything memory holds about ``scope``: its episodes, facts (superseded ones
        too) with their sources, vectors, message index, cached model answers, its Store items
        (memories and documents), job rows with
        their errors, failure streak, summaries, decay runs, nearest-neighbour indexes, and the
        checkpoint threads that map to it (as ``agent-memory backfill checkpoints`` maps them:
        ``thread_pattern``, or a thread id as the ``user_id``). One transaction; what stays is
        a record in ``agent_memory.erasures``: when, the SHA-256 of the scope's label, and how
        many rows of each kind went (the counts returned). A scope memory holds nothing about
        raises :class:`UnknownScopeError`, naming it, and writes nothing."""
        pool = await self._apool()
        async with pool.connection() as conn, conn.transaction():
            threads = await _threads(conn, scope, checkpoint_schema, thread_pattern)
            removed = await erasure_repo.erase(conn, scope, checkpoint_schema, threads)
            if not any(removed.values()):
                raise UnknownScopeError(f"memory holds nothing about {scope.label}: not erased")
        return removed

    def store(
        self,
        namespace: tuple[str, ...] | None = None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        workflow_id: str | None = None,
    ) -> AgentMemoryStore:
        """This memory as a LangGraph Store (``graph.compile(store=manager.store())``):
        ``namespace`` the memory namespaces' template (default: the setting
        ``store_namespace``, ``("memories", "{user_id}")``), the other arguments the scope
        parts it leaves out. See :mod:`agent_memory.store`."""
        from agent_memory.store import AgentMemoryStore

        return AgentMemoryStore(
            self,  # type: ignore[arg-type]
            namespace=namespace,
            user_id=user_id,
            agent_id=agent_id,
            workflow_id=workflow_id,
        )

    async def create_tenant(self, scope: Scope) -> str:
        """Tenant mode: the connection URL of a login role that row-level security confines to
        ``scope`` (made now; for a scope that has one, the same role with a new password), for
        agent-facing code: ``MemoryManager.create(url)`` there sees and writes that scope's
        rows only, whatever SQL it runs. This manager (the owner) keeps running the pipeline.
        On the embedded server, the first tenant makes the server ask every role for its
        password (the owner's is kept in the data directory); another server is refused while
        its ``pg_hba.conf`` trusts any connection. The tenant writes Store rows only under its
        scope's memory namespace by the setting ``store_namespace``.
        Raises :class:`ConfigurationError` where the database has no tenant group role."""
        from agent_memory.store.namespaces import NamespaceTemplate

        # the embedded server asks every role for its password from now on
        await asyncio.to_thread(secure, self.database)
        namespace = NamespaceTemplate(self.settings.memory.store_namespace).render(scope)
        pool = await self._apool()
        async with pool.connection() as conn, conn.transaction():
            role, password = await tenant_repo.create(conn, scope, namespace)
            dsn = conn.info.dsn
        params = psycopg.conninfo.conninfo_to_dict(dsn)
        params.update(user=role, password=password)
        return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})

    async def drop_tenant(self, scope: Scope) -> str:
        """Drop ``scope``'s tenant role (its open sessions end); the role's name. A scope with
        none raises :class:`UnknownScopeError`."""
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

    def tools(self) -> list[BaseTool]:
        """``remember``, ``recall`` and ``forget`` as LangChain tools for an agent; their scope
        comes from the run's config (see :mod:`agent_memory.tools`)."""
        from agent_memory.tools import memory_tools

        return memory_tools(self)  # type: ignore[arg-type]

    async def add_fact(
        self, scope: Scope, content: str, *, importance: float = 0.5, kind: FactKind = "general"
    ) -> MemoryItem:
        """Write a fact for ``scope`` now, as said directly (no source episode): a fact it
        already holds, reworded or not, is reinforced instead of copied. The stored fact."""
        fact = _fact(content, importance, kind)
        pool = await self._apool()
        async with pool.connection() as conn, conn.transaction():
            written = await fact_repo.upsert(conn, scope, [fact], datetime.now(UTC), None)
            stored = await fact_repo.get(conn, next(iter(written.ids.values())), today())
        assert stored is not None
        return stored

    async def update_fact(
        self, fact_id: int, content: str, *, importance: float | None = None
    ) -> MemoryItem:
        """Correct a current fact: the new wording becomes a fact of the same scope and kind,
        and the old one is kept, superseded by it (its history). The new fact."""
        pool = await self._apool()
        async with pool.connection() as conn, conn.transaction():
            old = await _current(conn, fact_id)
            scope = Scope(old.user_id, old.agent_id, old.workflow_id)
            fact = _fact(content, old.importance if importance is None else importance, old.kind)
            now = datetime.now(UTC)
            new_id = next(
                iter((await fact_repo.upsert(conn, scope, [fact], now, None)).ids.values())
            )
            if new_id != fact_id:
                await fact_repo.supersede(conn, scope, fact_id, new_id, None, now)
            stored = await fact_repo.get(conn, new_id, today())
        assert stored is not None
        return stored

    async def forget_fact(self, fact_id: int) -> MemoryItem:
        """Invalidate a current fact: inject never returns it again; it is kept, superseded,
        as history (:meth:`erase` removes a scope's facts for good). The forgotten fact."""
        pool = await self._apool()
        async with pool.connection() as conn, conn.transaction():
            old = await _current(conn, fact_id)
            scope = Scope(old.user_id, old.agent_id, old.workflow_id)
            await fact_repo.supersede(conn, scope, fact_id, None, None, datetime.now(UTC))
            stored = await fact_repo.get(conn, fact_id, today())
        assert stored is not None
        return stored

    async def export(self, scope: Scope) -> dict[str, Any]:
        """Everything memory holds about ``scope`` as one JSON-ready document: its facts,
        superseded ones too (their history: since when and until when each was true, what
        replaced it), each with the ids of the episodes it came from (its provenance), its
        episodes with their messages and summaries, oldest first, and the items of its own
        that were put through the Store (``store_items``: namespace, key, value, the fact a
        memory is). A scope memory holds nothing
        about raises :class:`UnknownScopeError`, naming it."""
        pool = await self._apool()
        async with pool.connection() as conn:
            facts = await fact_repo.items(conn, scope, today(), _ALL, history=True)
            episodes = await episode_repo.between(conn, scope, None, None, _ALL)
            sources = await fact_repo.source_ids(conn, [f.id for f in facts])
            stored = await store_repo.of_scope(conn, scope)
        if not facts and not episodes and not stored:
            raise UnknownScopeError(f"memory holds nothing about {scope.label}: nothing to export")
        return {
            "scope": scope.as_dict(),
            "exported_at": datetime.now(UTC).isoformat(),
            "facts": [
                {**f.model_dump(mode="json"), "source_episodes": sources.get(f.id, [])}
                for f in facts
            ],
            "episodes": [e.model_dump(mode="json") for e in episodes],
            "store_items": stored,
        }


# an export holds every row of the scope: no limit a person could exceed
_ALL = 2**62


def _fact(content: str, importance: float, kind: str) -> Fact:
    try:
        return Fact(content=" ".join(content.split()), importance=importance, kind=kind)  # type: ignore[arg-type]
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = problem["loc"][0] if problem["loc"] else "fact"
        raise InvalidFactError(
            f"fact {field} {problem.get('input')!r} cannot be stored: {problem['msg']}"
        ) from None


async def _current(conn: psycopg.AsyncConnection[Any], fact_id: int) -> MemoryItem:
    fact = await fact_repo.get(conn, fact_id, today())
    if fact is None or fact.superseded_at is not None:
        raise UnknownFactError(f"no current fact with id {fact_id}")
    return fact
