"""A PostgreSQL that asks every role for its password, for the tenant-mode tests (a pytest
plugin, loaded by conftest): the embedded server in a data directory of its own, set up as
tenant mode sets it up for users (:func:`agent_memory.db.connection.secure`), with a migrated
template database. The session's main server keeps trusting local connections, and tenant mode
refuses it."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.janitor import DatabaseJanitor

from tests.templates import migrated_template

TEMPLATE = "agent_memory_tenant_template"


@pytest.fixture(scope="session")
def secure_pg_server(pg_server: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The connection parameters of the owner (the superuser, with its password)."""
    from agent_memory.db import connection
    from agent_memory.settings import DatabaseSettings

    data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-tenant-pg-")) / "pgdata"
    database = connection.resolve(DatabaseSettings(data_dir=data_dir))
    connection.secure(database)
    params = psycopg.conninfo.conninfo_to_dict(database.dsn)
    conn = {
        "user": str(params["user"]),
        "host": str(params["host"]),
        "port": str(params.get("port") or 5432),
        "password": str(params["password"]),
    }
    with migrated_template(TEMPLATE, conn):
        yield conn
    server = connection._embedded.pop(str(data_dir.resolve()), None)
    if server is not None:
        server.cleanup()


def secure_database_url(server: dict[str, Any]) -> Iterator[str]:
    """A fresh, migrated database on ``server`` (a copy of its template), as a URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with DatabaseJanitor(dbname=name, template_dbname=TEMPLATE, **server):
        yield psycopg.conninfo.make_conninfo(dbname=name, **server)
