"""After an erasure: the tables it touched are vacuumed, so that the erased rows leave their
files, not only the live data (see docs/guarantees.md, "What an erasure leaves behind").

A DELETE only marks a row dead; its bytes stay in the table's pages until VACUUM prunes them.
A plain ``VACUUM`` (which reads and writes alongside the application: it takes no lock that
blocks readers or writers) removes the dead rows and their index entries and cuts empty pages
off the table's end, but PostgreSQL does not zero the space it frees inside a page that keeps
other rows: the erased bytes stay there until new rows are written over them. ``VACUUM (FULL)``
writes the table and its indexes anew and drops the old files (at the next checkpoint), which
does remove them, but holds an ACCESS EXCLUSIVE lock on the table meanwhile (readers wait). So
a table up to ``rewrite_max_bytes`` (its size with indexes and TOAST) is rewritten, waiting at
most ``LOCK_TIMEOUT`` for its lock; a larger one, or one whose lock is not granted in time, is
vacuumed, and the result says so. Both also ANALYZE the table, so that the planner's statistics
(sampled values of its columns) are drawn anew from the rows that remain.

Every table of the schemas is vacuumed, not only those the erasure deleted from: a person's
rows may have left a table before (a Store document deleted, a queue drained, a row updated),
and their bytes stay in its pages as long as nothing rewrites them; its statistics may hold
values sampled while they were there.

Then the WAL (`release_wal`): ``pg_switch_wal()`` closes the segment the erasure was written
to and ``CHECKPOINT`` releases every segment before it; the embedded server deletes released
segments rather than keeping them for reuse (``wal_recycle = off``,
agent_memory.db.connection), so none of them holds the erased text afterwards. Both need a
superuser (or ``pg_checkpoint`` and the right to run ``pg_switch_wal``); for any other role the
result says why it was not done.

VACUUM cannot run in a transaction: this runs on an autocommit connection, after the erasure
committed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

# how long a rewrite waits for its table's lock before a plain VACUUM is done instead
LOCK_TIMEOUT = "2s"
# tables up to this size (with indexes and TOAST) are rewritten by default: a few tens of ms
DEFAULT_REWRITE_MAX_BYTES = 8 * 1024 * 1024

SIZE = """
SELECT pg_total_relation_size(c.oid),
       pg_has_role(current_user, c.relowner, 'USAGE')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s AND c.relkind = 'r'
"""


@dataclass
class Vacuumed:
    """What became of the touched tables' files: ``rewritten`` (``VACUUM (FULL)``: no erased
    byte left in their files), ``vacuumed`` (plain ``VACUUM``: erased bytes may remain in free
    space of their pages until overwritten), ``skipped`` (table: why, e.g. not its owner)."""

    rewritten: list[str] = field(default_factory=list)
    vacuumed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    # the WAL: "released" (segment switched, checkpoint done), or why not
    wal: str = ""


TABLES = """
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY(%s::text[]) AND c.relkind = 'r'
ORDER BY n.nspname, c.relname
"""
RELEASED = "released"


async def tables(
    conn: psycopg.AsyncConnection[Any], schemas: Sequence[str]
) -> list[tuple[str, str]]:
    """Every table of ``schemas``, as (schema, table) pairs in the order of their names."""
    rows = await (await conn.execute(TABLES, (list(schemas),))).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


async def release_wal(conn: psycopg.AsyncConnection[Any]) -> str:
    """Close the current WAL segment and checkpoint, on ``conn`` in autocommit mode:
    `RELEASED`, or why it was not done (the role may not)."""
    try:
        await conn.execute("SELECT pg_switch_wal()")
        await conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        return "not released: this role may not switch the WAL or checkpoint"
    except psycopg.Error as exc:
        log.warning("releasing the WAL after an erasure failed: %s", type(exc).__name__)
        return f"not released: {type(exc).__name__}"
    return RELEASED


async def _size(
    conn: psycopg.AsyncConnection[Any], schema: str, table: str
) -> tuple[int, bool] | None:
    row = await (await conn.execute(SIZE, (schema, table))).fetchone()
    return (int(row[0]), bool(row[1])) if row else None


async def vacuum(
    conn: psycopg.AsyncConnection[Any],
    tables: list[tuple[str, str]],
    rewrite_max_bytes: int = DEFAULT_REWRITE_MAX_BYTES,
) -> Vacuumed:
    """Vacuum ``tables`` ((schema, table) pairs), rewriting those up to ``rewrite_max_bytes``
    (0: none), on ``conn`` in autocommit mode. A table that is missing, not the role's own or
    whose VACUUM fails is skipped, and named with the reason; the others still go."""
    if not conn.autocommit:
        raise ValueError("VACUUM needs an autocommit connection")
    done = Vacuumed()
    for schema, table in tables:
        name = f"{schema}.{table}"
        ident = sql.Identifier(schema, table)
        try:
            found = await _size(conn, schema, table)
            if found is None:
                done.skipped[name] = "no such table"
                continue
            size, owned = found
            if not owned:
                done.skipped[name] = "this role does not own it (VACUUM would skip it)"
                continue
            if size <= rewrite_max_bytes and await _rewrite(conn, ident):
                done.rewritten.append(name)
                continue
            await conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(ident))
            done.vacuumed.append(name)
        except psycopg.Error as exc:
            log.warning("VACUUM of %s after an erasure failed: %s", name, type(exc).__name__)
            done.skipped[name] = f"VACUUM failed: {type(exc).__name__}"
    return done


async def _rewrite(conn: psycopg.AsyncConnection[Any], ident: sql.Identifier) -> bool:
    """``VACUUM (FULL, ANALYZE)`` if its lock comes within ``LOCK_TIMEOUT``; False if not."""
    await conn.execute("SELECT set_config('lock_timeout', %s, false)", (LOCK_TIMEOUT,))
    try:
        await conn.execute(sql.SQL("VACUUM (FULL, ANALYZE) {}").format(ident))
        return True
    except psycopg.errors.LockNotAvailable:
        return False
    finally:
        await conn.execute("RESET lock_timeout")
