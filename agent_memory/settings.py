"""Settings, read from environment variables (and a ``.env`` file) with pydantic-settings.

Each area has its own prefix:

* database: ``DATABASE_URL`` (or ``AGENT_MEMORY_DB_URL``), ``AGENT_MEMORY_DB_DATA_DIR``, ...
* LLM: ``AGENT_MEMORY_LLM_MODEL``, ``AGENT_MEMORY_LLM_API_BASE``, ``AGENT_MEMORY_LLM_API_KEY``, ...
* memory policy: ``AGENT_MEMORY_INJECT_LIMIT``, ``AGENT_MEMORY_DECAY_FACTOR``, ...

Example::

    settings = Settings()                      # from the environment
    settings = Settings(llm=LLMSettings(model="openai/gpt-4o-mini"))
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent_memory.models import FactKind


def default_data_dir() -> Path:
    """Where the embedded PostgreSQL keeps its data when no DATABASE_URL is set (per user).

    For root it is /var/lib/agent-memory: the embedded server runs as an unprivileged user and
    needs to traverse the directories above its data, and /root is (rightly) closed to others.
    """
    if os.name == "posix" and os.geteuid() == 0:
        return Path("/var/lib/agent-memory/pgdata")
    return Path(platformdirs.user_data_dir("agent-memory")) / "pgdata"


# the longest half-life a fact may reach, however often it is said (days: a century)
MAX_HALF_LIFE = 36_500.0

# the embedding model that ships inside the wordllama wheel (see agent_memory/local_embedding.py)
LOCAL_MODEL = "wordllama/l2_supercat_256"


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
    data_dir: Path = Field(default_factory=default_data_dir)
    pool_min_size: int = Field(default=1, ge=0, le=1000)
    pool_max_size: int = Field(default=10, ge=1, le=1000)
    connect_timeout: float = Field(default=10.0, gt=0, le=600)

    @model_validator(mode="after")
    def _pool_bounds(self) -> DatabaseSettings:
        if self.pool_min_size > self.pool_max_size:
            raise ValueError(
                f"pool_min_size ({self.pool_min_size}) exceeds pool_max_size ({self.pool_max_size})"
            )
        return self


class LLMSettings(BaseSettings):
    """The model that extracts facts, reached through litellm. No model: the offline extractor."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_LLM_", env_file=".env", extra="ignore"
    )

    model: str | None = Field(default=None, description="litellm model name, e.g. openai/gpt-4o")
    api_base: str | None = None
    api_key: SecretStr | None = None
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=2048, ge=16, le=200_000)
    timeout: float = Field(default=60.0, gt=0, le=3600)
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    batch_tokens: int = Field(
        default=8000,
        ge=100,
        le=2_000_000,
        description="conversation tokens per LLM call; a backlog goes in batches of this size",
    )

    @property
    def offline(self) -> bool:
        """True when no model is configured and the rule-based extractor runs instead."""
        return not self.model


