"""What a call to a model cost: tokens, money, time and calls, added up over a job's
extractions (their retries too) and recorded with the job (`agent_memory.db.jobs`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Usage:
    """What one extraction cost."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    latency_s: float = 0.0
    calls: int = 0

    def add(self, other: Usage | None) -> None:
        """Count ``other`` in (retries and failed attempts are paid for too)."""
        if other is None:
            return
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.latency_s += other.latency_s
        self.calls += other.calls
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd
