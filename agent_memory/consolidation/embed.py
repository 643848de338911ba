"""After a scope's facts are written, embed them (and its conversations' messages) with the run's
embedding model. The facts are written already: a failure here only leaves them without vectors
for a later run, or ``agent-memory embed``, to add."""

from __future__ import annotations

from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool

from agent_memory.consolidation.groups import Limits, Log, ScopeGroup
from agent_memory.embedding import TextEmbedder
from agent_memory.errors import TransientEmbeddingError
from agent_memory.models import Scope
from agent_memory.pseudonyms import Namer, by_label, summarise
from agent_memory.stored_embeddings import (
    Embedded,
    embed_missing,
    embed_scopes,
    embed_snippets,
    ensure_ann_indexes_of,
)


async def embed_scope(
    pool: AsyncConnectionPool,
    scope: Scope | None,
    embedder: TextEmbedder,
    log: Log,
    limit: int | None = None,
    name: Namer = by_label,
) -> Embedded:
    """Embed the facts and messages of ``scope`` (None: of all scopes) that have no vector from
    ``embedder``; build the scope's nearest-neighbour index once it is due."""
    if scope is not None:
        label = name(scope)
        return (await embed_scopes_of(pool, [scope], label, embedder, log, limit, name))[0]
    done = await embed_missing(pool, embedder, None, limit=limit)
    # the conversations too, so inject finds their messages by meaning
    messages = await embed_snippets(pool, embedder, None, limit=limit)
    done = done._replace(snippets=messages.stored)
    _report(log, None, embedder, done)
    return done


async def embed_scopes_of(
    pool: AsyncConnectionPool,
    scopes: list[Scope],
    label: str,
    embedder: TextEmbedder,
    log: Log,
    limit: int | None = None,
    name: Namer = by_label,
    *,
    build_indexes: bool = True,
) -> list[Embedded]:
    """:func:`embed_scope` for a group of scopes at once (a statement and a model call per
    batch of rows, not per scope), the group's ``label`` in the log; what each scope got.
    ``build_indexes``: build the scopes' nearest-neighbour indexes now; a consolidation run
    leaves them to :func:`build_due_indexes` once it has let go of its scopes."""
    done = await embed_scopes(pool, embedder, scopes, limit=limit)
    if build_indexes:
        await build_due_indexes(pool, scopes, embedder, log, name)
    _report(log, label, embedder, Embedded.total(done))
    return done


async def build_due_indexes(
    pool: AsyncConnectionPool, scopes: list[Scope], embedder: TextEmbedder, log: Log, name: Namer
) -> None:
    """Build the nearest-neighbour index of each of ``scopes`` that has grown enough for one.

    CREATE INDEX CONCURRENTLY waits for every transaction older than it to end, and a
    consolidation run holds its scopes' claims in open transactions until it ends: built
    inside the run, the index waited for the run, which waited for the index, for ever (a
    scope crossing ``AGENT_MEMORY_EMBEDDING_ANN_MIN_ROWS`` hung its run). So a run builds
    them after it has let go of its claims."""
    for built, index in await ensure_ann_indexes_of(pool, embedder, scopes):
        log.info("%s: built index %s: nearest vectors now come from it", name(built), index)


def _report(log: Log, label: str | None, embedder: TextEmbedder, done: Embedded) -> None:
    where = f"{label}: " if label is not None else ""
    for fact_id, reason in done.refusals:  # in the run's log, where operators look
        log.warning(
            "%sfact %d is left without an embedding: %s; it is not asked for again until the "
            "model changes or `agent-memory embed --retry-rejected`",
            where,
            fact_id,
            summarise(f"refusal: {reason}"),
        )
    log.info(
        "%s%d fact(s) embedded with %s, %d refused by it; %d message(s) of past conversations",
        where,
        done.stored,
        embedder.model,
        done.refused,
        done.snippets,
    )


@dataclass
class Embedding:
    """A group's scopes to embed, and what each got (kept across a step's retries)."""

    scopes: list[Scope]
    done: dict[Scope, Embedded] = field(default_factory=dict)
    errors: dict[Scope, Exception] = field(default_factory=dict)
    name: Namer = by_label  # how the log names a scope


async def embed_each(
    pool: AsyncConnectionPool, work: Embedding, embedder: TextEmbedder, limits: Limits, log: Log
) -> list[Exception]:
    """Embed the new facts and messages of the group's scopes, all at once; a retry redoes
    only the scopes whose embedding failed with an error worth retrying. Those errors."""
    transient = (TransientEmbeddingError,)
    todo = [
        s
        for s in work.scopes
        if s not in work.done and (s not in work.errors or isinstance(work.errors[s], transient))
    ]
    if todo:
        label = ScopeGroup.of(todo, work.name).label
        try:
            async with limits.llm:
                done = await embed_scopes_of(
                    pool, todo, label, embedder, log, name=work.name, build_indexes=False
                )
        except Exception as exc:  # the facts are written: only their vectors wait
            for scope in todo:
                work.errors[scope] = exc
        else:
            for scope, got in zip(todo, done, strict=True):
                work.done[scope] = got
                work.errors.pop(scope, None)
    return [e for e in work.errors.values() if isinstance(e, transient)]
