"""Embedding an agent's question on the hot path, within a deadline, or saying it cannot."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time

from agent_memory.db.connection import Database
from agent_memory.embedding import TextEmbedder, make_embedder, vectors_ready
from agent_memory.errors import EmbeddingRejectedError
from agent_memory.extraction.llm import _litellm
from agent_memory.local_embedding import LocalEmbedder
from agent_memory.local_embedding import load as load_local
from agent_memory.local_embedding import loaded as local_loaded
from agent_memory.settings import EmbeddingSettings


class QueryEmbedder:
    """The hot-path side: embeds an agent's question within a deadline, or says it cannot.

    Never raises: a server without pgvector (checked once; said once in the log), a failed or
    slow embedding call (then no call for ``cooldown_s``, so a dead service costs one deadline,
    not one per turn), a question the model refuses (just that one, unless it refused the two
    before as well: then the cool-down too) all give None, and inject ranks by full-text
    relevance instead.

    The bundled local model embeds in-process in microseconds, so it has no deadline to keep;
    the in-process E5 takes milliseconds, so it embeds on a thread within the deadline. Until
    a local model is loaded (:meth:`warm`, which ``MemoryManager.create`` calls) a question
    gets None and the load goes on in the background, so no inject waits for it.
    """

    def __init__(self, settings: EmbeddingSettings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self.embedder: TextEmbedder | None = None
        self._checked = settings.active_model is None  # nothing to check without a model
        self._down_until = 0.0
        self._refusals = 0  # questions refused in a row
        self._lock = threading.Lock()
        self._loading: threading.Thread | None = None

    @property
    def model(self) -> str | None:
        return self.embedder.model if self.embedder else None

    def ready(self) -> TextEmbedder | None:
        """The embedder, once pgvector is known to be there (a transient failure to find out
        is tried again on a later call; a permanent one is said once and kept)."""
        if self._checked:
            return self.embedder
        with self._lock:
            if self._checked:
                return self.embedder
            try:
                reason = vectors_ready(self.database)
            except Exception as exc:  # the database is busy or away: find out next time
                log.warning("could not check for pgvector (%s); full-text relevance for now", exc)
                return None
            if reason is None:
                self.embedder = make_embedder(self.settings)
            else:
                log.warning(
                    "relevance by meaning is on (%s), but this server cannot store "
                    "embeddings (%s); relevance falls back to full-text search",
                    self.settings.active_model,
                    reason,
                )
            self._checked = True
            return self.embedder

    def warm(self) -> None:
        """Pay the one-time costs before the first question: the pgvector check, and loading
        the local model or importing litellm. Never raises (a failure is logged, and inject
        ranks by full text until it is resolved)."""
        try:
            embedder = self.ready()
            if isinstance(embedder, LocalEmbedder):
                load_local(embedder.model)
            elif embedder is not None:
                _litellm()
        except Exception as exc:
            log.warning("warming up the embedding model failed: %s", exc)

    def _local_loaded(self, embedder: LocalEmbedder) -> bool:
        """True once the local model is in memory; else start loading it in the background."""
        if local_loaded(embedder.model):
            return True
        with self._lock:
            if self._loading is None or not self._loading.is_alive():
                self._loading = threading.Thread(
                    target=self.warm, name="agent-memory-embedding-load", daemon=True
                )
                self._loading.start()
        return False

    def _usable(self) -> TextEmbedder | None:
        if time.monotonic() < self._down_until:
            return None
        return self.ready()

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, EmbeddingRejectedError):
            self._refusals += 1
            if self._refusals < _REFUSALS_BEFORE_COOLDOWN:
                # the service is up and refused this question (too long, say): the next may do
                log.warning("embedding the question was refused (%s); full text for it", exc)
                return
        self._refusals = 0
        self._down_until = time.monotonic() + self.settings.query_cooldown_s
        reason = "timed out" if isinstance(exc, TimeoutError) else str(exc)
        log.warning(
            "embedding the question failed (%s); ranking by full-text relevance, and not "
            "calling %s again for %g s",
            reason,
            self.settings.active_model,
            self.settings.query_cooldown_s,
        )

    def _local(self, embedder: LocalEmbedder, text: str) -> list[float] | None:
        # a text with nothing to embed says nothing about the model: None, no cool-down
        return embedder.query(text) if self._local_loaded(embedder) else None

    async def embed(self, text: str) -> list[float] | None:
        embedder = self._usable() if self._checked else await asyncio.to_thread(self._usable)
        if embedder is None:
            return None
        if isinstance(embedder, LocalEmbedder) and embedder.inline:
            return self._local(embedder, text)
        deadline = self.settings.query_timeout
        try:
            if isinstance(embedder, LocalEmbedder):
                # a thread of its own: the event loop's other tasks go on while it embeds
                local = asyncio.to_thread(self._local, embedder, text)
                return await asyncio.wait_for(local, deadline)
            vectors = await asyncio.wait_for(embedder.embed([text], timeout=deadline), deadline)
        except Exception as exc:
            self._failed(exc)
            return None
        self._refusals = 0
        return vectors[0]

    def embed_sync(self, text: str) -> list[float] | None:
        embedder = self._usable()
        if embedder is None:
            return None
        if isinstance(embedder, LocalEmbedder) and embedder.inline:
            return self._local(embedder, text)
        deadline = self.settings.query_timeout
        # a thread of its own, so the deadline holds however the client retries
        future = (
            _QUERY_POOL.submit(lambda: [self._local(embedder, text)])
            if isinstance(embedder, LocalEmbedder)
            else _QUERY_POOL.submit(embedder.embed_sync, [text], timeout=deadline)
        )
        try:
            vector = future.result(timeout=deadline)[0]
        except Exception as exc:
            self._failed(exc)
            return None
        self._refusals = 0
        return vector


# a model that refuses this many questions in a row is more likely set up wrong than asked as
# many bad questions: it gets the cool-down of a failing service
_REFUSALS_BEFORE_COOLDOWN = 3
_QUERY_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="embed")
# one channel for what embedding says, on the hot path or in the flows
log = logging.getLogger("agent_memory.embedding")
