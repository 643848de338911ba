"""Embeddings through litellm, for relevance by meaning (``AGENT_MEMORY_EMBEDDING_MODEL``).

Facts are embedded in the consolidation flow (and by the re-embedding flow after a change of
model), never on the agent's hot path; inject embeds only the user's latest message.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from agent_memory.errors import EmbeddingError
from agent_memory.extraction.llm import _litellm
from agent_memory.models import Scope
from agent_memory.redact import redact
from agent_memory.settings import EmbeddingSettings


class Embedder:
    """Turns texts into unit vectors with the configured embedding model."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        if not settings.model:
            raise EmbeddingError("no embedding model configured (AGENT_MEMORY_EMBEDDING_MODEL)")
        self.settings = settings
        self.model: str = settings.model

    def _kwargs(self, texts: Sequence[str]) -> dict[str, Any]:
        s = self.settings
        kwargs: dict[str, Any] = {
            "model": self.model,
            "input": list(texts),
            "timeout": s.timeout,
            "num_retries": 0,
        }
        if s.api_base:
            kwargs["api_base"] = s.api_base
        if s.api_key:
            kwargs["api_key"] = s.api_key.get_secret_value()
        if s.dimensions:
            kwargs["dimensions"] = s.dimensions
        return kwargs

    def _vectors(self, response: Any, count: int) -> list[list[float]]:
        data = sorted(response.data, key=lambda d: d["index"] if isinstance(d, dict) else d.index)
        vectors = [list(d["embedding"] if isinstance(d, dict) else d.embedding) for d in data]
        if len(vectors) != count:
            raise EmbeddingError(
                f"embedding model {self.model} returned {len(vectors)} vectors for {count} texts"
            )
        return [_unit(v, self.model) for v in vectors]

    def _error(self, exc: Exception) -> EmbeddingError:
        secret = self.settings.api_key.get_secret_value() if self.settings.api_key else None
        message = redact(f"{type(exc).__name__}: {exc}", [secret])
        return EmbeddingError(f"embedding call to {self.model} failed: {message[:500]}")

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order (one call per ``batch_size`` texts)."""
        litellm = _litellm()
        out: list[list[float]] = []
        size = self.settings.batch_size
        for start in range(0, len(texts), size):
            chunk = texts[start : start + size]
            try:
                response = await litellm.aembedding(**self._kwargs(chunk))
            except Exception as exc:
                raise self._error(exc) from None
            out.extend(self._vectors(response, len(chunk)))
        return out

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """:meth:`embed` for sync code."""
        litellm = _litellm()
        out: list[list[float]] = []
        size = self.settings.batch_size
        for start in range(0, len(texts), size):
            chunk = texts[start : start + size]
            try:
                response = litellm.embedding(**self._kwargs(chunk))
            except Exception as exc:
                raise self._error(exc) from None
            out.extend(self._vectors(response, len(chunk)))
        return out


def _unit(vector: list[float], model: str) -> list[float]:
    """The vector scaled to length 1 (cosine similarity then is a dot product)."""
    norm = math.sqrt(sum(x * x for x in vector))
    if not vector or not math.isfinite(norm) or norm == 0:
        raise EmbeddingError(f"embedding model {model} returned an empty or zero vector")
    return [x / norm for x in vector]


async def embed_missing(
    pool: Any, embedder: Embedder, scope: Scope | None = None, *, limit: int | None = None
) -> int:
    """Embed the current facts (of ``scope``, or all) that have no embedding from the
    embedder's model, a batch at a time, each batch stored as it comes; how many were stored.
    Safe to rerun: what is stored is not asked for again."""
    from agent_memory.db import embeddings as repo

    done = 0
    while limit is None or done < limit:
        size = (
            embedder.settings.batch_size
            if limit is None
            else min(embedder.settings.batch_size, limit - done)
        )
        async with pool.connection() as conn:
            todo = await repo.missing(conn, embedder.model, scope, size)
        if not todo:
            break
        vectors = await embedder.embed([content for _, content in todo])
        async with pool.connection() as conn:
            await repo.store(conn, embedder.model, [i for i, _ in todo], vectors)
        done += len(todo)
        if len(todo) < size:
            break
    return done


def vectors_ready(database: Any) -> str | None:
    """Make sure pgvector and the embeddings table are there: None when ready, else why not."""
    from agent_memory.db import embeddings as repo

    with database.connect(autocommit=True) as conn:
        return repo.ensure(conn)
