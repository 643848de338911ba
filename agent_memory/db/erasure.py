"""Erasing a scope: every row memory holds about it, in one transaction, and a record that it
happened without the content (``agent_memory.erasures``).

What goes, in an order the foreign keys allow: the failure streak, the vectors and refusals of
its facts and messages, its facts (superseded ones too) with their sources, its Store items
(memories and documents), its episodes with their message index (and those still waiting to be
indexed) and summaries, its job rows
(errors included), the cached model answers for its conversations' checksums (a conversation
recorded in another scope too is answered again there), its decay runs, its consolidation
claim, its own nearest-neighbour indexes, its tenant role, and the LangGraph checkpoint threads
that map to it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from agent_memory.db import tenants
from agent_memory.models import Scope

KEY = "agent_memory.scope_key_inline(%(user_id)s, %(agent_id)s, %(workflow_id)s)"
FACTS = f"SELECT id FROM agent_memory.memory_items WHERE scope_key = {KEY}"
SNIPPETS = f"SELECT id FROM agent_memory.snippets WHERE scope_key = {KEY}"
EPISODES = f"SELECT id FROM agent_memory.episodes WHERE scope_key = {KEY}"

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
    # the sources of its facts, and its episodes as sources of facts filed at another level
    # (the person's, learned here): those facts stay, without a source that no longer exists
    (
        "fact_sources",
        f"DELETE FROM agent_memory.fact_sources WHERE fact_id IN ({FACTS})"
        f" OR episode_id IN ({EPISODES}) RETURNING fact_id",
    ),
    # the Store's items of the scope: its memories (going with their facts too) and documents
    ("store_items", f"DELETE FROM agent_memory.store_items WHERE scope_key = {KEY}"),
    (
        "memory_items",
        f"DELETE FROM agent_memory.memory_items WHERE scope_key = {KEY}"
        " RETURNING id, superseded_at IS NULL, superseded_by, superseded_by_job",
    ),
    # its episodes waiting to be indexed first: a drain holding them is waited for, so the
    # snippets it makes are there to be deleted next (sql/0026_snippet_queue.sql)
    ("snippet_queue", f"DELETE FROM agent_memory.snippet_queue WHERE scope_key = {KEY}"),
    ("snippets", f"DELETE FROM agent_memory.snippets WHERE scope_key = {KEY}"),
    ("episodes", f"DELETE FROM agent_memory.episodes WHERE scope_key = {KEY}"),
    # the words of the scope's rows, counted for full-text ranking (and the changes the
    # deletions above just appended)
    ("term_counts", f"DELETE FROM agent_memory.term_counts WHERE scope_key = {KEY}"),
    (
        "consolidation_jobs",
        f"DELETE FROM agent_memory.consolidation_jobs WHERE scope_key = {KEY} RETURNING id",
    ),
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
# the vectors live in tables that exist only with pgvector (sql/0029): erased when there
VECTOR_TABLES = [
    ("fact_embeddings", f"DELETE FROM agent_memory.fact_embeddings WHERE scope_key = {KEY}"),
    ("snippet_embeddings", f"DELETE FROM agent_memory.snippet_embeddings WHERE scope_key = {KEY}"),
]
ANN_INDEXES = f"DELETE FROM agent_memory.ann_indexes WHERE scope_key = {KEY} RETURNING name"
TABLE_EXISTS = "SELECT to_regclass(%s) IS NOT NULL"
TENANT = f"SELECT role_name FROM agent_memory.tenants WHERE scope_key = {KEY}"
RECORD = "INSERT INTO agent_memory.erasures (scope_key_sha256, rows_removed) VALUES (%s, %s)"
CHECKPOINT_TABLES = ("checkpoint_writes", "checkpoint_blobs", "checkpoints")

# A person's scopes: those of the tables whose rows name a scope's parts. The range on the
# scope key (C collation: every key of the user starts with their quoted id and a comma, and
# ',' < '-') is served by each table's scope index, in generic plans too.
_RANGE = (
    "scope_key >= (SELECT quote_nullable(%(user_id)s) || ',') COLLATE \"C\""
    " AND scope_key < (SELECT quote_nullable(%(user_id)s) || '-') COLLATE \"C\""
)
_OF_USER = " UNION ".join(
    f"SELECT user_id, agent_id, workflow_id FROM agent_memory.{table} WHERE {_RANGE}"
    for table in (
        "episodes",
        "memory_items",
        "consolidation_jobs",
        "scope_retries",
        "store_items",
        "tenants",
    )
)
SCOPES_OF_USER = f"""
SELECT user_id, agent_id, workflow_id FROM ({_OF_USER}
    UNION SELECT user_id, agent_id, workflow_id FROM agent_memory.decay_runs
    WHERE NOT all_scopes AND user_id = %(user_id)s) s
WHERE user_id = %(user_id)s
  AND (%(agent_id)s::text IS NULL OR agent_id = %(agent_id)s)
  AND (%(workflow_id)s::text IS NULL OR workflow_id = %(workflow_id)s)
ORDER BY agent_id NULLS FIRST, workflow_id NULLS FIRST
"""
# The scope parts a checkpoint carries, as the memory nodes read them (graph.state.scope_from):
# its state's keys (LangGraph keeps a string channel inline in the checkpoint's
# channel_values), and its configuration's (LangGraph copies `configurable` into metadata).
CARRIED = """
SELECT DISTINCT thread_id,
    checkpoint -> 'channel_values' ->> 'user_id', checkpoint -> 'channel_values' ->> 'agent_id',
    checkpoint -> 'channel_values' ->> 'workflow_id',
    metadata ->> 'user_id', metadata ->> 'agent_id', metadata ->> 'workflow_id'
