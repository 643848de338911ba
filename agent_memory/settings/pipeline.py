"""The pipeline: failed scopes' backoff, groups, the tasks' retries, the local Prefect server."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from agent_memory.settings._env import EnvSettings


class JobSettings(EnvSettings):
    """When a scope whose consolidation failed is tried again, and when it is parked."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_JOB_", env_file=".env", extra="ignore"
    )

    attempts: int = Field(
        default=5, ge=1, le=1000, description="failed attempts before a scope is parked (dead)"
    )
    backoff_s: float = Field(
        default=300.0, ge=0.0, le=86_400.0, description="wait after the first failure; doubles"
    )
    backoff_max_s: float = Field(
        default=6 * 3600.0, ge=0.0, le=7 * 86_400.0, description="the longest wait between attempts"
    )


class ConsolidationSettings(EnvSettings):
    """How a consolidation run splits its scopes into task runs."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_CONSOLIDATION_", env_file=".env", extra="ignore"
    )

    group_size: int = Field(
        default=50,
        ge=1,
        le=10_000,
        description="scopes per group: each step (load, extract, write) is one task run per "
        "group; see docs/operations.md for the trade-off",
    )


class PrefectSettings(EnvSettings):
    """Which Prefect server the command line's runs report to when PREFECT_API_URL is unset."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_PREFECT_", env_file=".env", extra="ignore"
    )

    server: Literal["background", "ephemeral"] = Field(
        default="background",
        description="background: start one local server (UI included) on the first command "
        "that runs a flow and reuse it; ephemeral: Prefect's own server for each command",
    )
    port: int = Field(default=4200, ge=1, le=65535, description="the background server's port")
    start_timeout_s: float = Field(
        default=180.0, gt=0, le=3600, description="how long a command waits for it to start"
    )
    idle_s: float = Field(
        default=3600.0,
        ge=60,
        le=30 * 86_400,
        description="the background server stops after this long without a command",
    )


class TaskRetrySettings(EnvSettings):
    """Retry policy of the pipeline's tasks (each run applies the settings in force)."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_RETRY_", env_file=".env", extra="ignore"
    )

    llm_attempts: int = Field(
        default=4,
        ge=0,
        le=20,
        description="retries of an LLM or embedding step after its first try",
    )
    llm_backoff_s: float = Field(
        default=2.0, ge=0.0, le=600.0, description="first delay of those retries; doubles"
    )
    llm_jitter: float = Field(
        default=0.5, ge=0.0, le=5.0, description="random share added to each LLM retry's delay"
    )
    db_attempts: int = Field(
        default=2, ge=0, le=20, description="retries of a step whose database connection broke"
    )
    db_delay_s: float = Field(
        default=1.0, ge=0.0, le=600.0, description="delay before each of those retries"
    )
