"""The benchmarks' PostgreSQL: DATABASE_URL when set, else a throwaway embedded server."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Any


def admin_dsn(*, use_database_url: bool = True) -> tuple[str, Any]:
    """A DSN for creating benchmark databases, and the embedded server to clean up (or None)."""
    url = os.environ.get("DATABASE_URL")
    if url and use_database_url:
        return url, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR warning on import
        import pgserver

        server = pgserver.get_server(  # type: ignore[attr-defined]
            Path(tempfile.mkdtemp(prefix="am-bench-")) / "pgdata", cleanup_mode="delete"
        )
    return str(server.get_uri()), server


def fresh_database(admin: str, name: str) -> str:
    """Database ``name`` created anew (an old one is dropped), migrated, with the default decay
    policy; its DSN."""
    import psycopg

    from agent_memory.db.migrations import ensure_decay_policy, migrate
    from agent_memory.decay import DecayPolicy
    from agent_memory.settings import MemorySettings

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    dsn = psycopg.conninfo.make_conninfo(admin, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        ensure_decay_policy(conn, DecayPolicy.of(MemorySettings()))
    return dsn


def drop_database(admin: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
