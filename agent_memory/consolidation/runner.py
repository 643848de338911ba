"""The consolidation of a run's scopes, group by group, over a small steps protocol.

The runner claims each group's scopes, then runs rounds: each round takes every member that has
a batch left through load -> extract -> write, records the failures, and finally embeds the new
facts. How a step runs is the `Steps` implementation's business: in a Prefect flow each
is a task run with its retry policy (``agent_memory_flows.run``); `DirectSteps` runs
them in this process, once each, with no orchestrator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from psycopg_pool import AsyncConnectionPool

from agent_memory import progress
from agent_memory.consolidation import groups
from agent_memory.consolidation.claims import ScopeClaims
from agent_memory.consolidation.embed import Embedding, embed_each
from agent_memory.consolidation.groups import BatchPlan, Limits, Log, Member, ScopeGroup, Stage
from agent_memory.consolidation.results import ScopeResult
from agent_memory.embedding import TextEmbedder
from agent_memory.extraction.base import Extractor
from agent_memory.pseudonyms import Namer, by_label
from agent_memory.redact import redact

# how a step ended: None when it ran to its end (its members' own errors are on them), else
# the error that ended it
StepEnd = BaseException | None
OnBatch = Callable[[ScopeResult], Awaitable[None]]


class RoundSteps(Protocol):
    """One round's steps for one group, each run once for the members at its stage."""

    async def load(self) -> StepEnd: ...
    async def extract(self) -> StepEnd: ...
    async def write(self) -> StepEnd: ...
    async def fail(self) -> StepEnd: ...


class Steps(Protocol):
    """How a run executes its steps."""

    def round(self, group: ScopeGroup) -> RoundSteps: ...
    async def embed(self, work: Embedding, embedder: TextEmbedder, label: str) -> StepEnd: ...


@dataclass
class Run:
    """What every group of one run shares."""

    claims: ScopeClaims
    steps: Steps
    plan: BatchPlan
    secrets: list[str | None]
    on_batch: OnBatch | None = None
    embedder: TextEmbedder | None = None


def _settle(members: list[Member], stage: Stage, end: StepEnd) -> None:
    """After a step: a member it left at ``stage`` without an error of its own did not get its
    turn (the step itself broke), and takes the step's error."""
    if end is None:
        return
    error = end if isinstance(end, Exception) else RuntimeError(f"the step ended: {end!r}")
    for member in members:
        if member.stage == stage and member.error is None:
            member.error = error


async def one_round(run: Run, group: ScopeGroup) -> None:
    """Load, extract and write the next batch of each of the group's scopes that has one,
    then record the failures: each step once for the whole group."""
    before = {id(m): len(m.results) for m in group.members}
    was_done = len(group.at("done"))
    steps = run.steps.round(group)
    order: list[tuple[Stage, Callable[[], Awaitable[StepEnd]]]] = [
        ("claimed", steps.load),
        ("loaded", steps.extract),
        ("extracted", steps.write),
    ]
    for stage, step in order:
        members = group.at(stage)
        if members:
            _settle(members, stage, await step())
    if group.failing():
        await steps.fail()
        for member in group.failing():  # the database itself is gone: report, do not hide
            error = redact(f"{type(member.error).__name__}: {member.error}", run.secrets)
            logging.getLogger(__name__).error(
                "could not record failure of %s: %s", member.scope.label, error
            )
            job_id = member.batch.job_id if member.batch is not None else None
            member.finish_batch(ScopeResult(member.scope, "failed", job_id, error=error), 1)
    new = [r for m in group.members for r in m.results[before[id(m)] :]]
    progress.advance("episodes", sum(r.episodes for r in new))
    progress.advance("scopes", len(group.at("done")) - was_done)
    if run.on_batch is None:
        return
    for member in group.members:
        for result in member.results[before[id(member)] :]:
            try:
                await run.on_batch(result)
            except Exception as exc:  # progress reporting must not undo the work
                logging.getLogger(__name__).warning("progress update failed: %s", exc)


async def _embed(
    run: Run, label: str, members: list[Member], embedder: TextEmbedder, name: Namer = by_label
) -> None:
    """Embed the members' new facts, those filed at the levels they read too. The facts are
    already written: a failure here leaves them without embeddings (the next run, or
    ``agent-memory embed``, catches up), not the scope failed."""
    scopes = dict.fromkeys(s for m in members for s in m.scope.levels(run.plan.share))
    work = Embedding(list(scopes), name=name)
    end = await run.steps.embed(work, embedder, label)
    if end is not None:  # a scope that did not get its turn has the step's error
        error = end if isinstance(end, Exception) else RuntimeError(repr(end))
        for scope in work.scopes:
            if scope not in work.done and scope not in work.errors:
                work.errors[scope] = error
    for member in members:
        scope, result = member.scope, member.results[-1]
        if scope in work.errors:
            note = redact(f"facts not embedded yet: {work.errors[scope]}", run.secrets)
            logging.getLogger(__name__).warning("%s: %s", scope.label, note)
            result.repairs.append(note)
        elif work.done[scope].refused:  # each one is in the log, with the model's reason
            refused = work.done[scope].refused
            result.repairs.append(f"{refused} fact(s) refused by embedding model {embedder.model}")


