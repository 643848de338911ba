"""Embeddings for relevance by meaning: the bundled local model by default
(:mod:`agent_memory.local_embedding`), or any litellm model (``AGENT_MEMORY_EMBEDDING_MODEL``).

Facts are embedded in the consolidation flow (and by the re-embedding flow after a change of
model), never on the agent's hot path; inject embeds only the user's latest message.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, cast

import psycopg
from psycopg_pool import AsyncConnectionPool

from agent_memory.db.connection import Database
from agent_memory.errors import EmbeddingError, EmbeddingRejectedError, TransientEmbeddingError
from agent_memory.extraction.faults import transient_types
from agent_memory.extraction.llm import _litellm
from agent_memory.local_embedding import LocalEmbedder
from agent_memory.models import Scope
from agent_memory.redact import known_secrets, redact
from agent_memory.settings import EmbeddingSettings


class Embedder:
    """Turns texts into unit vectors with the configured litellm embedding model."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        if not settings.model:
            raise EmbeddingError("no embedding model configured (AGENT_MEMORY_EMBEDDING_MODEL)")
        self.settings = settings
        self.model: str = settings.model

    def _kwargs(self, texts: Sequence[str], timeout: float | None) -> dict[str, Any]:
        s = self.settings
        kwargs: dict[str, Any] = {
            "model": self.model,
            "input": list(texts),
            "timeout": timeout or s.timeout,
            "num_retries": 0,
            "drop_params": True,
        }
        if s.api_base:
            kwargs["api_base"] = s.api_base
        if s.api_key:
            kwargs["api_key"] = s.api_key.get_secret_value()
        if s.dimensions:
            kwargs["dimensions"] = s.dimensions
        return kwargs

    def _vectors(self, response: Any, count: int) -> list[list[float] | EmbeddingRejectedError]:
        """A unit vector per text, or the refusal of a text the model gave no usable one."""
        data = sorted(response.data, key=lambda d: d["index"] if isinstance(d, dict) else d.index)
        vectors = [list(d["embedding"] if isinstance(d, dict) else d.embedding) for d in data]
        if len(vectors) != count:
            raise EmbeddingError(
                f"embedding model {self.model} returned {len(vectors)} vectors for {count} texts"
            )
        return [_unit(v, self.model) for v in vectors]

    def _error(self, exc: Exception) -> EmbeddingError:
        secret = self.settings.api_key.get_secret_value() if self.settings.api_key else None
        message = redact(f"{type(exc).__name__}: {exc}", [secret, *known_secrets()])
        text = f"embedding call to {self.model} failed: {message[:500]}"
        litellm = _litellm()
        if isinstance(exc, transient_types(litellm)):
            return TransientEmbeddingError(text)
        # 400 and 422 say the request itself is wrong: for an embedding, one of its texts (too
        # long, against a content policy) or a setting (embed_each tells which with a probe);
        # but not these, which are about the account or the configuration whatever the text
        setting = tuple(getattr(litellm, n) for n in _SETTING_ERRORS if hasattr(litellm, n))
        if isinstance(exc, _refusal_types()) and not isinstance(exc, setting):
            return EmbeddingRejectedError(text)
        return EmbeddingError(text)

    def _chunks(self, texts: Sequence[str]) -> list[Sequence[str]]:
        size = self.settings.batch_size
        return [texts[start : start + size] for start in range(0, len(texts), size)]

    async def _call(
        self, texts: Sequence[str], timeout: float | None = None
    ) -> list[list[float] | EmbeddingRejectedError]:
        """One embedding call: a vector per text, or the refusal of an all-zero one. The
        timeout bounds the whole call (litellm's bounds each read of the socket)."""
        deadline = timeout or self.settings.timeout
        try:
            async with asyncio.timeout(deadline):
                response = await _litellm().aembedding(**self._kwargs(texts, timeout))
        except TimeoutError:
            raise TransientEmbeddingError(
                f"embedding call to {self.model} failed: no complete answer within "
                f"{deadline:g} s (AGENT_MEMORY_EMBEDDING_TIMEOUT)"
            ) from None
        except Exception as exc:
            raise self._error(exc) from None
        return self._vectors(response, len(texts))

    async def embed(
        self, texts: Sequence[str], *, timeout: float | None = None
    ) -> list[list[float]]:
        """One vector per text, in order (one call per ``batch_size`` texts)."""
        out: list[list[float]] = []
        for chunk in self._chunks(texts):
            out.extend(_all_vectors(await self._call(chunk, timeout)))
        return out

    async def embed_each(self, texts: Sequence[str]) -> list[list[float] | EmbeddingRejectedError]:
        """One vector per text, or why the model refused that text.

        When the model refuses a call as bad input, a probe text tells refused texts from a
        model that refuses everything (a wrong setting, such as dimensions it does not offer):
        the latter raises :class:`EmbeddingRejectedError` at once, marking no text refused.
        Otherwise the call is split in halves until the texts it refuses are found (each costs
        about 2·log2(batch_size) calls; the others are embedded), and a second probe makes sure
        the model did not start refusing everything meanwhile.
        """
        out: list[list[float] | EmbeddingRejectedError] = []
        for chunk in self._chunks(texts):
            try:
                out.extend(await self._call(chunk))
                continue
            except EmbeddingRejectedError:
                await self._probe()
            parts = await self._halves(list(chunk))
            if any(isinstance(v, EmbeddingRejectedError) for v in parts):
                await self._probe()
            else:
                log.warning(
                    "embedding model %s refused a call of %d texts but accepted each part; "
                    "AGENT_MEMORY_EMBEDDING_BATCH_SIZE=%d may be above its limit per call",
                    self.model,
                    len(chunk),
                    self.settings.batch_size,
                )
            out.extend(parts)
        return out

    async def _halves(self, texts: list[str]) -> list[list[float] | EmbeddingRejectedError]:
        half = len(texts) // 2
        return [*await self._each(texts[:half]), *await self._each(texts[half:])]

    async def _each(self, texts: list[str]) -> list[list[float] | EmbeddingRejectedError]:
        try:
            return await self._call(texts)
        except EmbeddingRejectedError as exc:
            if len(texts) == 1:
                return [exc]
        return await self._halves(texts)

    async def _probe(self) -> None:
        """Raise when the model refuses a text any model accepts: a setting is wrong."""
        try:
            await self.embed([_PROBE])
        except EmbeddingRejectedError as exc:
            raise EmbeddingRejectedError(
                f"embedding model {self.model} refuses every input, a probe text too; "
                f"check the AGENT_MEMORY_EMBEDDING_* settings ({exc})"
            ) from None

    def embed_sync(
        self, texts: Sequence[str], *, timeout: float | None = None
    ) -> list[list[float]]:
        """:meth:`embed` for sync code."""
        litellm = _litellm()
        out: list[list[float]] = []
        for chunk in self._chunks(texts):
            try:
                response = litellm.embedding(**self._kwargs(chunk, timeout))
            except Exception as exc:
                raise self._error(exc) from None
            out.extend(_all_vectors(self._vectors(response, len(chunk))))
        return out