class MemorySettings(BaseSettings):
    """How much to inject, how fast memories fade, and input limits."""

    model_config = SettingsConfigDict(env_prefix="AGENT_MEMORY_", env_file=".env", extra="ignore")

    inject_min_importance: float = Field(default=0.1, ge=0.0, le=1.0)
    inject_limit: int = Field(default=20, ge=1, le=1000)
    decay_factor: float = Field(
        default=0.95,
        gt=0.0,
        lt=1.0,
        description="daily factor of facts of kind general (no kind given): a half-life of "
        "ln 2 / -ln(factor) days, 13.5 at 0.95",
    )
    purge_threshold: float = Field(default=0.05, gt=0.0, lt=1.0)
    reinforce_boost: float = Field(
        default=0.05, ge=0.0, le=1.0, description="added to a fact's importance when said again"
    )
    # -- durability (docs: README "How memory fades") -------------------------------------------
    # half-lives in days by kind; a fact of importance 0.85 lasts about 4 half-lives before it
    # falls below the default purge threshold of 0.05
    half_life_identity: float = Field(
        default=365.0,
        gt=0.0,
        le=MAX_HALF_LIFE,
        description="who the user is: name, family, home, work, diet, health; true for years",
    )
    half_life_preference: float = Field(
        default=180.0,
        gt=0.0,
        le=MAX_HALF_LIFE,
        description="likes, dislikes, ways of working; change over seasons",
    )
    half_life_situation: float = Field(
        default=30.0,
        gt=0.0,
        le=MAX_HALF_LIFE,
        description="ongoing state: a project, a job search, training; true for weeks to months",
    )
    half_life_event: float = Field(
        default=14.0,
        gt=0.0,
        le=MAX_HALF_LIFE,
        description="something that happened; talked about for a few weeks",
    )
    half_life_plan: float = Field(
        default=7.0,
        gt=0.0,
        le=MAX_HALF_LIFE,
        description="an appointment or intention; moot once it is past",
    )
    mention_growth: float = Field(
        default=2.0,
        ge=1.0,
        le=10.0,
        description="a fact said again in another conversation has its half-life multiplied "
        "by this (the spacing effect); 1: no growth",
    )
    max_episode_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)

    # -- what inject returns (docs: README "How inject ranks") ---------------------------------
    inject_ranking: Literal["hybrid", "importance", "text", "vector"] = Field(
        default="hybrid",
        description="hybrid: relevance to the latest user message by full text and by meaning, "
        "fused by rank, with importance and recency as bounded priors; text or vector: one of "
        "the two alone; importance: the most important facts, whatever is asked",
    )
    inject_weight_text: float = Field(
        default=1.0, ge=0.0, le=100.0, description="weight of the full-text ranking in the fusion"
    )
    inject_weight_vector: float = Field(
        default=1.0, ge=0.0, le=100.0, description="weight of the ranking by meaning in the fusion"
    )
    inject_fusion: Literal["rrf", "relative"] = Field(
        default="relative",
        description="how the full-text and the meaning rankings are fused: relative, by "
        "score, each ranking's scores scaled to [0, 1] (full text: the share of the question's "
        "weight a fact holds); rrf, by rank (weight / (k + rank))",
    )
    inject_rrf_k: float = Field(
        default=60.0,
        gt=0.0,
        le=10_000.0,
        description="reciprocal rank fusion constant: a fact at rank r of a ranking adds "
        "weight / (k + r)",
    )
    inject_prior_weight: float = Field(
        default=0.1,
        ge=0.0,
        lt=1.0,
        description="how far importance and recency may re-order matches: a match's fused "
        "relevance is scaled by 1 - w + w * prior, so a prior only passes a match less than "
        "that far ahead",
    )
    inject_weight_importance: float = Field(
        default=1.0, ge=0.0, le=100.0, description="share of importance in the prior"
    )
    inject_weight_recency: float = Field(
        default=1.0, ge=0.0, le=100.0, description="share of recency in the prior"
    )
    inject_recency_half_life_days: float = Field(
        default=7.0, gt=0.0, le=36_500.0, description="days since last mention or use to halve"
    )
    inject_candidates: int = Field(
        default=50,
        ge=1,
        le=100_000,
        description="facts taken from each ranking (full text, meaning, importance) into the "
        "fusion",
    )
    inject_snippets_tokens: int = Field(
        default=300,
        ge=0,
        le=100_000,
        description="tokens of past conversation messages relevant to the question to inject "
        "besides the facts (0: none); about four characters a token",
    )
    inject_reinforce: bool = Field(
        default=False,
        description="restart the decay clock of injected facts (at most once a day per fact)",
    )
    use_growth: float = Field(
        default=1.25,
        ge=1.0,
        le=10.0,
        description="with inject_reinforce, a fact's half-life is multiplied by this for each "
        "day it is injected (a mention's growth is stronger); 1: use only restarts the clock",
    )
    inject_dates: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="say since when each injected fact is true (its conversation's date): "
        "auto, when the question is about time or change (when, since, still, now, ...); "
        "always; never",
    )
    inject_history: int = Field(
        default=0, ge=0, le=100, description="recent episode summaries to inject (0: none)"
    )

    def half_lives(self) -> dict[FactKind, float]:
        """Each fact kind's half-life in days, ``general`` from :attr:`decay_factor`."""
        return {
            "identity": self.half_life_identity,
            "preference": self.half_life_preference,
            "situation": self.half_life_situation,
            "event": self.half_life_event,
            "plan": self.half_life_plan,
            "general": math.log(2) / -math.log(self.decay_factor),
        }

    @field_validator("inject_ranking", mode="before")
    @classmethod
    def _old_ranking_name(cls, value: object) -> object:
        # "relevance" was the weighted mix this ranking replaced; it means the hybrid now
        return "hybrid" if value == "relevance" else value

    @model_validator(mode="after")
    def _some_weight(self) -> MemorySettings:
        if self.inject_ranking == "hybrid" and not (
            self.inject_weight_text or self.inject_weight_vector
        ):
            raise ValueError(
                "inject_ranking 'hybrid' needs inject_weight_text or inject_weight_vector above 0"
            )
        if self.inject_candidates < self.inject_limit:
            raise ValueError(
                f"inject_candidates ({self.inject_candidates}) is below inject_limit "
                f"({self.inject_limit}): relevance ranking would inject fewer facts"
            )
        return self


