"""An older PostgreSQL with an older pgvector, for the tests that the features of a newer one
are detected per server and the older paths keep working (a pytest plugin, loaded by
conftest): the previous releases' embedded server (PostgreSQL 16, pgvector 0.6.2: no halfvec,
no iterative index scans), in a data directory of its own, with a migrated template."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.templates import copy_of, migrated_template

TEMPLATE = "agent_memory_old_template"


@pytest.fixture(scope="session")
def old_pg_server() -> Iterator[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-old-pg-")) / "pgdata"
        server = pgserver.get_server(data_dir, cleanup_mode="delete")
    info = server.get_postmaster_info()
    conn = {"user": "postgres", "host": str(info.socket_dir), "port": info.port}
    with migrated_template(TEMPLATE, conn):
        yield conn
    server.cleanup()


@pytest.fixture
def old_database_url(old_pg_server: dict[str, Any]) -> Iterator[str]:
    """A fresh, migrated database on the older server."""
    with copy_of(TEMPLATE, old_pg_server) as url:
        yield url
