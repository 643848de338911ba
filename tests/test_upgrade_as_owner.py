"""A superuser owns the schema and upgrades it, even where tenant mode's group exists (a
superuser is a member of every role, and schemas before version 28 took it for a tenant of no
scope, so an embedded database, whose role is a superuser, could not be upgraded)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager
from agent_memory.db import migrations
from agent_memory.settings import DatabaseSettings, Settings


def test_a_superuser_upgrades_a_database_of_an_older_schema(
    empty_database: psycopg.Connection[Any], settings: Settings
) -> None:
    db = empty_database
    row = db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if not (row and row[0]):
        pytest.skip("the test server's role is not a superuser")
    every = migrations.load_migrations()
    migrations.migrate(db, migrations=every[:27])
    # the tenants' group exists (the migrations made it), so the old definition says ''
    assert db.execute("SELECT agent_memory.tenant_scope()").fetchone() == ("",)
    assert migrations.tenant_scope(db) is None  # the owner, who migrates

    url = db.info.dsn
    app = settings.model_copy(update={"db": DatabaseSettings(url=url, pool_min_size=1)})
    manager = MemoryManager.create_sync(settings=app)
    manager.close_sync()
    assert migrations.current_version(db) == len(every)
    assert db.execute("SELECT agent_memory.tenant_scope()").fetchone() == (None,)
