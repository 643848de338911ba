"""Which PostgreSQL, and its connection pools."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
import psycopg
from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from agent_memory.settings._env import EnvSettings


def default_data_dir() -> Path:
    """Where the embedded PostgreSQL keeps its data when no DATABASE_URL is set (per user).

    For root it is /var/lib/agent-memory: the embedded server runs as an unprivileged user and
    needs to traverse the directories above its data, and /root is (rightly) closed to others.
    """
    if os.name == "posix" and os.geteuid() == 0:
        return Path("/var/lib/agent-memory/pgdata")
    return Path(platformdirs.user_data_dir("agent-memory")) / "pgdata"


class DatabaseSettings(EnvSettings):
    """Which PostgreSQL to use and how to pool connections to it."""

    # hide_input_in_errors: a DSN's password must not reach an error (pydantic shows the input)
    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_DB_", env_file=".env", extra="ignore", hide_input_in_errors=True
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

    read_url: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("AGENT_MEMORY_READ_DATABASE_URL", "read_url"),
        description="DSN of a PostgreSQL streaming replica of DATABASE_URL (same roles and "
        "passwords). Set: inject, search and conversation search read there while it keeps up "
        "(AGENT_MEMORY_READ_MAX_LAG_SECONDS), and every write still goes to DATABASE_URL. "
        "Unset or empty: everything on DATABASE_URL",
    )
    read_max_lag: float = Field(
        default=5.0,
        ge=0,
        le=86400,
        validation_alias=AliasChoices("AGENT_MEMORY_READ_MAX_LAG_SECONDS", "read_max_lag"),
        description="seconds the replica may be behind; further behind, not streaming from "
        "its primary, or unreachable, reads go to DATABASE_URL until it catches up (0: only "
        "when it has replayed all it received)",
    )
    read_lag_check: float = Field(
        default=1.0,
        ge=0,
        le=3600,
        validation_alias=AliasChoices("AGENT_MEMORY_READ_LAG_CHECK_SECONDS", "read_lag_check"),
        description="how often the replica's lag is asked (one inject in that time asks it; "
        "the others use the answer); an unreachable replica is tried again after 5 s or this, "
        "whichever is longer",
    )
    read_timeout: float = Field(
        default=1.0,
        gt=0,
        le=60,
        validation_alias=AliasChoices("AGENT_MEMORY_READ_TIMEOUT_SECONDS", "read_timeout"),
        description="the most a read waits on the replica (a connection, the lag check, the "
        "statements) before it is read on DATABASE_URL instead",
    )

    @field_validator("read_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("read_url")
    @classmethod
    def _read_url_parses(cls, value: SecretStr | None) -> SecretStr | None:
        # libpq's own message may quote a piece of the string (a password): not repeated
        if value is not None:
            try:
                psycopg.conninfo.conninfo_to_dict(value.get_secret_value())
            except psycopg.Error:
                raise ValueError(
                    "AGENT_MEMORY_READ_DATABASE_URL is not a PostgreSQL connection string: give "
                    "a URL (postgresql://user@host:5432/dbname) or key=value pairs (host=... "
                    "dbname=...)"
                ) from None
        return value

    @model_validator(mode="after")
    def _pool_bounds(self) -> DatabaseSettings:
        if self.pool_min_size > self.pool_max_size:
            raise ValueError(
                f"pool_min_size ({self.pool_min_size}) exceeds pool_max_size ({self.pool_max_size})"
            )
        return self
