"""An older PostgreSQL with an older pgvector, for the tests that the features of a newer one
are detected per server and the older paths keep working (a pytest plugin, loaded by
conftest): the previous releases' embedded server (PostgreSQL 16, pgvector 0.6.2: no halfvec,
no iterative index scans), in a data directory of its own, with a migrated template."""

from __future__ import annotations

import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.janitor import DatabaseJanitor

TEMPLATE = "agent_memory_old_template"


@pytest.fixture(scope="session")
def old_pg_server() -> Iterator[dict[str, Any]]:
    from agent_memory.db.migrations import ensure_decay_policy, migrate
    from agent_memory.decay import DecayPolicy
    from agent_memory.settings import MemorySettings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-old-pg-")) / "pgdata"
        server = pgserver.get_server(data_dir, cleanup_mode="delete")
    info = server.get_postmaster_info()
    conn = {"user": "postgres", "host": str(info.socket_dir), "port": info.port}
    template = DatabaseJanitor(dbname=TEMPLATE, as_template=True, **conn)
    template.init()
    with psycopg.connect(dbname=TEMPLATE, autocommit=True, **conn) as c:
        migrate(c)
        ensure_decay_policy(c, DecayPolicy.of(MemorySettings()))
    yield conn
    template.drop()
    server.cleanup()


@pytest.fixture
def old_database_url(old_pg_server: dict[str, Any]) -> Iterator[str]:
    """A fresh, migrated database on the older server."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with DatabaseJanitor(dbname=name, template_dbname=TEMPLATE, **old_pg_server):
        yield psycopg.conninfo.make_conninfo(
            dbname=name, **{k: str(v) for k, v in old_pg_server.items()}
        )
