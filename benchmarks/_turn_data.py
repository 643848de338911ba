"""The data of benchmarks/turn_cpu.py: one scope's facts and turns, recorded as an agent
records them, embedded and indexed as the flows would leave them, among neighbour scopes."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from langchain_core.messages import AIMessage, HumanMessage

from agent_memory import MemoryManager
from agent_memory.db import ann_indexes, term_counts
from agent_memory.db import embeddings as embedding_repo
from agent_memory.models import Scope
from agent_memory.settings import LOCAL_MODEL, EmbeddingSettings
from benchmarks import _synthetic
from benchmarks._common import agent_connection
from benchmarks._synthetic import VOCABULARY, embed_locally
from benchmarks.retrieval import load_facts

SCOPE = Scope("cpu-user", "cpu-agent")


def _words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.sample(VOCABULARY, rng.randint(low, high)))


def fact_text(rng: random.Random) -> str:
    return f"User likes the {_words(rng, 3, 5)}"


def turn(rng: random.Random) -> list[Any]:
    """A turn as an agent records it: a user message of two sentences, one a question half
    the time, and a short reply."""
    ask = f" What about the {_words(rng, 2, 3)}?" if rng.random() < 0.5 else ""
    user = f"I used the {_words(rng, 3, 5)} today.{ask}"
    return [HumanMessage(user), AIMessage(f"Noted: the {_words(rng, 2, 4)}.")]


# the neighbours' turns, drawn in SQL (queued for indexing as record's are: see load)
NEIGHBOUR_TURNS = """
INSERT INTO agent_memory.episodes (user_id, agent_id, messages, message_count, occurred_at)
SELECT 'neighbour-' || (e %% %(scopes)s), 'cpu-agent',
       jsonb_build_array(
           jsonb_build_object('role', 'user', 'content', 'I used the ' || (
               SELECT string_agg((%(words)s::text[])[1 + (random() * (%(n)s - 1))::int], ' ')
               FROM generate_series(1, 3 + e %% 3) WHERE e IS NOT NULL) || ' today.'),
           jsonb_build_object('role', 'assistant', 'content', 'Noted: the ' || (
               SELECT string_agg((%(words)s::text[])[1 + (random() * (%(n)s - 1))::int], ' ')
               FROM generate_series(1, 2 + e %% 3) WHERE e IS NOT NULL) || '.')),
       2, now() - (e || ' minutes')::interval
FROM generate_series(1, %(turns)s) AS e
"""


def load_neighbours(conn: psycopg.Connection[Any], scopes: int, facts: int, messages: int) -> None:
    """``scopes`` other scopes, each with a tenth of the measured scope's facts and messages:
    the tables' statistics, and so the generic plans, are those of a database of many
    scopes, where a scope's rows are a small part of each table."""
    if scopes:
        _synthetic.load_facts(conn, scopes * max(facts // 10, 1), scopes)
        turns = scopes * max(messages // 20, 1)
        words = {"words": VOCABULARY, "n": len(VOCABULARY)}
        conn.execute(NEIGHBOUR_TURNS, {"scopes": scopes, "turns": turns, **words})


async def load(
    manager: MemoryManager, dsn: str, facts: int, messages: int, neighbours: int
) -> dict[str, Any]:
    """The scope's facts and messages (and its neighbours'), embedded and indexed as the
    flows would leave them."""
    rng = random.Random(40)
    with agent_connection(dsn) as conn:
        load_neighbours(conn, neighbours, facts, messages)
        load_facts(
            conn,
            SCOPE,
            [
                {"content": fact_text(rng), "importance": rng.uniform(0.1, 1.0)}
                for _ in range(facts)
            ],
        )
    turns = messages // 2
    start = datetime.now(UTC) - timedelta(minutes=30 * turns)
    for i in range(turns):
        await manager.record(SCOPE, turn(rng), occurred_at=start + timedelta(minutes=30 * i))
    await manager.index_pending()  # every queued conversation's sentences, as the flows leave them
    with agent_connection(dsn) as conn:
        no_vectors = embedding_repo.ensure(conn)  # a server without pgvector: full text alone
        if no_vectors is None:
            embed_locally(conn, "memory_items", "fact_embeddings", "fact_id", LOCAL_MODEL)
            embed_locally(conn, "snippets", "snippet_embeddings", "snippet_id", LOCAL_MODEL)
        conn.execute(term_counts.COMPACT_ALL)  # as the consolidation flow folds each scope's
        conn.execute("VACUUM ANALYZE")
        row = conn.execute(
            "SELECT count(*) FROM agent_memory.snippets WHERE scope_key = "
            "agent_memory.scope_key_inline(%(user_id)s, %(agent_id)s, %(workflow_id)s)",
            SCOPE.as_dict(),
        ).fetchone()
    built = {}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        for kind in ("facts", "snippets") if no_vectors is None else ():
            min_rows = EmbeddingSettings().ann_min_rows
            built[kind] = await ann_indexes.ensure_ann_index(
                aconn, kind, SCOPE, LOCAL_MODEL, min_rows
            )
    return {
        "facts": facts,
        "messages": turns * 2,
        "snippets": row[0] if row else 0,
        "neighbour_scopes": neighbours,
        "vectors": "embedded by the bundled model" if no_vectors is None else no_vectors,
        "hnsw_index": {kind: name is not None for kind, name in built.items()},
    }
