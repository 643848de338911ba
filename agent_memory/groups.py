"""Scopes consolidated in groups: one step at a time for many scopes, each keeping its outcome.

A run's scopes are cut into groups (``AGENT_MEMORY_CONSOLIDATION_GROUP_SIZE``), and each step
(load, extract, write, record failures) runs once per group, concurrently for its members: the
orchestrator sees a few task runs per group instead of three per scope. The scope stays the
unit of work and of outcome: each :class:`Member` has its own batch, extraction, job row,
result or error, and one scope's failure never fails another's.

A step is retried as a whole (by its task's retry policy), but a retry redoes only the members
whose step failed with an error worth retrying: the others keep what they got, so a retried
extraction calls the model only for scopes that have no answer yet.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Literal

from psycopg_pool import AsyncConnectionPool

from agent_memory import consolidation as steps
from agent_memory.consolidation import ScopeBatch, ScopeResult
from agent_memory.decay import DEFAULT_REINFORCEMENT, Reinforcement
from agent_memory.extraction.base import Extraction, Extractor
from agent_memory.models import DecayFrom, Scope, Window
from agent_memory.settings import JobSettings

Stage = Literal["claimed", "loaded", "extracted", "done"]


@dataclass
class Member:
    """One scope of a group, and how far its current batch got.

    ``stage``: ``claimed`` (its next batch is to be loaded), ``loaded``, ``extracted``, then
    back to ``claimed`` for a backlog's next batch, or ``done``. ``error``: why its current
    step failed; the member stays at that step until a retry succeeds or the failure is
    recorded.
    """

    scope: Scope
    stage: Stage = "claimed"
    batch: ScopeBatch | None = None
    extraction: Extraction | None = None
    error: Exception | None = None
    results: list[ScopeResult] = field(default_factory=list)  # one per batch written or failed

    def finish_batch(self, result: ScopeResult, max_batches: int) -> None:
        """Record a batch's result; the member goes on to its next batch if it has one."""
        self.results.append(result)
        self.batch, self.extraction, self.error = None, None, None
        go_on = result.outcome == "completed" and result.more and len(self.results) < max_batches
        self.stage = "claimed" if go_on else "done"

    def outcome(self) -> ScopeResult:
        """The scope's result over all of its batches in this run."""
        if not self.results:
            return ScopeResult(self.scope, "empty")
        return steps.merge(self.scope, self.results)


@dataclass
class ScopeGroup:
    """Scopes whose steps run together; ``label`` names them in task runs and logs."""

    members: list[Member]
    label: str

    @classmethod
    def of(cls, scopes: Sequence[Scope]) -> ScopeGroup:
        if len(scopes) == 1:
            label = scopes[0].label
        else:
            label = f"{len(scopes)} scopes: {scopes[0].label} \u2026 {scopes[-1].label}"
        return cls([Member(s) for s in scopes], label)

    def at(self, stage: Stage) -> list[Member]:
        return [m for m in self.members if m.stage == stage]

    def failing(self) -> list[Member]:
        """Members whose current step failed and was not redone."""
        return [m for m in self.members if m.error is not None and m.stage != "done"]


def split(scopes: Sequence[Scope], size: int) -> list[ScopeGroup]:
    """``scopes`` in groups of at most ``size``, as even as that allows (50 scopes in groups of
    at most 40 make two of 25, not 40 and 10)."""
    if not scopes:
        return []
    count = math.ceil(len(scopes) / size)
    each, extra = divmod(len(scopes), count)
    groups, start = [], 0
    for i in range(count):
        end = start + each + (1 if i < extra else 0)
        groups.append(ScopeGroup.of(scopes[start:end]))
        start = end
    return groups


def groups_in_flight(group_size: int, llm_calls: int) -> int:
    """How many groups a run works on at once: enough that while some load or write, the
    others keep every LLM slot busy (members for four times the slots), and at least three
    (one loading, one extracting, one writing)."""
    return max(3, math.ceil(4 * llm_calls / group_size))


@dataclass(frozen=True)
class BatchPlan:
    """How a run cuts and writes its scopes' batches."""

    flow_run_id: str | None
    max_episodes: int
    max_batches: int
    token_budget: int = 8000
    window: Window | None = None
    decay_from: DecayFrom = "import"
    reinforce: Reinforcement = DEFAULT_REINFORCEMENT
    # when a failed scope is tried again, and when it is parked
    failures: JobSettings = field(default_factory=JobSettings.model_construct)


@dataclass
class Limits:
    """What a run's members share: ``llm`` bounds model calls in flight, ``db`` the steps that
    hold a pooled connection (waiting here has no deadline, unlike waiting for the pool)."""

    llm: asyncio.Semaphore
    db: asyncio.Semaphore

    @classmethod
    def of(cls, llm_calls: int, connections: int) -> Limits:
        return cls(asyncio.Semaphore(llm_calls), asyncio.Semaphore(connections))


async def run_step(
    members: Sequence[Member],
    step: Callable[[Member], Awaitable[None]],
    retryable: tuple[type[BaseException], ...],
    limit: asyncio.Semaphore | None = None,
) -> list[Member]:
    """Run ``step`` concurrently for ``members`` (the step moves each one on), except those
    whose last failure at this step was not worth retrying. A member's error is kept on it;
    returns the members whose step failed with a ``retryable`` error."""
    todo = [m for m in members if m.error is None or isinstance(m.error, retryable)]

    async def one(member: Member) -> None:
        guard: AbstractAsyncContextManager[object] = limit if limit is not None else nullcontext()
        try:
            async with guard:
                await step(member)
            member.error = None
        except Exception as exc:  # kept on the member: the others carry on
            member.error = exc

    await asyncio.gather(*(one(m) for m in todo))
    return [m for m in todo if m.error is not None and isinstance(m.error, retryable)]


async def load(
    pool: AsyncConnectionPool, member: Member, extractor: Extractor, plan: BatchPlan
) -> None:
    """The member's next batch; with nothing pending, the member is done."""
    batch = await steps.load_batch(
        pool,
        member.scope,
        extractor,
        plan.flow_run_id,
        plan.max_episodes,
        plan.token_budget,
        plan.window,
        plan.decay_from,
    )
    member.batch = batch
    member.stage = "loaded" if batch is not None else "done"


async def extract(
    pool: AsyncConnectionPool, member: Member, extractor: Extractor, llm: asyncio.Semaphore
) -> None:
    """The member's batch's facts (cached, or from the model within the ``llm`` limit)."""
    assert member.batch is not None
    member.extraction = await steps.extract(pool, member.batch, extractor, llm)
    member.stage = "extracted"


async def write(pool: AsyncConnectionPool, member: Member, plan: BatchPlan) -> None:
    """Write the member's batch; the member goes on to its next batch, or is done."""
    assert member.batch is not None
    result = await steps.write_or_yield(pool, member.batch, member.extraction, plan.reinforce)
    member.finish_batch(result, plan.max_batches)


async def fail(
    pool: AsyncConnectionPool, member: Member, secrets: list[str | None], plan: BatchPlan
) -> ScopeResult:
    """Record the member's failed step in its job row; it is done for this run."""
    assert member.error is not None
    batch = member.batch
    job_id = batch.job_id if batch else None
    result = await steps.fail(
        pool, member.scope, job_id, member.error, secrets, plan.failures, batch
    )
    member.finish_batch(result, plan.max_batches)
    return result
