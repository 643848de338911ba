"""Erasure reaches the files (issue 37, item 3): after an erasure (and the VACUUM it runs) and
a CHECKPOINT, no file of the database holds the erased text: not the tables' heap files, their
TOAST, their indexes, nor the planner's statistics (pg_statistic). Tables above the rewrite
size get a plain VACUUM, which PostgreSQL's freed space may outlive: the erased bytes then stay
only in the files of the tables the summary names as vacuumed. The WAL still holds the text
after an erasure (docs/guarantees.md says until when). Read from the embedded server's data
directory, on the real files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager
from tests.test_erase_user import ACCOUNT, OTHER, A, B, remember
from tests.test_erasure import holding

pytestmark = pytest.mark.usefixtures("prefect_harness")

_MAIN_FORK = re.compile(r"^(\d+)(\.\d+)?$")  # a relation's data (not its free space map)
# each relation file's table: an index's or a TOAST table's own table
_OWNERS = """
WITH rel AS (
    SELECT c.oid, coalesce(i.indrelid, c.oid) AS base
    FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
)
SELECT pg_relation_filenode(r.oid)::text, coalesce(t.oid, r.base)::regclass::text
FROM rel r LEFT JOIN pg_class t ON t.reltoastrelid = r.base
WHERE pg_relation_filenode(r.oid) IS NOT NULL
"""


def files_holding(db: psycopg.Connection[Any], marker: str) -> set[str]:
    """The tables (of every relation of this database, catalogs too) whose files hold
    ``marker``: their heap, TOAST or index files, as PostgreSQL wrote them to disk."""
    data = Path(str((db.execute("SHOW data_directory").fetchone() or [""])[0]))
    (oid,) = db.execute(
        "SELECT oid FROM pg_database WHERE datname = current_database()"
    ).fetchone() or (0,)
    owners = dict(db.execute(_OWNERS).fetchall())
    found = set()
    for path in (data / "base" / str(oid)).iterdir():
        name = _MAIN_FORK.match(path.name)
        if name and marker.encode() in path.read_bytes():
            found.add(owners.get(name.group(1), f"unknown file {path.name}"))
    return found


def wal_holds(db: psycopg.Connection[Any], since: str, marker: str) -> bool:
    """Whether the WAL segments written since LSN ``since`` hold ``marker``."""
    data = Path(str((db.execute("SHOW data_directory").fetchone() or [""])[0]))
    first, last = db.execute(
        "SELECT pg_walfile_name(%s::pg_lsn), pg_walfile_name(pg_current_wal_lsn())", (since,)
    ).fetchone() or ("", "")
    segments = sorted(p for p in (data / "pg_wal").iterdir() if first <= p.name <= last)
    return any(marker.encode() in p.read_bytes() for p in segments)


async def setup(manager: MemoryManager, db: psycopg.Connection[Any]) -> None:
    await remember(manager, A, ACCOUNT)
    await remember(manager, B, OTHER)
    db.execute("ANALYZE")  # statistics sampled while A's rows were there, as autovacuum does
    db.execute("CHECKPOINT")  # everything written to the files
    written = files_holding(db, ACCOUNT)
    # the account number was in the files of the tables the probe found it in, and more
    assert {
        "agent_memory.episodes",
        "agent_memory.memory_items",
        "agent_memory.snippets",
        "agent_memory.extraction_cache",
        "agent_memory.term_counts",
        "agent_memory_checkpoints.checkpoint_blobs",
        "pg_statistic",
    } <= written, written


async def test_after_an_erasure_and_a_checkpoint_no_file_of_the_database_holds_the_text(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    since = str((db.execute("SELECT pg_current_wal_lsn()").fetchone() or [""])[0])
    await setup(manager, db)
    other_before = files_holding(db, OTHER)

    summary = await manager.erase_user(A)  # small tables: rewritten
    db.execute("CHECKPOINT")

    assert files_holding(db, ACCOUNT) == set()
    assert {"agent_memory.extraction_cache", "agent_memory.term_counts"} <= set(
        summary.files.rewritten
    )
    assert summary.files.vacuumed == [] and summary.files.skipped == {}
    # the other person's rows are where they were (the files were read, not missed)
    assert files_holding(db, OTHER) >= other_before - {"pg_statistic"}
    # what the tables' files no longer hold, the WAL still does (the rows as written, and
    # whole pages logged after a checkpoint), until its segments are recycled
    assert wal_holds(db, since, ACCOUNT)


async def test_a_plain_vacuum_leaves_erased_bytes_only_in_the_tables_it_names(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await setup(manager, db)

    summary = await manager.erase_user(A, rewrite_max_bytes=0)  # no table rewritten
    db.execute("CHECKPOINT")

    assert holding(db, ACCOUNT) == {}  # no row holds it
    assert summary.files.rewritten == []
    left = files_holding(db, ACCOUNT)
    # PostgreSQL does not zero the space VACUUM frees in a page that keeps other rows: the
    # bytes stay there until overwritten, in the tables the summary names (docs/guarantees.md)
    assert left and left <= {t.removeprefix("pg_catalog.") for t in summary.files.vacuumed}
    with pytest.raises(ValueError, match="rewrite_max_bytes -1 is below 0"):
        await manager.erase_user(B, rewrite_max_bytes=-1)
