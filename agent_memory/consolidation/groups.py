"""Scopes consolidated in groups: one step at a time for many scopes, each keeping its outcome.

A run's scopes are cut into groups (``AGENT_MEMORY_CONSOLIDATION_GROUP_SIZE``), and each step
(load, extract, write, record failures) runs once per group, concurrently for its members: the
orchestrator sees a few task runs per group instead of three per scope. The scope stays the
unit of work and of outcome: each :class:`Member` has its own batch, extraction, job row,
result or error, and one scope's failure never fails another's.

A step is retried as a whole (by its task's retry policy), but a retry redoes only the members
whose step failed with an error worth retrying: the others keep what they got, so a retried
extraction calls the model only for scopes that have no answer yet. Each group step
(:func:`load`, :func:`extract`, :func:`write`, :func:`fail`) returns what a retry would redo;
:func:`raise_first` raises it for a retry policy to see.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import psycopg
from psycopg_pool import AsyncConnectionPool

from agent_memory.consolidation.extract import extract_batch
from agent_memory.consolidation.fail import record_failure
from agent_memory.consolidation.load import ScopeBatch, load_batch
from agent_memory.consolidation.results import ScopeResult, merge
from agent_memory.consolidation.write import write_or_yield
from agent_memory.decay import DEFAULT_REINFORCEMENT, Reinforcement
from agent_memory.errors import StepError, TransientExtractionError
from agent_memory.extraction.base import Extraction, Extractor
from agent_memory.models import DecayFrom, Level, Scope, Share, Window
from agent_memory.pseudonyms import Namer, by_label, summarise, unquoted
from agent_memory.settings import JobSettings

Stage = Literal["claimed", "loaded", "extracted", "done"]
Log = logging.Logger | logging.LoggerAdapter[Any]
# a broken connection (a restart, a network blip) is worth a retry; an SQL error is not
DB_TRANSIENT = (psycopg.OperationalError,)


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
        return merge(self.scope, self.results)


@dataclass
class ScopeGroup:
    """Scopes whose steps run together; ``label`` names them in task runs and logs, ``name``
    each scope there (its pseudonymous key in a flow: :mod:`agent_memory.pseudonyms`)."""

    members: list[Member]
    label: str
    name: Namer = by_label

    @classmethod
    def of(cls, scopes: Sequence[Scope], name: Namer = by_label) -> ScopeGroup:
        if len(scopes) == 1:
            label = name(scopes[0])
        else:
            label = f"{len(scopes)} scopes: {name(scopes[0])} \u2026 {name(scopes[-1])}"
        return cls([Member(s) for s in scopes], label, name)

    def at(self, stage: Stage) -> list[Member]:
        return [m for m in self.members if m.stage == stage]

    def failing(self) -> list[Member]:
        """Members whose current step failed and was not redone."""
        return [m for m in self.members if m.error is not None and m.stage != "done"]


def split(scopes: Sequence[Scope], size: int, name: Namer = by_label) -> list[ScopeGroup]:
    """``scopes`` in groups of at most ``size``, as even as that allows (50 scopes in groups of
    at most 40 make two of 25, not 40 and 10), each scope called by ``name``."""
    if not scopes:
        return []
    count = math.ceil(len(scopes) / size)
    each, extra = divmod(len(scopes), count)
    groups, start = [], 0
    for i in range(count):
        end = start + each + (1 if i < extra else 0)
        groups.append(ScopeGroup.of(scopes[start:end], name))
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
    share: Share = "exact"  # the levels a scope reads and files facts at (AGENT_MEMORY_SHARE)
    level: Level | None = None  # every fact filed at this level (backfill --level); None: rules
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


async def _load_one(
    pool: AsyncConnectionPool, member: Member, extractor: Extractor, plan: BatchPlan
) -> None:
    """The member's next batch; with nothing pending, the member is done."""
    batch = await load_batch(
        pool,
        member.scope,
        extractor,
        plan.flow_run_id,
        plan.max_episodes,
        plan.token_budget,
        plan.window,
        plan.decay_from,
        plan.share,
        plan.level,
    )
    member.batch = batch
    member.stage = "loaded" if batch is not None else "done"


async def _extract_one(
    pool: AsyncConnectionPool, member: Member, extractor: Extractor, llm: asyncio.Semaphore
) -> None:
    """The member's batch's facts (cached, or from the model within the ``llm`` limit)."""
    assert member.batch is not None
    member.extraction = await extract_batch(pool, member.batch, extractor, llm)
    member.stage = "extracted"


async def _write_one(pool: AsyncConnectionPool, member: Member, plan: BatchPlan) -> None:
    """Write the member's batch; it goes on to its next batch, or is done."""
    assert member.batch is not None
    result = await write_or_yield(pool, member.batch, member.extraction, plan.reinforce)
    member.finish_batch(result, plan.max_batches)


