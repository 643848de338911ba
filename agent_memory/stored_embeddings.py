"""Embedding what memory stores: the facts and past messages that have no vector of the
configured model yet, in the consolidation and re-embedding flows (never on the agent's hot
path), and each large scope's approximate nearest-neighbour index (:mod:`.db.ann_indexes`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, cast

import psycopg
from psycopg_pool import AsyncConnectionPool

from agent_memory import progress
from agent_memory.embedding import TextEmbedder
from agent_memory.models import Scope


class Embedded(NamedTuple):
    """What an embedding run did: facts embedded, and the facts the model refused."""

    stored: int = 0
    refusals: tuple[tuple[int, str], ...] = ()  # (fact id, the model's reason)
    snippets: int = 0  # messages of past conversations embedded

    @property
    def refused(self) -> int:
        return len(self.refusals)

    @classmethod
    def total(cls, parts: Iterable[Embedded]) -> Embedded:
        """What several runs (or scopes) got, together."""
        stored, refusals, snippets = 0, list[tuple[int, str]](), 0
        for part in parts:
            stored, snippets = stored + part.stored, snippets + part.snippets
            refusals += part.refusals
        return cls(stored, tuple(refusals), snippets)


async def embed_missing(
    pool: AsyncConnectionPool,
    embedder: TextEmbedder,
    scope: Scope | None = None,
    *,
    limit: int | None = None,
) -> Embedded:
    """Embed the current facts (of ``scope``, or all) that have no embedding from the
    embedder's model, a batch at a time, each batch stored as it comes. A fact the model
    refuses is recorded as refused, with the model's reason, and the run goes on. Safe to
    rerun: what is stored or refused is not asked for again."""
    parts = await _embed_facts(pool, embedder, None if scope is None else [scope], limit)
    return Embedded.total(parts.values())


async def embed_snippets(
    pool: AsyncConnectionPool,
    embedder: TextEmbedder,
    scope: Scope | None = None,
    *,
    limit: int | None = None,
) -> Embedded:
    """Embed the messages of past conversations (of ``scope``, or all) that have no embedding
    from the embedder's model, as :func:`embed_missing` does facts, after indexing those still
    waiting for it (:mod:`agent_memory.db.snippet_queue`). A message the model refuses is
    stored without a vector (full text still finds it) and not asked for again."""
    parts = await _embed_messages(pool, embedder, None if scope is None else [scope], limit)
    return Embedded.total(parts.values())


async def embed_scopes(
    pool: AsyncConnectionPool,
    embedder: TextEmbedder,
    scopes: Sequence[Scope],
    *,
    limit: int | None = None,
) -> list[Embedded]:
    """Embed the facts and messages of ``scopes`` that have no embedding from the embedder's
    model, as :func:`embed_missing` and :func:`embed_snippets` do, for all of them at once: a
    statement and a model call per batch of rows, not per scope. What each scope got, in the
    order of ``scopes``; ``limit``: at most this many facts, and this many messages."""
    facts = await _embed_facts(pool, embedder, scopes, limit)
    messages = await _embed_messages(pool, embedder, scopes, limit)
    return [
        facts.get(i, Embedded())._replace(snippets=messages.get(i, Embedded()).stored)
        for i in range(len(scopes))
    ]


async def _embed_facts(
    pool: AsyncConnectionPool,
    embedder: TextEmbedder,
    scopes: Sequence[Scope] | None,
    limit: int | None,
) -> dict[int | None, Embedded]:
    from agent_memory.db import embeddings as repo

    async def store(
        conn: psycopg.AsyncConnection[Any],
        good: list[tuple[int, list[float]]],
        bad: list[tuple[int, str]],
    ) -> None:
        if good:
            await repo.store(conn, embedder.model, [i for i, _ in good], [v for _, v in good])
        if bad:
            await repo.reject(conn, embedder.model, [i for i, _ in bad], [r for _, r in bad])

    return await _embed_rows(pool, embedder, repo.missing, store, scopes, limit, "facts")


async def _embed_messages(
    pool: AsyncConnectionPool,
    embedder: TextEmbedder,
    scopes: Sequence[Scope] | None,
    limit: int | None,
) -> dict[int | None, Embedded]:
    from agent_memory.db import embeddings as repo
    from agent_memory.db import snippet_queue

    # the recorded conversations still waiting to be indexed first: their sentences too
    async with pool.connection() as conn:
        await snippet_queue.drain(conn, scopes)

    async def store(
        conn: psycopg.AsyncConnection[Any],
        good: list[tuple[int, list[float]]],
        bad: list[tuple[int, str]],
    ) -> None:
        vectors: list[list[float] | None] = [v for _, v in good]
        await repo.store_snippets(
            conn,
            embedder.model,
            [i for i, _ in good] + [i for i, _ in bad],
            vectors + [None] * len(bad),
        )

    return await _embed_rows(
        pool, embedder, repo.missing_snippets, store, scopes, limit, "messages"
    )


async def ensure_ann_indexes(
    pool: AsyncConnectionPool, embedder: TextEmbedder, scope: Scope
) -> list[str]:
    """Give the scope an HNSW index of its own for its facts and for its messages, each once it
    holds ``AGENT_MEMORY_EMBEDDING_ANN_MIN_ROWS`` vectors (see
    :func:`agent_memory.db.ann_indexes.ensure_ann_index`); the names of those built now."""
    return [name for _, name in await ensure_ann_indexes_of(pool, embedder, [scope])]


async def ensure_ann_indexes_of(
    pool: AsyncConnectionPool, embedder: TextEmbedder, scopes: Sequence[Scope]
) -> list[tuple[Scope, str]]:
    """:func:`ensure_ann_indexes` for each of ``scopes``, with one read for all of them: the
    indexes built now, each with its scope."""
    import psycopg

    from agent_memory.db import ann_indexes

    min_rows = embedder.settings.ann_min_rows
    if not min_rows or not scopes:
        return []
    async with pool.connection() as conn:  # a quick read: most scopes have nothing due
        due = await ann_indexes.ann_indexes_due(conn, scopes, embedder.model, min_rows)
    built: list[tuple[Scope, str]] = []
    if not due:
        return built
    # CREATE INDEX CONCURRENTLY needs a connection of its own, outside any transaction
    # the pool's own conninfo and kwargs (this library's pools are made with plain values)
    conninfo, kwargs = cast(str, pool.conninfo), cast(dict[str, Any], pool.kwargs or {})
    async with await psycopg.AsyncConnection.connect(
        conninfo, **{**kwargs, "autocommit": True}
    ) as conn:
        for d in due:
            name = await ann_indexes.build_ann_index(
                conn, d.kind, d.scope_key, d.dims, embedder.model, embedder.settings.ann_vector_type
            )
            built.append((scopes[d.place], name))
    return built


async def _embed_rows(
    pool: AsyncConnectionPool,
    embedder: TextEmbedder,
    missing: Any,
    store: Any,
    scopes: Sequence[Scope] | None,
    limit: int | None,
    unit: progress.Unit,
) -> dict[int | None, Embedded]:
    """The embedding loop: rows ``missing`` names (of ``scopes``, or of all), a batch at a
    time, each batch stored (the vectors, and the refusals with their reasons) in one
    transaction as it comes, and counted in ``unit`` for a progress watcher. What each scope
    got, by its place in ``scopes`` (None: all)."""
    stored: dict[int | None, int] = {}
    refusals: dict[int | None, list[tuple[int, str]]] = {}
    done = after = 0
    while limit is None or done < limit:
        size = embedder.settings.batch_size
        if limit is not None:
            size = min(size, limit - done)
        async with pool.connection() as conn:
            todo = await missing(conn, embedder.model, scopes, size, after)
        if not todo:
            break
        results = await embedder.embed_each([content for _, content, _ in todo])
        good: list[tuple[int, list[float]]] = []
        bad: list[tuple[int, str]] = []
        for (row_id, _, place), result in zip(todo, results, strict=True):
            if isinstance(result, list):
                good.append((row_id, result))
                stored[place] = stored.get(place, 0) + 1
            else:
                bad.append((row_id, str(result)))
                refusals.setdefault(place, []).append((row_id, str(result)))
        async with pool.connection() as conn, conn.transaction():
            await store(conn, good, bad)
        done += len(todo)
        progress.advance(unit, len(todo))
        after = todo[-1][0]
        if len(todo) < size:
            break
    return {
        place: Embedded(stored.get(place, 0), tuple(refusals.get(place, ())))
        for place in {*stored, *refusals}
    }
