"""Finding the database: ``DATABASE_URL`` when set, otherwise an embedded PostgreSQL.

The embedded server (:mod:`agent_memory.db.embedded`) is a real PostgreSQL 18 with pgvector
0.8 in a data directory, reached over a Unix socket, shared by the processes that open that
directory and stopped when the last of them lets go (:func:`release_embedded` lets go earlier,
for a process that cannot wait for its exit handlers). Its superuser's password is a secret
file in the data directory (:mod:`agent_memory.db.auth`), asked for once tenant mode is used.
Root's default data directory is under /var/lib rather than /root (see
settings.default_data_dir).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from agent_memory.db import auth, embedded
from agent_memory.redact import redact
from agent_memory.settings import DatabaseSettings

log = logging.getLogger(__name__)

_embedded_lock = threading.Lock()
_embedded: dict[str, Any] = {}

# The agent's hot path (inject, search, record, the Store) runs a few statements over and over,
# each written so that one plan serves every scope and question (it reads by primary key, by
# scope and through indexes whatever the parameters are: see fulltext.text_hits, nearest.by_id).
# PostgreSQL would still plan them anew on every call: it keeps a prepared statement's generic
# plan only while that plan's estimated cost is no higher than the custom plans', which an
# estimate blind to the parameters seldom is, and planning a ranking statement costs more than
# running it. Set per session (not in the startup packet), so a DSN's own options stay and a
# pooler that drops startup options does not refuse the connection.
GENERIC_PLANS = "SET plan_cache_mode = force_generic_plan"


def prefer_generic_plans(conn: psycopg.Connection[Any]) -> None:
    """Plan ``conn``'s prepared statements once (see ``GENERIC_PLANS``); autocommit or idle."""
    conn.execute(GENERIC_PLANS)


@dataclass
class Database:
    """A resolved database: its DSN (a secret) and, when embedded, the server handle."""

    dsn: str = field(repr=False)
    embedded: bool
    settings: DatabaseSettings = field(repr=False)

    @property
    def display(self) -> str:
        """Where the database is, safe to print."""
        return redact(self.dsn)

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(
            self.dsn, connect_timeout=int(self.settings.connect_timeout), **kwargs
        )

    async def aconnect(self, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self.dsn, connect_timeout=int(self.settings.connect_timeout), **kwargs
        )

    def _pool_args(self, max_size: int | None) -> dict[str, Any]:
        size = max_size or self.settings.pool_max_size
        return {
            "conninfo": self.dsn,
            "min_size": min(self.settings.pool_min_size, size),
            "max_size": size,
            "open": False,
            "timeout": self.settings.connect_timeout,
            # autocommit: a repository opens a transaction only where it needs one
            "kwargs": {"autocommit": True},
        }

    def _session(self, hot_path: bool, timeout_ms: int | None) -> list[str]:
        """What each new connection of a pool sets for its session."""
        sets = [GENERIC_PLANS] if hot_path and self.settings.generic_plans else []
        if timeout_ms is not None:  # a read replica's statements: a bound the server keeps
            sets.append(f"SET statement_timeout = {int(timeout_ms)}")
        return sets

    def async_pool(
        self,
        *,
        max_size: int | None = None,
        hot_path: bool = False,
        name: str = "agent-memory",
        timeout_ms: int | None = None,
    ) -> AsyncConnectionPool:
        """An unopened async pool (open it with ``await pool.open()`` in the loop that uses it).
        ``hot_path``: the agent's own pool, whose connections plan their prepared statements
        once (``GENERIC_PLANS``) unless ``AGENT_MEMORY_DB_GENERIC_PLANS`` is off;
        ``timeout_ms``: the server cancels a statement that runs longer."""
        sets = self._session(hot_path, timeout_ms)

        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            for statement in sets:
                await conn.execute(statement)

        return AsyncConnectionPool(
            **self._pool_args(max_size), configure=configure if sets else None, name=name
        )

    def sync_pool(
        self,
        *,
        max_size: int | None = None,
        hot_path: bool = False,
        name: str = "agent-memory-sync",
        timeout_ms: int | None = None,
    ) -> ConnectionPool:
        """An unopened pool for sync callers (the arguments as for :meth:`async_pool`)."""
        sets = self._session(hot_path, timeout_ms)

        def configure(conn: psycopg.Connection[Any]) -> None:
            for statement in sets:
                conn.execute(statement)

        return ConnectionPool(
            **self._pool_args(max_size), configure=configure if sets else None, name=name
        )


def resolve(settings: DatabaseSettings) -> Database:
    """The database named by the settings, starting the embedded one if none is named."""
    if settings.url is not None:
        return Database(dsn=settings.url.get_secret_value(), embedded=False, settings=settings)
    return Database(dsn=_embedded_dsn(settings), embedded=True, settings=settings)


def _embedded_dsn(settings: DatabaseSettings) -> str:
    data_dir = settings.data_dir.expanduser().resolve()
    key = str(data_dir)
    with _embedded_lock:
        server = _embedded.get(key)
        started = server is None
        if server is None:
            server = embedded.start(data_dir)
            _embedded[key] = server
        # the superuser's password (agent_memory.db.auth): ignored while the server trusts local
        # connections, asked for once tenant mode has made it ask
        dsn = psycopg.conninfo.make_conninfo(
            str(server.get_uri()), password=auth.owner_secret(data_dir)
        )
        if started:
            _secure_if_tenants(data_dir, dsn)
            with psycopg.connect(dsn, autocommit=True) as conn:
                configure_embedded(conn)
        return dsn


# The embedded server's settings that differ from PostgreSQL's defaults, and why:
# wal_recycle off: a WAL segment a checkpoint releases is deleted, not renamed for reuse with
# its old contents, so an erasure's checkpoint leaves no segment holding the erased text
# (agent_memory.db.vacuum.release_wal; docs/guarantees.md)
EMBEDDED_SETTINGS = {"wal_recycle": "off"}


def configure_embedded(conn: psycopg.Connection[Any]) -> None:
    """Give a server the embedded server's settings (`EMBEDDED_SETTINGS`), kept in its
    ``postgresql.auto.conf``: set and reloaded where they differ, as its superuser."""
    changed = False
    for name, value in EMBEDDED_SETTINGS.items():
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
        if row is None or row[0] != value:
            conn.execute(
                sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )
            changed = True
    if changed:
        conn.execute("SELECT pg_reload_conf()")


def _secure_if_tenants(data_dir: Path, dsn: str) -> None:
    """A data directory with tenant roles that still trusts local connections (made before
    tenant mode asked for passwords) asks for them from this start on."""
    try:
        if not auth.hba_trusts((data_dir / "pg_hba.conf").read_text()):
            return
    except OSError:  # not ours to read: nothing we can change either
        return
    if auth.tenants_exist(dsn):
        auth.secure_embedded(data_dir, dsn)


def secure(database: Database) -> None:
    """Tenant mode on the embedded server: make it ask every role for its password (see
    :mod:`agent_memory.db.auth`); nothing for a server named by ``DATABASE_URL``."""
    if database.embedded:
        data_dir = database.settings.data_dir.expanduser().resolve()
        auth.secure_embedded(data_dir, database.dsn)


def release_embedded() -> None:
    """Let go of the embedded servers this process started: each stops if this process was
    its last user, as at a normal exit (the package's exit handler then finds nothing to do).
    For a process that ends without running its exit handlers, or before they can run."""
    with _embedded_lock:
        servers = list(_embedded.values())
        _embedded.clear()
    for server in servers:
        server.cleanup()  # with cleanup_mode="stop": leave the data, stop if the last user