def raise_first(again: list[Member], step: str, log: Log, name: Namer = by_label) -> None:
    """Raise the first retryable failure of the step, for a retry policy to see (each one is
    logged with its scope: the retry redoes only those), as a :class:`StepError` that says it
    without its words (the orchestrator keeps what a failed step says)."""
    for member in again:
        log.warning("%s: %s failed: %s", name(member.scope), step, summarise(_error(member)))
    if again:
        raise StepError(summarise(_error(again[0])), _error(again[0])) from None


def _error(member: Member) -> Exception:
    return cast(Exception, member.error)


async def load(
    pool: AsyncConnectionPool,
    group: ScopeGroup,
    extractor: Extractor,
    plan: BatchPlan,
    limits: Limits,
    log: Log,
) -> list[Member]:
    """Load each claimed member's next batch (a retry redoes only the members whose load
    broke); the members to retry."""
    again = await run_step(
        group.at("claimed"), lambda m: _load_one(pool, m, extractor, plan), DB_TRANSIENT, limits.db
    )
    loaded = [m.batch for m in group.at("loaded") if m.batch is not None]
    for batch in loaded:
        for note in batch.notes:
            log.warning("%s: %s", group.name(batch.scope), note)
    log.info(
        "%d batch(es) loaded: %d episode(s), %d already consolidated (no LLM call)",
        len(loaded),
        sum(len(b.episodes) for b in loaded),
        sum(b.seen_before for b in loaded),
    )
    return again


async def extract(
    pool: AsyncConnectionPool, group: ScopeGroup, extractor: Extractor, limits: Limits, log: Log
) -> list[Member]:
    """Extract each loaded member's facts; a retry calls the model only for the members that
    have no answer yet. The members to retry."""
    again = await run_step(
        group.at("loaded"),
        lambda m: _extract_one(pool, m, extractor, limits.llm),
        (TransientExtractionError,),
    )
    answered = cached = skipped = 0
    for member in group.at("extracted"):
        extraction = member.extraction
        if extraction is None:
            skipped += 1
            continue
        cached += extraction.cached
        answered += not extraction.cached
        if extraction.repairs:  # in our words; a value they quote is the model's: its size
            log.warning(
                "%s: repaired the model's answer: %s",
                group.name(member.scope),
                "; ".join(unquoted(r) for r in extraction.repairs),
            )
    log.info(
        "%s: %d answer(s) from the model, %d from the cache, %d skipped (already consolidated)",
        extractor.name,
        answered,
        cached,
        skipped,
    )
    return again


async def write(
    pool: AsyncConnectionPool, group: ScopeGroup, plan: BatchPlan, limits: Limits, log: Log
) -> list[Member]:
    """Write each extracted member's batch, one transaction per member; each scope's outcome
    is a line of the log. The members to retry."""
    writing = group.at("extracted")
    again = await run_step(writing, lambda m: _write_one(pool, m, plan), DB_TRANSIENT, limits.db)
    for member in writing:
        if member.error is not None:
            continue
        result = member.results[-1]
        log.info(
            "%s: job %s %s: %d episode(s), %d new fact(s), %d reinforced%s",
            group.name(member.scope),
            result.job_id,
            result.outcome,
            result.episodes,
            result.facts_created,
            result.facts_reinforced,
            f" ({summarise(result.error)})" if result.error else "",
        )
    return again


async def fail(
    pool: AsyncConnectionPool,
    group: ScopeGroup,
    secrets: list[str | None],
    plan: BatchPlan,
    limits: Limits,
    log: Log,
) -> tuple[list[Exception], str]:
    """Record each failing member's failure in its job row (its episodes stay pending; it is
    done for this run). Returns the errors worth a retry (which records only those not
    recorded yet) and a line naming the failures."""
    failing = group.failing()
    again: list[Exception] = []
    recorded: list[ScopeResult] = []

    async def one(member: Member) -> None:
        assert member.error is not None
        batch = member.batch
        job_id = batch.job_id if batch else None
        try:
            async with limits.db:
                result = await record_failure(
                    pool, member.scope, job_id, member.error, secrets, plan.failures, batch
                )
        except Exception as exc:  # the member keeps its error: the run reports it anyway
            log.error(
                "%s: could not record the failure: %s", group.name(member.scope), summarise(exc)
            )
            if isinstance(exc, DB_TRANSIENT):
                again.append(exc)
            return
        member.finish_batch(result, plan.max_batches)
        recorded.append(result)

    await asyncio.gather(*(one(m) for m in failing))
    for result in recorded:
        log.error(
            "%s: job %s failed; episodes stay pending: %s",
            group.name(result.scope),
            result.job_id,
            summarise(result.error or ""),
        )
    first = recorded[0] if recorded else None
    message = f"{len(failing)} scope(s) failed; episodes stay pending" + (
        f" ({group.name(first.scope)}: {summarise(first.error or '')})" if first else ""
    )
    return again, message[:1000]
