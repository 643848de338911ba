"""The installation's secret for pseudonymous scope keys (:mod:`agent_memory.pseudonyms`).

One row in ``agent_memory.scope_key_secret``, made on first use (32 random bytes, like the
vector tables, with no migration of its own): every process that runs the pipeline (workers on
other machines, the CLI, ``agent-memory serve``) reaches this database, so all of them name a
scope by the same key. The table has no grant to anyone but its owner: tenant roles, and
whoever reads only Prefect's database, cannot compute or reverse a key.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

import psycopg

from agent_memory.db.connection import resolve
from agent_memory.models import Scope
from agent_memory.pseudonyms import Namer, namer
from agent_memory.settings import DatabaseSettings

SELECT = "SELECT secret FROM agent_memory.scope_key_secret WHERE id"
EXISTS = "SELECT to_regclass('agent_memory.scope_key_secret') IS NOT NULL"
# two processes making it at once: the second waits, then finds the first one's row
LOCK = "SELECT pg_advisory_xact_lock(hashtext('agent_memory.scope_key_secret'))"
CREATE = """
CREATE TABLE IF NOT EXISTS agent_memory.scope_key_secret (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    secret     bytea NOT NULL CHECK (length(secret) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
)"""
REVOKE = "REVOKE ALL ON agent_memory.scope_key_secret FROM PUBLIC"
INSERT = "INSERT INTO agent_memory.scope_key_secret (secret) VALUES (%s) ON CONFLICT DO NOTHING"
# the scopes memory holds something about (what a key can be revealed as)
SCOPES = """
SELECT user_id, agent_id, workflow_id FROM agent_memory.episodes
UNION SELECT user_id, agent_id, workflow_id FROM agent_memory.memory_items
UNION SELECT user_id, agent_id, workflow_id FROM agent_memory.consolidation_jobs"""

_cache: dict[str, bytes] = {}
_lock = threading.Lock()


def secret(conn: psycopg.Connection[Any]) -> bytes:
    """The installation's secret, made now if it has none (commits the connection's
    transaction)."""
    row = conn.execute(SELECT).fetchone() if _exists(conn) else None
    if row is None:
        with conn.transaction():
            conn.execute(LOCK)
            conn.execute(CREATE)
            conn.execute(REVOKE)
            conn.execute(INSERT, (secrets.token_bytes(32),))
        row = conn.execute(SELECT).fetchone()
        conn.commit()
    assert row is not None
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


def _exists(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute(EXISTS).fetchone()
    return bool(row and row[0])


def namer_for(settings: DatabaseSettings) -> Namer:
    """How the pipeline names scopes to the orchestrator under ``settings``' database: each
    scope's pseudonymous key."""
    database = resolve(settings)
    return namer(secret_of(database.dsn, int(settings.connect_timeout)))
