"""Flow parameters shared by the flows (pydantic models, so bad values fail at submission)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_memory.db.scope_keys import namer_for
from agent_memory.models import MAX_SCOPE_PART_CHARS, DecayFrom, Level, Scope
from agent_memory.settings import get_settings


class ScopeParam(BaseModel):
    """Exactly one scope; a part left out is None (it does not mean 'any')."""

    model_config = ConfigDict(extra="forbid")

    user_id: str | None = Field(default=None, max_length=MAX_SCOPE_PART_CHARS)
    agent_id: str | None = Field(default=None, max_length=MAX_SCOPE_PART_CHARS)
    workflow_id: str | None = Field(default=None, max_length=MAX_SCOPE_PART_CHARS)

    def to_scope(self) -> Scope:
        return Scope(self.user_id, self.agent_id, self.workflow_id)

    def key(self) -> str:
        """The scope's pseudonymous key: what run names and artifacts call it (the run's
        parameters name the scope; erasing it deletes such a run from Prefect)."""
        return namer_for(get_settings().db)(self.to_scope())


class ConsolidationParams(BaseModel):
    """What one consolidation run covers."""

    model_config = ConfigDict(extra="forbid")

    scope: ScopeParam | None = Field(default=None, description="one scope; None: all of them")
    max_scopes: int = Field(default=10_000, ge=1, le=1_000_000)
    max_episodes_per_scope: int = Field(
        default=1_000, ge=1, le=100_000, description="episodes loaded per batch, at most"
    )
    max_batches_per_scope: int = Field(
        default=100, ge=1, le=100_000, description="batches per scope in one run, at most"
    )
    shard: int = Field(default=0, ge=0, description="this run's shard of the scopes")
    shard_count: int = Field(
        default=1, ge=1, le=1024, description="shards: runs for each shard share no scope"
    )
    decay_from: DecayFrom = Field(
        default="import",
        description="where facts' decay clock starts: when memory learned them (import) or "
        "when the conversation happened (conversation)",
    )
    level: Level | None = Field(
        default=None,
        description="file every fact at this level of memory (the scope itself for 'workflow' "
        "and 'scope'), where the scope reads it; None: by the rules (docs/guide.md)",
    )

    @model_validator(mode="after")
    def _shard_in_range(self) -> ConsolidationParams:
        if self.shard >= self.shard_count:
            raise ValueError(f"shard {self.shard} is not below shard_count {self.shard_count}")
        return self
