"""Migrated template databases and fresh copies of them, on any of the session's servers."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
from pytest_postgresql.janitor import DatabaseJanitor


@contextlib.contextmanager
def migrated_template(name: str, conn: dict[str, Any]) -> Iterator[None]:
    """The template database ``name`` on the server ``conn`` names, migrated and with the
    default decay policy, while the block runs; dropped after."""
    from agent_memory.db.migrations import ensure_decay_policy, migrate
    from agent_memory.decay import DecayPolicy
    from agent_memory.settings import MemorySettings

    template = DatabaseJanitor(dbname=name, as_template=True, **conn)
    template.init()
    with psycopg.connect(dbname=name, autocommit=True, **conn) as c:
        migrate(c)
        ensure_decay_policy(c, DecayPolicy.of(MemorySettings()))
    try:
        yield
    finally:
        template.drop()


@contextlib.contextmanager
def copy_of(template: str, conn: dict[str, Any]) -> Iterator[str]:
    """A fresh database copied from ``template``, as a URL, dropped after the block."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with DatabaseJanitor(dbname=name, template_dbname=template, **conn):
        yield psycopg.conninfo.make_conninfo(dbname=name, **{k: str(v) for k, v in conn.items()})
