"""The installation's secret for pseudonymous scope keys (:mod:`agent_memory.pseudonyms`).

One row in ``agent_memory.scope_salt`` (schema 19: 32 random bytes, also what keys the tags
that name scopes in index predicates): every process that runs the pipeline (workers on other
machines, the CLI, ``agent-memory serve``) reaches this database, so all of them name a scope
by the same key. The table has no grant to anyone but its owner: tenant roles, and whoever
reads only Prefect's database, cannot compute or reverse a key.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from agent_memory.db.connection import resolve
from agent_memory.errors import MigrationError
from agent_memory.models import Scope
from agent_memory.pseudonyms import Namer, namer
from agent_memory.settings import DatabaseSettings

SELECT = "SELECT decode(salt, 'hex') FROM agent_memory.scope_salt"
# the scopes memory holds something about (what a key can be revealed as)
SCOPES = """
SELECT user_id, agent_id, workflow_id FROM agent_memory.episodes
UNION SELECT user_id, agent_id, workflow_id FROM agent_memory.memory_items
UNION SELECT user_id, agent_id, workflow_id FROM agent_memory.consolidation_jobs"""

_cache: dict[str, bytes] = {}
_lock = threading.Lock()


def secret(conn: psycopg.Connection[Any]) -> bytes:
    """The installation's secret (the database must be at schema 19 or later)."""
    try:
        row = conn.execute(SELECT).fetchone()
    except psycopg.errors.UndefinedTable:
        row = None
    if row is None:
        raise MigrationError(
            "the database has no scope secret (schema 19): run `agent-memory migrate`"
        )
    return bytes(row[0])


def secret_of(dsn: str, connect_timeout: int = 10) -> bytes:
    """The secret of the database at ``dsn`` (read once per process: it never changes)."""
    with _lock:
        found = _cache.get(dsn)
    if found is None:
        with psycopg.connect(dsn, connect_timeout=connect_timeout, autocommit=True) as conn:
            found = secret(conn)
        with _lock:
            _cache[dsn] = found
    return found


def scopes(conn: psycopg.Connection[Any]) -> list[Scope]:
    """Every scope memory holds episodes, facts or jobs of."""
    return [Scope(*row) for row in conn.execute(SCOPES).fetchall()]


def namer_for(settings: DatabaseSettings) -> Namer:
    """How the pipeline names scopes to the orchestrator under ``settings``' database: each
    scope's pseudonymous key."""
    database = resolve(settings)
    return namer(secret_of(database.dsn, int(settings.connect_timeout)))
