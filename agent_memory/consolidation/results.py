"""How a consolidation ends: a result per scope, and the run's summary of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from agent_memory.models import Scope

Outcome = Literal["completed", "skipped", "failed", "busy", "empty"]


@dataclass
class ScopeResult:
    """How one scope's consolidation ended (one row of the run's summary artifact)."""

    scope: Scope
    outcome: Outcome
    job_id: int | None = None
    episodes: int = 0
    facts_created: int = 0
    facts_reinforced: int = 0
    facts_updated: int = 0
    facts_invalidated: int = 0
    extractor: str | None = None
    cached: bool = False
    error: str | None = None
    repairs: list[str] = field(default_factory=list)
    more: bool = False  # the scope has pending episodes after this batch
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    cost_usd: float | None = None
    batches: int = 1
    failures: int = 0  # failed attempts in a row (for a failed scope)
    parked: bool = False  # failed too often: waits for an operator (`agent-memory jobs retry`)

    def row(self) -> dict[str, Any]:
        return {
            "scope": self.scope.label,
            "outcome": self.outcome,
            "job": self.job_id,
            "batches": self.batches,
            "episodes": self.episodes,
            "facts_created": self.facts_created,
            "facts_reinforced": self.facts_reinforced,
            "facts_updated": self.facts_updated,
            "facts_invalidated": self.facts_invalidated,
            "extractor": self.extractor or "",
            "llm_calls": self.llm_calls,
            "tokens_in": self.prompt_tokens,
            "tokens_out": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "error": self.error or "",
        }


def merge(scope: Scope, results: list[ScopeResult]) -> ScopeResult:
    """One scope's batches as one summary row: failed if any batch failed."""
    if len(results) == 1:
        return results[0]
    outcomes = [r.outcome for r in results]
    outcome: Outcome = next(
        (o for o in ("failed", "completed", "skipped") if o in outcomes), outcomes[-1]
    )
    costs = [r.cost_usd for r in results if r.cost_usd is not None]
    return ScopeResult(
        scope=scope,
        outcome=outcome,
        job_id=results[-1].job_id,
        episodes=sum(r.episodes for r in results),
        facts_created=sum(r.facts_created for r in results),
        facts_reinforced=sum(r.facts_reinforced for r in results),
        facts_updated=sum(r.facts_updated for r in results),
        facts_invalidated=sum(r.facts_invalidated for r in results),
        extractor=next((r.extractor for r in results if r.extractor), None),
        error=next((r.error for r in results if r.error), None),
        repairs=[x for r in results for x in r.repairs],
        prompt_tokens=sum(r.prompt_tokens for r in results),
        completion_tokens=sum(r.completion_tokens for r in results),
        llm_calls=sum(r.llm_calls for r in results),
        cost_usd=sum(costs) if costs else None,
        batches=len(results),
    )


class RunSummary(TypedDict):
    """A consolidation run's summary, as the flows return it (and ``MemoryManager.consolidate``,
    the CLI and the artifacts read it): counts by outcome, totals, and a row per scope."""

    extractor: str
    scopes: int
    completed: int
    skipped: int
    failed: int
    busy: int
    episodes: int
    facts_created: int
    facts_reinforced: int
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    results: list[dict[str, Any]]
    held_back: str | None


class BackfillSummary(RunSummary, total=False):
    """A backfill run's summary: a consolidation run's, and what the backfill found."""

    pending_before: int  # episodes pending in the backfill's window when it started
    facts_below_purge_threshold: int  # of the backfilled scopes: gone at the next decay


def run_summary(
    results: list[ScopeResult], extractor: str, held_back: str | None = None
) -> RunSummary:
    """The summary of a run whose scopes ended as ``results``; ``held_back``: what it said of
    the scopes it left for later."""
    costs = [r.cost_usd for r in results if r.cost_usd is not None]
    return RunSummary(
        extractor=extractor,
        scopes=len(results),
        completed=sum(r.outcome == "completed" for r in results),
        skipped=sum(r.outcome == "skipped" for r in results),
        failed=sum(r.outcome == "failed" for r in results),
        busy=sum(r.outcome == "busy" for r in results),
        episodes=sum(r.episodes for r in results),
        facts_created=sum(r.facts_created for r in results),
        facts_reinforced=sum(r.facts_reinforced for r in results),
        llm_calls=sum(r.llm_calls for r in results),
        prompt_tokens=sum(r.prompt_tokens for r in results),
        completion_tokens=sum(r.completion_tokens for r in results),
        cost_usd=sum(costs) if costs else None,
        results=[r.row() for r in results],
        held_back=held_back,
    )