async def one_group(run: Run, group: ScopeGroup) -> None:
    """Consolidate the group's scopes under this run's claims (a backlog in rounds: a batch
    per scope each); the outcomes stay on the members."""
    claimed: list[Member] = []
    try:
        owned = await run.claims.claim_each([m.scope for m in group.members])
    except Exception as exc:  # the database is unreachable: the scopes stay pending
        error = redact(f"could not claim: {exc}", run.secrets)
        for member in group.members:
            member.finish_batch(ScopeResult(member.scope, "failed", error=error), 1)
        progress.advance("scopes", len(group.members))
        return
    for member, ours in zip(group.members, owned, strict=True):
        if ours:
            claimed.append(member)
        else:  # a live run is consolidating this scope right now
            member.finish_batch(ScopeResult(member.scope, "busy"), run.plan.max_batches)
    progress.advance("scopes", len(group.members) - len(claimed))
    try:
        while group.at("claimed"):
            await one_round(run, group)
        done = [m for m in claimed if any(r.outcome == "completed" for r in m.results)]
        if run.embedder is not None and done:
            await _embed(run, group.label, done, run.embedder, group.name)
    finally:
        with contextlib.suppress(Exception):  # a dead connection has dropped the locks anyway
            await run.claims.release_each([m.scope for m in claimed])


async def consolidate_groups(
    run: Run, scope_groups: list[ScopeGroup], in_flight: int
) -> list[ScopeResult]:
    """Consolidate the groups, ``in_flight`` at a time; one result per scope that had work."""
    slots = asyncio.Semaphore(in_flight)

    async def one(group: ScopeGroup) -> None:
        async with slots:
            try:
                await one_group(run, group)
            except BaseException:  # its unfinished scopes fail below: they are done too
                progress.advance("scopes", len(group.members) - len(group.at("done")))
                raise

    # one group's unexpected error must not stop the others
    errors = await asyncio.gather(*(one(g) for g in scope_groups), return_exceptions=True)
    results: list[ScopeResult] = []
    for group, error in zip(scope_groups, errors, strict=True):
        for member in group.members:
            if isinstance(error, BaseException) and member.stage != "done":
                text = redact(f"{type(error).__name__}: {error}", run.secrets)
                member.finish_batch(ScopeResult(member.scope, "failed", error=text), 1)
            results.append(member.outcome())
    return [r for r in results if r.outcome != "empty"]


async def _ended(step: Awaitable[list[Member]]) -> StepEnd:
    try:
        again = await step
    except Exception as exc:
        return exc
    return again[0].error if again else None


@dataclass
class DirectSteps:
    """The steps run in this process, each once (no orchestrator, no retries): a member whose
    step fails keeps its error, and its failure is recorded."""

    pool: AsyncConnectionPool
    extractor: Extractor
    plan: BatchPlan
    limits: Limits
    secrets: list[str | None] = field(default_factory=list)
    log: Log = field(default_factory=lambda: logging.getLogger(__name__))

    def round(self, group: ScopeGroup) -> RoundSteps:
        return _DirectRound(self, group)

    async def embed(self, work: Embedding, embedder: TextEmbedder, label: str) -> StepEnd:
        try:
            again = await embed_each(self.pool, work, embedder, self.limits, self.log)
        except Exception as exc:
            return exc
        return again[0] if again else None


@dataclass
class _DirectRound:
    steps: DirectSteps
    group: ScopeGroup

    async def load(self) -> StepEnd:
        s = self.steps
        return await _ended(groups.load(s.pool, self.group, s.extractor, s.plan, s.limits, s.log))

    async def extract(self) -> StepEnd:
        s = self.steps
        return await _ended(groups.extract(s.pool, self.group, s.extractor, s.limits, s.log))

    async def write(self) -> StepEnd:
        s = self.steps
        return await _ended(groups.write(s.pool, self.group, s.plan, s.limits, s.log))

    async def fail(self) -> StepEnd:
        s = self.steps
        try:
            await groups.fail(s.pool, self.group, s.secrets, s.plan, s.limits, s.log)
        except Exception as exc:
            return exc
        return None
