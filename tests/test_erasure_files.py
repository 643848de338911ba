"""Erasure reaches the files (issue 37, item 3): after an erasure (and the VACUUM it runs) and
a CHECKPOINT, no file of the database holds the erased text: not the tables' heap files, their
TOAST, their indexes, nor the planner's statistics (pg_statistic). Tables above the rewrite
size get a plain VACUUM, which PostgreSQL's freed space may outlive: the erased bytes then stay
only in the files of the tables the summary names as vacuumed. Issue 51, item 4: a table the
erasure deleted nothing from still held the person's words (a Store document they had deleted
before: its dead row, and the statistics sampled while it lived), and so did the WAL; now every
table is vacuumed and, on the embedded server, the WAL segments holding the text are deleted
at the erasure's checkpoint. Read from the embedded server's data directory, on the real
files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import SecretStr

from agent_memory import MemoryManager, Scope
from agent_memory.settings import Settings
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


def data_files_holding(db: psycopg.Connection[Any], marker: str) -> set[str]:
    """The files of the server's data directory that hold ``marker`` (paths relative to it),
    but for other databases' folders (other tests' databases come and go beside this one)."""
    data = Path(str((db.execute("SHOW data_directory").fetchone() or [""])[0]))
    (oid,) = db.execute(
        "SELECT oid FROM pg_database WHERE datname = current_database()"
    ).fetchone() or (0,)
    found = set()
    for path in data.rglob("*"):
        relative = path.relative_to(data)
        if relative.parts[:1] == ("base",) and relative.parts[1:2] != (str(oid),):
            continue
        if path.is_file() and marker.encode() in path.read_bytes():
            found.add(str(relative))
    return found


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
    await setup(manager, db)
    # a document the person deleted before: the table keeps its dead row, though the erasure
    # finds nothing of theirs there to delete
    store = manager.store()
    await store.aput(("memories", A, "notes"), "n1", {"text": f"note {ACCOUNT}"})
    db.execute("ANALYZE agent_memory.store_items")
    await store.adelete(("memories", A, "notes"), "n1")
    db.execute("CHECKPOINT")
    assert "pg_wal" in {Path(p).parts[0] for p in data_files_holding(db, ACCOUNT)}
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
    # nor the WAL: its segments that held the text were closed, released and deleted; nor any
    # other file of the data directory
    assert summary.files.wal == "released"
    assert data_files_holding(db, ACCOUNT) == set()


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


async def test_a_role_that_may_not_release_the_wal_is_told_so(
    app_database_url: str, settings: Settings
) -> None:
    # the application's own role on a managed server: no superuser, no pg_checkpoint
    app = settings.model_copy(
        update={"db": settings.db.model_copy(update={"url": SecretStr(app_database_url)})}
    )
    manager = await MemoryManager.create(settings=app)
    try:
        await manager.record(Scope(A), [{"role": "user", "content": f"I love {ACCOUNT} tea."}])
        summary = await manager.erase_user(A)
    finally:
        await manager.close()
    assert summary.files.wal == "not released: this role may not switch the WAL or checkpoint"
    assert "pg_catalog.pg_statistic" in summary.files.skipped
    assert "agent_memory.episodes" in summary.files.rewritten  # its own tables still are