# BadRequestError subclasses that are about the account or the configuration, not the text
_SETTING_ERRORS = (
    "PaymentRequiredError",
    "UnsupportedParamsError",
    "LiteLLMUnknownProvider",
    "UnsupportedEndpointError",
    "EndpointNotSupportedByModelError",
)


def _refusal_types() -> tuple[type[BaseException], ...]:
    """400 and 422, as litellm raises them and as the openai client does when not wrapped."""
    import openai

    return (openai.BadRequestError, openai.UnprocessableEntityError)


def _all_vectors(results: list[list[float] | EmbeddingRejectedError]) -> list[list[float]]:
    for result in results:
        if isinstance(result, EmbeddingRejectedError):
            raise result
    return [r for r in results if not isinstance(r, EmbeddingRejectedError)]


# a text every embedding model accepts, to tell a refused text from a model that refuses all
_PROBE = "memory"


def _unit(vector: list[float], model: str) -> list[float] | EmbeddingRejectedError:
    """The vector scaled to length 1 (cosine similarity then is a dot product), or the
    refusal of its text when there is nothing to scale."""
    norm = math.sqrt(sum(x * x for x in vector))
    if not vector or not math.isfinite(norm) or norm == 0:
        # no use for this text (the call succeeded, so the model has nothing better for it)
        return EmbeddingRejectedError(f"embedding model {model} returned an empty or zero vector")
    return [x / norm for x in vector]


