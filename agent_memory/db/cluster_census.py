"""What a PostgreSQL cluster holds, counted to compare it before and after an upgrade of the
embedded server's data directory (:mod:`agent_memory.db.embedded_upgrade`), and bringing its
extensions up to the versions the server ships."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from agent_memory.errors import DatabaseUnavailableError


def census(url: str, secret: str | None) -> dict[str, Any]:
    """What a cluster holds, to compare before and after: per database, every table's row
    count, every index and whether it is valid, and the extensions; every role's password
    (as a digest); and what a new cluster must be made like."""
    found: dict[str, Any] = {"databases": {}}
    with psycopg.connect(url, password=secret or "", autocommit=True) as conn:
        found["roles"] = {
            str(name): hashlib.sha256(str(password).encode()).hexdigest()
            for name, password in conn.execute("SELECT rolname, rolpassword FROM pg_authid")
        }
        row = conn.execute(
            """SELECT pg_encoding_to_char(encoding), datcollate, datctype,
                      current_setting('data_checksums')
               FROM pg_database WHERE datname = 'template0'"""
        ).fetchone()
        assert row is not None
        keys = ("encoding", "collate", "ctype", "checksums")
        found["cluster"] = dict(zip(keys, row, strict=True))
        names = [
            str(r[0])
            for r in conn.execute("SELECT datname FROM pg_database WHERE datallowconn ORDER BY 1")
        ]
    for name in names:
        with psycopg.connect(url, dbname=name, password=secret or "", autocommit=True) as conn:
            found["databases"][name] = _database_census(conn)
    return found


def _database_census(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    tables = conn.execute(
        """SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE c.relkind IN ('r', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
             AND n.nspname NOT LIKE 'pg_toast%%' ORDER BY 1, 2"""
    ).fetchall()
    counts = {}
    for schema, table in tables:
        name = sql.Identifier(schema, table)
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(name)).fetchone()
        counts[f"{schema}.{table}"] = int(row[0]) if row else 0
    indexes = {
        f"{schema}.{name}": bool(valid)
        for schema, name, valid in conn.execute(
            """SELECT n.nspname, c.relname, i.indisvalid FROM pg_index i
               JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
                 AND n.nspname NOT LIKE 'pg_toast%%'"""
        )
    }
    return {"tables": counts, "indexes": indexes}


def compare(before: dict[str, Any], after: dict[str, Any], data: Path) -> None:
    """Refuse an upgraded cluster that lost anything the old one held (see :func:`census`)."""
    lost: list[str] = []
    lost += [
        f"role {role} is missing or its password differs"
        for role, password in before["roles"].items()
        if after["roles"].get(role) != password
    ]
    for name, old in before["databases"].items():
        new = after["databases"].get(name)
        if new is None:
            lost.append(f"database {name} is missing")
            continue
        lost += [
            f"{name}: {table} has {new['tables'].get(table)} rows, had {count}"
            for table, count in old["tables"].items()
            if new["tables"].get(table) != count
        ]
        lost += [
            f"{name}: index {index} is missing or invalid"
            for index, valid in old["indexes"].items()
            if valid and not new["indexes"].get(index)
        ]
    if lost:
        raise DatabaseUnavailableError(
            f"the upgrade of {data} was not kept (the old directory is unchanged):"
            f" {'; '.join(lost[:10])}"
        )


def update_extensions(url: str, secret: str | None) -> None:
    """Each database's extensions at the version the new server ships (pgvector's included)."""
    with psycopg.connect(url, password=secret or "", autocommit=True) as conn:
        names = [
            str(r[0]) for r in conn.execute("SELECT datname FROM pg_database WHERE datallowconn")
        ]
    for name in names:
        with psycopg.connect(url, dbname=name, password=secret or "", autocommit=True) as conn:
            for (extension,) in conn.execute(
                """SELECT e.extname FROM pg_extension e
                   JOIN pg_available_extensions a ON a.name = e.extname
                   WHERE e.extversion IS DISTINCT FROM a.default_version"""
            ).fetchall():
                conn.execute(sql.SQL("ALTER EXTENSION {} UPDATE").format(sql.Identifier(extension)))
