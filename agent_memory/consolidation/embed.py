"""After a scope's facts are written, embed them (and its conversations' messages) with the run's
embedding model. The facts are written already: a failure here only leaves them without vectors
for a later run, or ``agent-memory embed``, to add."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool

from agent_memory.consolidation.groups import Limits, Log
from agent_memory.embedding import (
    Embedded,
    TextEmbedder,
    embed_missing,
    embed_snippets,
    ensure_ann_indexes,
)
from agent_memory.errors import TransientEmbeddingError
from agent_memory.models import Scope


async def embed_scope(
    pool: AsyncConnectionPool,
    scope: Scope | None,
    embedder: TextEmbedder,
    log: Log,
    limit: int | None = None,
) -> Embedded:
    """Embed the facts and messages of ``scope`` (None: of all scopes) that have no vector from
    ``embedder``; build the scope's nearest-neighbour index once it is due."""
    done = await embed_missing(pool, embedder, scope, limit=limit)
    # the scope's conversations too, so inject finds their messages by meaning
    messages = await embed_snippets(pool, embedder, scope, limit=limit)
    done = done._replace(snippets=messages.stored)
    where = f"{scope.label}: " if scope is not None else ""
    if scope is not None:
        for name in await ensure_ann_indexes(pool, embedder, scope):
            log.info("%sbuilt index %s: nearest vectors now come from it", where, name)
    for fact_id, reason in done.refusals:  # in the run's log, where operators look
        log.warning(
            "%sfact %d is left without an embedding: %s; it is not asked for again until the "
            "model changes or `agent-memory embed --retry-rejected`",
            where,
            fact_id,
            reason,
        )
    log.info(
        "%s%d fact(s) embedded with %s, %d refused by it; %d message(s) of past conversations",
        where,
        done.stored,
        embedder.model,
        done.refused,
        done.snippets,
    )
    return done


@dataclass
class Embedding:
    """A group's scopes to embed, and what each got (kept across a step's retries)."""

    scopes: list[Scope]
    done: dict[Scope, Embedded] = field(default_factory=dict)
    errors: dict[Scope, Exception] = field(default_factory=dict)


async def embed_each(
    pool: AsyncConnectionPool, work: Embedding, embedder: TextEmbedder, limits: Limits, log: Log
) -> list[Exception]:
    """Embed each scope's new facts and messages; a retry redoes only the scopes whose
    embedding failed with an error worth retrying. Those errors."""
    transient = (TransientEmbeddingError,)

    async def one(scope: Scope) -> None:
        try:
            async with limits.llm:
                work.done[scope] = await embed_scope(pool, scope, embedder, log)
            work.errors.pop(scope, None)
        except Exception as exc:  # the facts are written: only their vectors wait
            work.errors[scope] = exc

    await asyncio.gather(
        *(
            one(s)
            for s in work.scopes
            if s not in work.done
            and (s not in work.errors or isinstance(work.errors[s], transient))
        )
    )
    return [e for e in work.errors.values() if isinstance(e, transient)]
