"""Embeddings for relevance by meaning: the bundled local model by default
(:mod:`agent_memory.local_embedding`), or any litellm model (``AGENT_MEMORY_EMBEDDING_MODEL``).

Facts are embedded in the consolidation flow (and by the re-embedding flow after a change of
model), never on the agent's hot path; inject embeds only the user's latest message.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from typing import Any

from agent_memory.causes import (
    connection_cause,
    http_status,
    no_answer,
    origin,
    request_origin,
    status_cause,
)
from agent_memory.db.connection import Database
from agent_memory.errors import EmbeddingError, EmbeddingRejectedError, TransientEmbeddingError
from agent_memory.extraction.call_errors import transient_types
from agent_memory.extraction.llm import _litellm
from agent_memory.local_embedding import LocalEmbedder
from agent_memory.redact import known_secrets, redact
from agent_memory.settings import EmbeddingSettings


class Embedder:
    """Turns texts into unit vectors with the configured litellm embedding model: questions
    (:meth:`embed`) after the settings' ``query_prefix``, stored texts (:meth:`embed_each`)
    after their ``document_prefix``. ``model`` names the vectors it makes (the model, and its
    prefixes when it has any)."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        if not settings.model or settings.active_model is None:
            raise EmbeddingError("no embedding model configured (AGENT_MEMORY_EMBEDDING_MODEL)")
        self.settings = settings
        self.model: str = settings.active_model

    def _kwargs(self, texts: Sequence[str], timeout: float | None, prefix: str) -> dict[str, Any]:
        s = self.settings
        kwargs: dict[str, Any] = {
            "model": s.model,
            "input": [prefix + t for t in texts] if prefix else list(texts),
            "timeout": timeout or s.timeout,
            "num_retries": 0,
            # nor the client's own: a refused connection says so at once rather than being
            # tried again until the deadline, which would report "no answer" instead
            "max_retries": 0,
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
        # the cause in words first (where the call went, and what came back), as for the LLM
        where = request_origin(exc) or origin(self.settings.api_base)
        status = http_status(exc)
        cause = connection_cause(exc, where) or (
            status_cause(status, where) if status is not None else None
        )
        if cause is not None:
            text = f"{cause} ({text})"
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
        self, texts: Sequence[str], timeout: float | None = None, prefix: str | None = None
    ) -> list[list[float] | EmbeddingRejectedError]:
        """One embedding call: a vector per text (after ``prefix``, else the document prefix),
        or the refusal of an all-zero one. The timeout bounds the whole call (litellm's bounds
        each read of the socket)."""
        deadline = timeout or self.settings.timeout
        if prefix is None:
            prefix = self.settings.document_prefix
        try:
            async with asyncio.timeout(deadline):
                response = await _litellm().aembedding(**self._kwargs(texts, timeout, prefix))
        except TimeoutError:
            where = origin(self.settings.api_base)
            raise TransientEmbeddingError(
                f"{no_answer(deadline, where)} (embedding call to {self.model} failed: no "
                f"complete answer within {deadline:g} s, AGENT_MEMORY_EMBEDDING_TIMEOUT)"
            ) from None
        except Exception as exc:
            raise self._error(exc) from None
        return self._vectors(response, len(texts))

    async def embed(
        self, texts: Sequence[str], *, timeout: float | None = None
    ) -> list[list[float]]:
        """One vector per question, in order (one call per ``batch_size`` texts)."""
        out: list[list[float]] = []
        for chunk in self._chunks(texts):
            out.extend(_all_vectors(await self._call(chunk, timeout, self.settings.query_prefix)))
        return out

    async def embed_each(self, texts: Sequence[str]) -> list[list[float] | EmbeddingRejectedError]:
        """One vector per stored text, or why the model refused that text.

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
            _all_vectors(await self._call([_PROBE]))
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
                response = litellm.embedding(
                    **self._kwargs(chunk, timeout, self.settings.query_prefix)
                )
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


def vectors_ready(database: Database) -> str | None:
    """Make sure pgvector and the embeddings table are there: None when ready, else why not."""
    from agent_memory.db import embeddings as repo

    with database.connect(autocommit=True) as conn:
        return repo.ensure(conn)


log = logging.getLogger(__name__)
