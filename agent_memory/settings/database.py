"""Which PostgreSQL, and its connection pools."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """Where the embedded PostgreSQL keeps its data when no DATABASE_URL is set (per user).

    For root it is /var/lib/agent-memory: the embedded server runs as an unprivileged user and
    needs to traverse the directories above its data, and /root is (rightly) closed to others.
    """
    if os.name == "posix" and os.geteuid() == 0:
        return Path("/var/lib/agent-memory/pgdata")
    return Path(platformdirs.user_data_dir("agent-memory")) / "pgdata"


class DatabaseSettings(BaseSettings):
    """Which PostgreSQL to use and how to pool connections to it."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_DB_", env_file=".env", extra="ignore"
    )

    url: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "AGENT_MEMORY_DB_URL", "url"),
        description="PostgreSQL DSN. Unset: an embedded PostgreSQL in data_dir.",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="the embedded server's data when DATABASE_URL is unset: the user's data "
        "folder (~/.local/share/agent-memory/pgdata; for root /var/lib/agent-memory/pgdata)",
    )
    pool_min_size: int = Field(
        default=1, ge=0, le=1000, description="connections a pool keeps open"
    )
    pool_max_size: int = Field(
        default=10, ge=1, le=1000, description="connections per pool, at most"
    )
    connect_timeout: float = Field(
        default=10.0, gt=0, le=600, description="seconds to wait for a connection"
    )
    generic_plans: bool = Field(
        default=True,
        description="the agent's pool (MemoryManager's) plans each recurring statement once per "
        "connection (plan_cache_mode = force_generic_plan) rather than on every call; off: "
        "PostgreSQL's own choice",
    )

    @model_validator(mode="after")
    def _pool_bounds(self) -> DatabaseSettings:
        if self.pool_min_size > self.pool_max_size:
            raise ValueError(
                f"pool_min_size ({self.pool_min_size}) exceeds pool_max_size ({self.pool_max_size})"
            )
        return self