TextEmbedder = Embedder | LocalEmbedder


def make_embedder(settings: EmbeddingSettings) -> TextEmbedder | None:
    """The embedder the settings name: a litellm model, the bundled local one, or None when
    relevance by meaning is off."""
    if not settings.enabled:
        return None
    if settings.local:
        return LocalEmbedder(settings)
    return Embedder(settings)


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
    from the embedder's model, as :func:`embed_missing` does facts. A message the model refuses
    is stored without a vector (full text still finds it) and not asked for again."""
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

    return await _embed_rows(pool, embedder, repo.missing, store, scopes, limit)


async def _embed_messages(
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
        vectors: list[list[float] | None] = [v for _, v in good]
        await repo.store_snippets(
            conn,
            embedder.model,
            [i for i, _ in good] + [i for i, _ in bad],
            vectors + [None] * len(bad),
        )

    return await _embed_rows(pool, embedder, repo.missing_snippets, store, scopes, limit)


async def ensure_ann_indexes(
    pool: AsyncConnectionPool, embedder: TextEmbedder, scope: Scope
) -> list[str]:
    """Give the scope an HNSW index of its own for its facts and for its messages, each once it
    holds ``AGENT_MEMORY_EMBEDDING_ANN_MIN_ROWS`` vectors (see
    :func:`agent_memory.db.embeddings.ensure_ann_index`); the names of those built now."""
    return [name for _, name in await ensure_ann_indexes_of(pool, embedder, [scope])]


async def ensure_ann_indexes_of(
    pool: AsyncConnectionPool, embedder: TextEmbedder, scopes: Sequence[Scope]
) -> list[tuple[Scope, str]]:
    """:func:`ensure_ann_indexes` for each of ``scopes``, with one read for all of them: the
    indexes built now, each with its scope."""
    import psycopg

    from agent_memory.db import embeddings as repo

    min_rows = embedder.settings.ann_min_rows
    if not min_rows or not scopes:
        return []
    async with pool.connection() as conn:  # a quick read: most scopes have nothing due
        due = await repo.ann_indexes_due(conn, scopes, embedder.model, min_rows)
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
            name = await repo.build_ann_index(conn, d.kind, d.scope_key, d.dims, embedder.model)
            built.append((scopes[d.place], name))
    return built


async def _embed_rows(
    pool: AsyncConnectionPool,
    embedder: TextEmbedder,
    missing: Any,
    store: Any,
    scopes: Sequence[Scope] | None,
    limit: int | None,
) -> dict[int | None, Embedded]:
    """The embedding loop: rows ``missing`` names (of ``scopes``, or of all), a batch at a
    time, each batch stored (the vectors, and the refusals with their reasons) in one
    transaction as it comes. What each scope got, by its place in ``scopes`` (None: all)."""
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
        after = todo[-1][0]
        if len(todo) < size:
            break
    return {
        place: Embedded(stored.get(place, 0), tuple(refusals.get(place, ())))
        for place in {*stored, *refusals}
    }


def vectors_ready(database: Database) -> str | None:
    """Make sure pgvector and the embeddings table are there: None when ready, else why not."""
    from agent_memory.db import embeddings as repo

    with database.connect(autocommit=True) as conn:
        return repo.ensure(conn)


log = logging.getLogger(__name__)