class EmbeddingSettings(BaseSettings):
    """The embedding model for relevance by meaning, its vectors stored with pgvector.

    Unset, the local model that ships inside the ``wordllama`` package embeds in-process (no
    network, no key); any litellm embedding model replaces it when ``model`` is set.
    ``enabled=False`` turns relevance by meaning off (full text only)."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_EMBEDDING_", env_file=".env", extra="ignore"
    )

    enabled: bool = Field(default=True, description="False: no vectors, full-text relevance")
    model: str | None = Field(
        default=None,
        description=f"litellm embedding model name; unset: the bundled local model ({LOCAL_MODEL})",
    )
    api_base: str | None = None
    api_key: SecretStr | None = None
    dimensions: int | None = Field(default=None, ge=1, le=16_000)
    batch_size: int = Field(default=64, ge=1, le=2048, description="texts per embedding call")
    timeout: float = Field(default=30.0, gt=0, le=600, description="per call, in the flows")
    query_timeout: float = Field(
        default=2.0, gt=0, le=60, description="deadline for embedding a question at inject"
    )
    ann_min_rows: int = Field(
        default=2000,
        ge=0,
        le=100_000_000,
        description="a scope with this many vectors (facts, or messages) gets an HNSW index "
        "of its own, built by the flows (0: never; every vector of a scope is compared)",
    )
    query_cooldown_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="no question embedding for this long after one failed",
    )

    @property
    def active_model(self) -> str | None:
        """The model vectors are made with, None when relevance by meaning is off."""
        if not self.enabled:
            return None
        return self.model or LOCAL_MODEL

    @property
    def local(self) -> bool:
        """True when the bundled local model embeds (no network call)."""
        return self.active_model == LOCAL_MODEL


class JobSettings(BaseSettings):
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
    backoff_max_s: float = Field(default=6 * 3600.0, ge=0.0, le=7 * 86_400.0)


class ConsolidationSettings(BaseSettings):
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


class PrefectSettings(BaseSettings):
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


class TaskRetrySettings(BaseSettings):
    """Retry policy of the pipeline's tasks (each run applies the settings in force)."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_RETRY_", env_file=".env", extra="ignore"
    )

    llm_attempts: int = Field(default=4, ge=0, le=20, description="retries after the first try")
    llm_backoff_s: float = Field(default=2.0, ge=0.0, le=600.0, description="first delay; doubles")
    llm_jitter: float = Field(default=0.5, ge=0.0, le=5.0)
    db_attempts: int = Field(default=2, ge=0, le=20)
    db_delay_s: float = Field(default=1.0, ge=0.0, le=600.0)


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


_override: Settings | None = None
# the environment's settings, and the variables they were read from
_from_environment: tuple[tuple[tuple[str, str], ...], Settings] | None = None
_READS = ("AGENT_MEMORY_", "DATABASE_URL")


def _environment() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith(_READS)))


def get_settings() -> Settings:
    """The settings in force: the ones installed by :func:`use_settings`, else the environment's
    (read once, and again only when one of its variables changed).

    Flows call this once at the start of a run rather than taking a DSN or key as a parameter,
    so secrets never travel in flow parameters (which Prefect stores and shows in its UI).
    """
    global _from_environment
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
