"""Erasing a scope: every row memory holds about it, in one transaction, and a record that it
happened without the content (``agent_memory.erasures``).

What goes, in an order the foreign keys allow: the failure streak, the vectors and refusals of
its facts and messages, its facts (superseded ones too) with their sources, its Store items
(memories and documents), its episodes with their message index and summaries, its job rows
(errors included), the cached model answers for its conversations' checksums (a conversation
recorded in another scope too is answered again there), its decay runs, its consolidation
claim, its own nearest-neighbour indexes, its tenant role, and the LangGraph checkpoint threads
that map to it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from agent_memory.db import tenants
from agent_memory.models import Scope

KEY = "agent_memory.scope_key(%(user_id)s, %(agent_id)s, %(workflow_id)s)"
FACTS = f"SELECT id FROM agent_memory.memory_items WHERE scope_key = {KEY}"
SNIPPETS = f"SELECT id FROM agent_memory.snippets WHERE scope_key = {KEY}"

# (what the count is called, the statement); run in this order
STATEMENTS: list[tuple[str, str]] = [
    ("scope_retries", f"DELETE FROM agent_memory.scope_retries WHERE scope_key = {KEY}"),
    (
        "extraction_cache",
        "DELETE FROM agent_memory.extraction_cache WHERE content_checksum IN ("
        " SELECT content_checksum FROM agent_memory.consolidation_jobs"
        f" WHERE scope_key = {KEY} AND content_checksum IS NOT NULL)",
    ),
    (
        "fact_embedding_rejections",
        f"DELETE FROM agent_memory.fact_embedding_rejections WHERE fact_id IN ({FACTS})",
    ),
    ("fact_sources", f"DELETE FROM agent_memory.fact_sources WHERE fact_id IN ({FACTS})"),
    # the Store's items of the scope: its memories (going with their facts too) and documents
    ("store_items", f"DELETE FROM agent_memory.store_items WHERE scope_key = {KEY}"),
    ("memory_items", f"DELETE FROM agent_memory.memory_items WHERE scope_key = {KEY}"),
    ("snippets", f"DELETE FROM agent_memory.snippets WHERE scope_key = {KEY}"),
    ("episodes", f"DELETE FROM agent_memory.episodes WHERE scope_key = {KEY}"),
    # the words of the scope's rows, counted for full-text ranking (and the changes the
    # deletions above just appended)
    ("term_counts", f"DELETE FROM agent_memory.term_counts WHERE scope_key = {KEY}"),
    ("consolidation_jobs", f"DELETE FROM agent_memory.consolidation_jobs WHERE scope_key = {KEY}"),
    # its consolidation claim's row (sql/0019), unless a run holds it at this moment
    (
        "scope_claims",
        "DELETE FROM agent_memory.scope_claims WHERE scope_key IN (SELECT scope_key"
        f" FROM agent_memory.scope_claims WHERE scope_key = {KEY} FOR UPDATE SKIP LOCKED)",
    ),
    (
        "decay_runs",
        "DELETE FROM agent_memory.decay_runs WHERE NOT all_scopes"
        " AND user_id IS NOT DISTINCT FROM %(user_id)s"
        " AND agent_id IS NOT DISTINCT FROM %(agent_id)s"
        " AND workflow_id IS NOT DISTINCT FROM %(workflow_id)s",
    ),
]
# the vectors live in tables made on first use (pgvector may be missing): erased when there
VECTOR_TABLES = [
    ("fact_embeddings", f"DELETE FROM agent_memory.fact_embeddings WHERE scope_key = {KEY}"),
    ("snippet_embeddings", f"DELETE FROM agent_memory.snippet_embeddings WHERE scope_key = {KEY}"),
]
ANN_INDEXES = f"DELETE FROM agent_memory.ann_indexes WHERE scope_key = {KEY} RETURNING name"
TABLE_EXISTS = "SELECT to_regclass(%s) IS NOT NULL"
RECORD = "INSERT INTO agent_memory.erasures (scope_key_sha256, rows_removed) VALUES (%s, %s)"
CHECKPOINT_TABLES = ("checkpoint_writes", "checkpoint_blobs", "checkpoints")


def key_digest(scope: Scope) -> bytes:
    """The SHA-256 of the scope's label (what the record keeps: not the ids themselves)."""
    return hashlib.sha256(scope.label.encode("utf-8")).digest()


async def _exists(conn: psycopg.AsyncConnection[Any], table: str) -> bool:
    cur = await conn.execute(TABLE_EXISTS, (table,))
    row = await cur.fetchone()
    return bool(row and row[0])


async def erase(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    checkpoint_schema: str | None = None,
    threads: list[str] | None = None,
) -> dict[str, int]:
    """Remove everything of ``scope`` in the caller's transaction (``threads``: its checkpoint
    threads in ``checkpoint_schema``); how many rows of each kind went, as recorded."""
    params = scope.as_dict()
    removed: dict[str, int] = {}
    for name, statement in STATEMENTS[:1]:
        removed[name] = (await conn.execute(statement, params)).rowcount
    for name, statement in VECTOR_TABLES:
        if await _exists(conn, f"agent_memory.{name}"):
            removed[name] = (await conn.execute(statement, params)).rowcount
    for name, statement in STATEMENTS[1:]:
        removed[name] = (await conn.execute(statement, params)).rowcount
    if await _exists(conn, "agent_memory.ann_indexes"):
        cur = await conn.execute(ANN_INDEXES, params)
        names = [row[0] for row in await cur.fetchall()]
        for index in names:
            drop = sql.SQL("DROP INDEX IF EXISTS agent_memory.{}").format(sql.Identifier(index))
            await conn.execute(drop)
        removed["ann_indexes"] = len(names)
    # its tenant role, in tenant mode (the mapping names the scope)
    removed["tenants"] = int(await tenants.drop(conn, scope) is not None)
    if checkpoint_schema and threads:
        for table in CHECKPOINT_TABLES:
            name = f"{checkpoint_schema}.{table}"
            if not await _exists(conn, name):
                continue
            delete = sql.SQL("DELETE FROM {}.{} WHERE thread_id = ANY(%s)").format(
                sql.Identifier(checkpoint_schema), sql.Identifier(table)
            )
            removed[table] = (await conn.execute(delete, (threads,))).rowcount
    await conn.execute(RECORD, (key_digest(scope), Jsonb(removed)))
    return removed
