"""Flow parameters shared by the flows (pydantic models, so bad values fail at submission)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agent_memory.models import MAX_SCOPE_PART_CHARS, Scope


class ScopeParam(BaseModel):
    """Exactly one scope; a part left out is None (it does not mean 'any')."""

    model_config = ConfigDict(extra="forbid")

    user_id: str | None = Field(default=None, max_length=MAX_SCOPE_PART_CHARS)
    agent_id: str | None = Field(default=None, max_length=MAX_SCOPE_PART_CHARS)
    workflow_id: str | None = Field(default=None, max_length=MAX_SCOPE_PART_CHARS)

    def to_scope(self) -> Scope:
        return Scope(self.user_id, self.agent_id, self.workflow_id)
