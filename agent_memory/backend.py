"""What the parts of a `agent_memory.manager.MemoryManager` share: its settings, its
database, the primary's connection pools, the read replica's (when
``AGENT_MEMORY_READ_DATABASE_URL`` names one), the embedder of questions on the hot path, and
what is known of each scope's nearest-neighbour indexes.

Each part (inject, the searches, recording, indexing, management, the Store, the tools) takes
a `Backend` in its constructor; none of them knows the manager. Example::

    backend = Backend.open(settings, database)
    pool = await backend.apool()
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from agent_memory.ann_lookup import AnnLookup
from agent_memory.db.connection import Database
from agent_memory.db.pool import Pools
from agent_memory.query_embedding import QueryEmbedder
from agent_memory.replica import Replica
from agent_memory.settings import Settings


@dataclass(eq=False)
class Backend:
    """A manager's settings, database, pools, question embedder and index lookups."""

    settings: Settings
    database: Database
    pools: Pools  # the primary's: every write, and the reads that do not go to a replica
    replica: Replica | None  # AGENT_MEMORY_READ_DATABASE_URL: see agent_memory.replica
    queries: QueryEmbedder
    ann: AnnLookup  # which scopes have an HNSW index of their own

    @classmethod
    def open(cls, settings: Settings, database: Database) -> Backend:
        """The backend of ``database`` under ``settings`` (its pools open on first use)."""
        queries = QueryEmbedder(settings.embedding, database)
        replica = Replica(settings.db) if settings.db.read_url is not None else None
        return cls(settings, database, Pools(database), replica, queries, AnnLookup(queries))

    async def apool(self) -> AsyncConnectionPool:
        """The primary's async pool of the running event loop (psycopg pools belong to one
        loop)."""
        return await self.pools.apool()

    def spool(self) -> ConnectionPool:
        """The primary's pool for sync code."""
        return self.pools.spool()

    @property
    def closed(self) -> bool:
        return self.pools.closed

    async def aclose(self) -> None:
        """Close the primary's pools and the replica's."""
        await self.pools.aclose()
        if self.replica is not None:
            await self.replica.pools.aclose()

    def close(self) -> None:
        self.pools.close()
        if self.replica is not None:
            self.replica.pools.close()
