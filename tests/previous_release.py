"""The embedded server of the releases before issue 52 (``pgserver`` 0.1.4: PostgreSQL 16,
pgvector 0.6.2), for the tests of upgrading a data directory it made and of running on an
older server: a data directory filled the way those releases filled it, and what it holds."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from langchain_core.messages import AIMessage, HumanMessage
from psycopg import sql

from agent_memory import MemoryManager
from agent_memory.db import auth
from agent_memory.embedding import make_embedder
from agent_memory.models import Scope
from agent_memory.settings import (
    DatabaseSettings,
    EmbeddingSettings,
    LLMSettings,
    MemorySettings,
    Settings,
    use_settings,
)
from agent_memory.stored_embeddings import embed_snippets, ensure_ann_indexes
from tests.vectors import embed_all

SCOPE = Scope("alex", "assistant")
SAID = [
    "I'm a Python developer.",
    "I live in Lisbon.",
    "I prefer answers by email.",
    "My favourite editor is Neovim.",
    "I run SAP S/4HANA at work.",
    "My daughter plays the violin.",
]


@contextlib.contextmanager
def previous_server(data_dir: Path) -> Iterator[str]:
    """The previous release's embedded server on ``data_dir`` (made if new), as its owner's
    URL; stopped on leaving."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(data_dir, cleanup_mode="stop")
    try:
        yield psycopg.conninfo.make_conninfo(
            str(server.get_uri()), password=auth.owner_secret(data_dir)
        )
    finally:
        server.cleanup()


def settings_on(url: str, ann_min_rows: int) -> Settings:
    """The tests' settings on the server at ``url``: the offline extractor, no drain on a
    clock, a scope's HNSW indexes from ``ann_min_rows`` vectors."""
    return Settings(
        db=DatabaseSettings(url=url, pool_min_size=1, pool_max_size=4),
        llm=LLMSettings(model=None),
        memory=MemorySettings(index_after_s=0),
        embedding=EmbeddingSettings(ann_min_rows=ann_min_rows),
    )


def _agent(state: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [AIMessage("Noted.")]}


async def fill(url: str, data_dir: Path) -> str:
    """What a release of schema 31 keeps on its embedded server: episodes, facts and their
    vectors, messages and theirs, the scope's own HNSW indexes, a Store item, a checkpointed
    thread, and a tenant with its password (tenant mode on: every role asks for one). The
    tenant's URL."""
    settings = settings_on(url, ann_min_rows=5)
    use_settings(settings)
    try:
        async with await MemoryManager.create(settings=settings) as manager:
            for n, text in enumerate(SAID):
                await manager.record(SCOPE, [HumanMessage(text), AIMessage(f"Noted ({n}).")])
            await manager.consolidate()
            await embed_all(manager)  # what the flow's own step has not embedded yet
            embedder = make_embedder(settings.embedding)
            assert embedder is not None
            pool = await manager.backend.apool()
            await embed_snippets(pool, embedder)
            await ensure_ann_indexes(pool, embedder, SCOPE)  # if the flow has not yet
            store = manager.store()
            await store.aput(("memories", "alex"), "tea", {"content": "User drinks green tea."})
            async with manager.checkpointer() as saver:
                app = manager.graph(_agent).compile(checkpointer=saver)
                await app.ainvoke(
                    {"user_id": "alex", "messages": [HumanMessage("Hello again.")]},
                    {"configurable": {"thread_id": "alex-thread"}},
                )
            auth.secure_embedded(data_dir, url)  # what tenant mode does on the embedded server
            tenant = await manager.create_tenant(SCOPE)
        with psycopg.connect(url) as conn:
            found = conn.execute(
                """SELECT (SELECT count(*) FROM agent_memory.fact_embeddings),
                          (SELECT count(*) FROM agent_memory.snippet_embeddings),
                          (SELECT count(*) FROM agent_memory.ann_indexes)"""
            ).fetchone()
            assert found and found[0] >= 5 and found[1] >= 5 and found[2] >= 1, found
    finally:
        use_settings(None)
    return tenant


def held(url: str) -> dict[str, Any]:
    """Every row of every table of the database (a digest of its rows in order), every index
    and whether it is valid, and every login role's password: what an upgrade must keep."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(
            """SELECT schemaname, tablename FROM pg_tables
               WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"""
        ).fetchall()
        rows = {}
        for schema, table in tables:
            name = sql.Identifier(schema, table)
            row = conn.execute(
                sql.SQL(
                    "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), ''))"
                    " FROM {} t"
                ).format(name)
            ).fetchone()
            rows[f"{schema}.{table}"] = tuple(row) if row else None
        indexes = dict(
            conn.execute(
                """SELECT c.relname, i.indisvalid FROM pg_index i
                   JOIN pg_class c ON c.oid = i.indexrelid
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"""
            ).fetchall()
        )
        passwords = dict(
            conn.execute(
                "SELECT rolname, rolpassword FROM pg_authid WHERE rolcanlogin ORDER BY 1"
            ).fetchall()
        )
    return {"rows": rows, "indexes": indexes, "passwords": passwords}
