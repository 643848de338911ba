"""Applying the numbered migrations in ``sql/`` and recording the version.

Position in the ordered list is the version. A migration runs in one transaction together with
the row that records it, under an advisory lock so two processes starting at once do not race.
Every statement is written to be safe to re-run as well.

A *vector migration* (its header holds the line ``-- vector migration``; the first is
sql/0029_vector_tables.sql) makes or changes the pgvector tables, which a server may lack: it
skips what it cannot do, is recorded either way, and :func:`apply_vector_migrations` runs the
applied ones again, in order, once the tables can be made (``agent_memory.db.embeddings.ensure``
calls it). So each such migration conditions its statements on the tables existing.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from agent_memory.decay import DecayPolicy
from agent_memory.errors import MigrationError

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_VECTOR_MARK = re.compile(r"^-- vector migration$", re.MULTILINE)
# any constant works; it only has to be the same in every process
_MIGRATION_LOCK = 0x6167_6D65_6D00

_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS agent_memory;
CREATE TABLE IF NOT EXISTS agent_memory.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def vectors(self) -> bool:
        """Whether this is a vector migration (see the module's docstring)."""
        return _VECTOR_MARK.search(self.sql) is not None


def sql_dir() -> Path:
    """The migrations folder: inside the installed package, or ``sql/`` in a source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "sql", here.parent / "sql"):
        if candidate.is_dir():
            return candidate
    raise MigrationError(f"no sql/ folder with migrations next to {here}")


def load_migrations(folder: Path | None = None) -> list[Migration]:
    """The migrations in order; their numbers must run 1, 2, 3, ... with no gap."""
    folder = folder or sql_dir()
    found: list[Migration] = []
    for path in sorted(folder.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise MigrationError(f"migration file name {path.name!r} is not NNNN_name.sql")
        found.append(Migration(int(match[1]), path.stem, path.read_text(encoding="utf-8")))
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise MigrationError(
                f"migration {migration.name!r} has version {migration.version}, expected {expected}"
            )
    return found


def migrate(
    conn: psycopg.Connection[Any], *, migrations: list[Migration] | None = None
) -> list[str]:
    """Bring the schema up to date; returns the names of the migrations applied now."""
    migrations = migrations if migrations is not None else load_migrations()
    applied: list[str] = []
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(_BOOTSTRAP)
            rows = conn.execute("SELECT version FROM agent_memory.schema_migrations").fetchall()
            done = {int(r[0]) for r in rows}
            for migration in migrations:
                if migration.version in done:
                    continue
                with conn.transaction():
                    conn.execute(migration.sql.encode("utf-8"))
                    conn.execute(
                        "INSERT INTO agent_memory.schema_migrations (version, name)"
                        " VALUES (%s, %s)",
                        (migration.version, migration.name),
                    )
                applied.append(migration.name)
    except psycopg.Error as exc:
        raise MigrationError(f"migration failed: {exc}") from exc
    return applied


def apply_vector_migrations(
    conn: psycopg.Connection[Any], *, migrations: list[Migration] | None = None
) -> list[str]:
    """Run the vector migrations this database has applied again, in order, in one
    transaction under the migration lock (so not beside a migration or another call); the
    names run. Called when the vector tables are missing: pgvector came after migrating, or the
    migrating role could not create it. A migration this database has not applied yet is left
    to :func:`migrate` (it may need the ones before it)."""
    migrations = migrations if migrations is not None else load_migrations()
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        have = current_version(conn)
        ran = [m for m in migrations if m.vectors and m.version <= have]
        for migration in ran:
            conn.execute(migration.sql.encode("utf-8"))
    return [m.name for m in ran]


def tenant_scope(conn: psycopg.Connection[Any]) -> str | None:
    """The scope key the connection's role is confined to (sql/0016_tenants.sql); None when
    it is not a tenant's (or the schema has no tenant mode yet)."""
    # a superuser is a member of every role, the tenants' group too, and schemas before
    # version 28 took it for a tenant of no scope: it is the owner, who migrates
    row = conn.execute(
        "SELECT to_regprocedure('agent_memory.tenant_scope()') IS NOT NULL"
        " AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user)"
    ).fetchone()
    if not row or not row[0]:
        return None
    row = conn.execute("SELECT agent_memory.tenant_scope()").fetchone()
    return None if row is None or row[0] is None else str(row[0])


def require_current(conn: psycopg.Connection[Any]) -> None:
    """Refuse a schema older than this code (for a connection that may not migrate it)."""
    have, want = current_version(conn), len(load_migrations())
    if have < want:
        raise MigrationError(
            f"the schema is at version {have} and this code needs {want}; a tenant's role"
            " cannot migrate it: run the pipeline (or MemoryManager.create) as the owner first"
        )


def current_version(conn: psycopg.Connection[Any]) -> int:
    """The highest applied migration version (0 for an empty database)."""
    row = conn.execute(
        "SELECT to_regclass('agent_memory.schema_migrations') IS NOT NULL"
    ).fetchone()
    if not row or not row[0]:
        return 0
    row = conn.execute(
        "SELECT coalesce(max(version), 0) FROM agent_memory.schema_migrations"
    ).fetchone()
    return int(row[0]) if row else 0


def ensure_decay_policy(conn: psycopg.Connection[Any], policy: DecayPolicy) -> None:
    """Record the decay policy on first setup, and the half-life of any kind the stored one
    lacks (a later change is applied by the decay flow, which rescales the facts).

    Written so it never waits on the row when there is nothing to add: a decay run changing
    the policy holds it.
    """
    conn.execute(
        "INSERT INTO agent_memory.decay_policy (id, factor, purge_below, half_lives)"
        " SELECT true, %(factor)s, %(purge_below)s, %(half_lives)s::jsonb"
        " WHERE NOT EXISTS (SELECT 1 FROM agent_memory.decay_policy)"
        " ON CONFLICT DO NOTHING",
        policy_params(policy),
    )
    conn.execute(
        "UPDATE agent_memory.decay_policy SET half_lives = %(half_lives)s::jsonb || half_lives"
        " WHERE NOT half_lives ?& %(kinds)s",
        policy_params(policy),
    )


def policy_params(policy: DecayPolicy) -> dict[str, Any]:
    general = policy.half_lives["general"]
    return {
        # the daily factor of kind general, kept for the decay_runs log
        "factor": math.exp(-math.log(2) / general),
        "purge_below": policy.purge_below,
        "half_lives": json.dumps(policy.half_lives),
        "kinds": list(policy.half_lives),
    }
