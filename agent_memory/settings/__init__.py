"""Settings, read from environment variables (and a ``.env`` file) with pydantic-settings.

Each area has its own prefix:

* database: ``DATABASE_URL`` (or ``AGENT_MEMORY_DB_URL``), ``AGENT_MEMORY_DB_DATA_DIR``, ...
* LLM: ``AGENT_MEMORY_LLM_MODEL``, ``AGENT_MEMORY_LLM_API_BASE``, ``AGENT_MEMORY_LLM_API_KEY``, ...
* memory policy: ``AGENT_MEMORY_INJECT_LIMIT``, ``AGENT_MEMORY_DECAY_FACTOR``, ...
* the MCP server: ``AGENT_MEMORY_MCP_AUTH_TOKEN``

Example::

    settings = Settings()                      # from the environment
    settings = Settings(llm=LLMSettings(model="openai/gpt-4o-mini"))
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from pydantic import BaseModel, Field

from agent_memory.settings.database import DatabaseSettings, default_data_dir
from agent_memory.settings.mcp import MCPSettings
from agent_memory.settings.memory import MAX_HALF_LIFE, MemorySettings
from agent_memory.settings.models import (
    E5_MODEL,
    LOCAL_MODEL,
    EmbeddingSettings,
    LLMSettings,
)
from agent_memory.settings.pipeline import (
    ConsolidationSettings,
    JobSettings,
    PrefectSettings,
    TaskRetrySettings,
)

__all__ = [
    "E5_MODEL",
    "LOCAL_MODEL",
    "MAX_HALF_LIFE",
    "ConsolidationSettings",
    "DatabaseSettings",
    "EmbeddingSettings",
    "JobSettings",
    "LLMSettings",
    "MCPSettings",
    "MemorySettings",
    "PrefectSettings",
    "Settings",
    "TaskRetrySettings",
    "default_data_dir",
    "get_settings",
    "settings_in_force",
    "use_settings",
]


class Settings(BaseModel):
    """All settings; each part reads its own environment variables."""

    db: DatabaseSettings = Field(default_factory=DatabaseSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    prefect: PrefectSettings = Field(default_factory=PrefectSettings)
    consolidation: ConsolidationSettings = Field(default_factory=ConsolidationSettings)
    task_retries: TaskRetrySettings = Field(default_factory=TaskRetrySettings)
    mcp: MCPSettings = Field(default_factory=MCPSettings)


_override: Settings | None = None
# the settings of one run (settings_in_force): this task and what it starts, not the process
_scoped: ContextVar[Settings | None] = ContextVar("agent_memory_settings", default=None)
# the environment's settings, and the variables they were read from
_from_environment: tuple[tuple[tuple[str, str], ...], Settings] | None = None
_READS = ("AGENT_MEMORY_", "DATABASE_URL")


def _environment() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith(_READS)))


def get_settings() -> Settings:
    """The settings in force: those of the run this is part of (`settings_in_force`),
    else the ones installed by `use_settings`, else the environment's (read once, and
    again only when one of its variables changed).

    Flows call this once at the start of a run rather than taking a DSN or key as a parameter,
    so secrets never travel in flow parameters (which Prefect stores and shows in its UI).
    """
    global _from_environment
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    if _override is not None:
        return _override
    seen = _environment()
    if _from_environment is None or _from_environment[0] != seen:
        _from_environment = (seen, Settings())
    return _from_environment[1]


def use_settings(settings: Settings | None) -> None:
    """Install ``settings`` for this process (``None`` goes back to the environment)."""
    global _override
    _override = settings


@contextmanager
def settings_in_force(settings: Settings) -> Iterator[Settings]:
    """``settings`` in force for the code inside the ``with`` only: this task, and the tasks,
    threads and Prefect runs it starts meanwhile (a context variable, which they copy), never
    the rest of the process. Two managers with settings of their own each run their flows
    under theirs, at the same time too.

    Example::

        with settings_in_force(manager.settings):
            await consolidation_flow(params)   # get_settings() in the run: the manager's
    """
    token = _scoped.set(settings)
    try:
        yield settings
    finally:
        _scoped.reset(token)