FROM {}.checkpoints
WHERE checkpoint -> 'channel_values' ->> %(field)s = %(value)s OR metadata ->> %(field)s = %(value)s
ORDER BY thread_id
"""
THREAD_IDS = "SELECT DISTINCT thread_id FROM {}.checkpoints ORDER BY thread_id"


def key_digest(scope: Scope) -> bytes:
    """The SHA-256 of the scope's label (what the record keeps: not the ids themselves)."""
    return hashlib.sha256(scope.label.encode("utf-8")).digest()


async def _exists(conn: psycopg.AsyncConnection[Any], table: str) -> bool:
    cur = await conn.execute(TABLE_EXISTS, (table,))
    row = await cur.fetchone()
    return bool(row and row[0])


async def scopes_of_user(
    conn: psycopg.AsyncConnection[Any],
    user_id: str,
    agent_id: str | None = None,
    workflow_id: str | None = None,
) -> list[Scope]:
    """Every scope of ``user_id`` memory holds rows of (narrowed to ``agent_id`` /
    ``workflow_id`` where given): the global-agent one first."""
    params = {"user_id": user_id, "agent_id": agent_id, "workflow_id": workflow_id}
    rows = await (await conn.execute(SCOPES_OF_USER, params)).fetchall()
    return [Scope(*row) for row in rows]


async def carried(
    conn: psycopg.AsyncConnection[Any], schema: str, field: str, value: str
) -> list[tuple[str, dict[str, str | None], dict[str, str | None]]]:
    """The checkpoint threads of ``schema`` whose state or configuration holds ``field`` =
    ``value``: (thread id, the state's scope parts, the configuration's), per distinct pair."""
    if not await _exists(conn, f"{schema}.checkpoints"):
        return []
    query = sql.SQL(CARRIED).format(sql.Identifier(schema))
    rows = await (await conn.execute(query, {"field": field, "value": value})).fetchall()
    names = ("user_id", "agent_id", "workflow_id")
    return [
        (str(r[0]), dict(zip(names, r[1:4], strict=True)), dict(zip(names, r[4:7], strict=True)))
        for r in rows
    ]


async def thread_ids(conn: psycopg.AsyncConnection[Any], schema: str) -> list[str]:
    """Every checkpoint thread of ``schema`` (none where the checkpointer was never set up)."""
    if not await _exists(conn, f"{schema}.checkpoints"):
        return []
    query = sql.SQL(THREAD_IDS).format(sql.Identifier(schema))
    return [str(r[0]) for r in await (await conn.execute(query)).fetchall()]


@dataclass
class Successor:
    """What an erased fact was at the erasure: current, or superseded by ``by`` (a fact) or
    invalidated by ``job`` (None: by hand)."""

    current: bool
    by: int | None
    job: int | None


@dataclass
class Erased:
    """What erasing the selected scopes removed that the facts learned there are found by
    (agent_memory.db.derived): the facts deleted, with what each was then, the jobs deleted,
    and the facts of other scopes that lost a source. Filled scope by scope by `erase`."""

    facts: dict[int, Successor] = field(default_factory=dict)
    jobs: set[int] = field(default_factory=set)
    sourced: set[int] = field(default_factory=set)


async def _run(
    conn: psycopg.AsyncConnection[Any], statement: str, params: dict[str, Any]
) -> list[tuple[Any, ...]] | int:
    cur = await conn.execute(statement, params)
    return await cur.fetchall() if cur.description is not None else cur.rowcount


async def erase(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    checkpoint_schema: str | None = None,
    threads: list[str] | None = None,
    *,
    into: Erased | None = None,
    dry_run: bool = False,
) -> dict[str, int]:
    """Remove everything of ``scope`` in the caller's transaction (``threads``: its checkpoint
    threads in ``checkpoint_schema``); how many rows of each kind went, as recorded. ``into``
    gathers the ids the facts learned there are found by. ``dry_run``: for a transaction the
    caller rolls back; what cannot be (dropping its indexes, ending its tenant role's sessions)
    is counted instead."""
    params = scope.as_dict()
    rows = into if into is not None else Erased()
    removed: dict[str, int] = {}
    statements = list(STATEMENTS[:1])
    for name, statement in VECTOR_TABLES:
        if await _exists(conn, f"agent_memory.{name}"):
            statements.append((name, statement))
    for name, statement in statements + STATEMENTS[1:]:
        done = await _run(conn, statement, params)
        if isinstance(done, int):
            removed[name] = done
            continue
        removed[name] = len(done)
        if name == "fact_sources":
            rows.sourced.update(int(r[0]) for r in done)
        elif name == "memory_items":
            rows.facts.update({int(r[0]): Successor(bool(r[1]), r[2], r[3]) for r in done})
        elif name == "consolidation_jobs":
            rows.jobs.update(int(r[0]) for r in done)
    if await _exists(conn, "agent_memory.ann_indexes"):
        cur = await conn.execute(ANN_INDEXES, params)
        names = [row[0] for row in await cur.fetchall()]
        for index in names if not dry_run else []:
            drop = sql.SQL("DROP INDEX IF EXISTS agent_memory.{}").format(sql.Identifier(index))
            await conn.execute(drop)
        removed["ann_indexes"] = len(names)
    # its tenant role, in tenant mode (the mapping names the scope)
    if dry_run:
        removed["tenants"] = len(await (await conn.execute(TENANT, params)).fetchall())
    else:
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
    await record(conn, scope, removed)
    return removed


async def record(conn: psycopg.AsyncConnection[Any], scope: Scope, removed: dict[str, int]) -> None:
    """The record that ``scope`` was erased: the SHA-256 of its label and the counts, no
    content."""
    await conn.execute(RECORD, (key_digest(scope), Jsonb(removed)))
