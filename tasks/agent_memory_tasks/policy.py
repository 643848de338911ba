"""How the pipeline's steps become Prefect tasks: no cache, no stored result, and the retry
policy of their kind, from the run's ``AGENT_MEMORY_RETRY_*`` settings.

A step is declared once with :func:`step` (its policy at the settings' defaults); a flow runs
it as :func:`configured` for the settings in force in that run (a manager's, or those
installed by ``use_settings``), so nothing is read from the environment at import.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal, ParamSpec, TypeVar, cast

import psycopg
from prefect import Task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State, TaskRun
from prefect.tasks import exponential_backoff

from agent_memory.errors import StepError, TransientEmbeddingError, TransientExtractionError
from agent_memory.settings import TaskRetrySettings

RetryKind = Literal["db", "llm", "embedding", "none"]
T = TypeVar("T", bound=Task[Any, Any])
P = ParamSpec("P")
R = TypeVar("R")

# Steps take a connection pool, which cannot be hashed or persisted: no cache, no result storage.
STEP: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False}


async def _transient(exc_types: tuple[type[BaseException], ...], state: State[Any]) -> bool:
    error = await state.aresult(raise_on_failure=False)
    if isinstance(error, StepError):  # told the orchestrator without its words: the failure
        error = error.error
    return isinstance(error, exc_types)


async def retry_llm(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry rate limits, 5xx, timeouts and refused connections; not bad answers."""
    return await _transient((TransientExtractionError,), state)


async def retry_embedding(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry rate limits, 5xx, timeouts and refused connections (the facts are written; only
    their vectors wait); not refusals, credentials or settings, which a retry cannot fix."""
    return await _transient((TransientEmbeddingError,), state)


async def retry_db(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry when the database connection broke (a restart, a network blip); not SQL errors."""
    return await _transient((psycopg.OperationalError,), state)


def retry_options(kind: RetryKind, retry: TaskRetrySettings) -> dict[str, Any]:
    """The task options of a step of ``kind`` under ``retry``."""
    if kind == "none":
        return {"retries": 0}
    if kind == "db":
        return {
            "retries": retry.db_attempts,
            "retry_delay_seconds": retry.db_delay_s,
            "retry_condition_fn": retry_db,
        }
    delay = exponential_backoff(backoff_factor=retry.llm_backoff_s) if retry.llm_backoff_s else 0
    return {
        "retries": retry.llm_attempts,
        "retry_delay_seconds": delay,
        "retry_jitter_factor": retry.llm_jitter,
        "retry_condition_fn": retry_llm if kind == "llm" else retry_embedding,
    }


# the field defaults, not the environment: a run applies its own settings
DEFAULTS = TaskRetrySettings.model_construct()
_KINDS: dict[str, RetryKind] = {}
_configured: dict[tuple[int, str], Any] = {}
_lock = threading.Lock()


def step(kind: RetryKind, name: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """Declare a pipeline step named ``name`` whose retries are of ``kind``."""

    def declare(fn: Callable[P, R]) -> Task[P, R]:
        _KINDS[name] = kind
        return Task(fn=fn, name=name, **STEP, **retry_options(kind, DEFAULTS), **options)

    return declare


def configured(declared: T, retry: TaskRetrySettings) -> T:
    """``declared`` with the retry policy of its kind under ``retry`` (made once per task and
    settings: a run calls its steps many times)."""
    key = (id(declared), retry.model_dump_json())
    with _lock:
        found = _configured.get(key)
        if found is None:
            options = retry_options(_KINDS[declared.name], retry)
            found = _configured[key] = declared.with_options(**options)
    return cast(T, found)
