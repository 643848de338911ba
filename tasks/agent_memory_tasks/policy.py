"""Retry policies shared by the tasks, from ``AGENT_MEMORY_RETRY_*`` settings."""

from __future__ import annotations

from typing import Any

import psycopg
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from agent_memory.errors import TransientEmbeddingError, TransientExtractionError
from agent_memory.settings import RetrySettings

_retry = RetrySettings()

# Steps take a connection pool, which cannot be hashed or persisted: no cache, no result storage.
STEP: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False}


async def _transient(exc_types: tuple[type[BaseException], ...], state: Any) -> bool:
    error = await state.aresult(raise_on_failure=False)
    return isinstance(error, exc_types)


async def retry_llm(task: Any, task_run: Any, state: Any) -> bool:
    """Retry rate limits, 5xx, timeouts and refused connections; not bad answers."""
    return await _transient((TransientExtractionError,), state)


async def retry_embedding(task: Any, task_run: Any, state: Any) -> bool:
    """Retry rate limits, 5xx, timeouts and refused connections (the facts are written; only
    their vectors wait); not refusals, credentials or settings, which a retry cannot fix."""
    return await _transient((TransientEmbeddingError,), state)


async def retry_db(task: Any, task_run: Any, state: Any) -> bool:
    """Retry when the database connection broke (a restart, a network blip); not SQL errors."""
    return await _transient((psycopg.OperationalError,), state)


LLM_RETRIES: dict[str, Any] = {
    "retries": _retry.llm_attempts,
    "retry_delay_seconds": exponential_backoff(backoff_factor=_retry.llm_backoff_s)
    if _retry.llm_backoff_s > 0
    else 0,
    "retry_jitter_factor": _retry.llm_jitter,
    "retry_condition_fn": retry_llm,
}

DB_RETRIES: dict[str, Any] = {
    "retries": _retry.db_attempts,
    "retry_delay_seconds": _retry.db_delay_s,
    "retry_condition_fn": retry_db,
}

EMBED_RETRIES: dict[str, Any] = {**LLM_RETRIES, "retry_condition_fn": retry_embedding}
