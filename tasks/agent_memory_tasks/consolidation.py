"""The consolidation steps as Prefect tasks (run names show the scope)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast
from uuid import UUID

import psycopg
from prefect import get_client, get_run_logger
from prefect.client.schemas.objects import State
from prefect.states import Crashed, Failed
from psycopg_pool import AsyncConnectionPool

from agent_memory import consolidation as steps
from agent_memory import groups
from agent_memory.consolidation import ScopeResult
from agent_memory.db import jobs as job_repo
from agent_memory.db import retries as retry_repo
from agent_memory.db.retries import HeldBack
from agent_memory.embedding import (
    Embedded,
    TextEmbedder,
    embed_missing,
    embed_snippets,
    ensure_ann_indexes,
)
from agent_memory.errors import TransientEmbeddingError, TransientExtractionError
from agent_memory.extraction.base import Extractor
from agent_memory.groups import BatchPlan, Limits, Member, ScopeGroup
from agent_memory.models import Scope, Window
from agent_memory_tasks.policy import step


@step("db", "find-pending-scopes")
async def find_pending_scopes(
    pool: AsyncConnectionPool,
    only: Scope | None,
    limit: int,
    window: Window | None = None,
    include_waiting: bool = False,
) -> list[Scope]:
    scopes = await steps.find_scopes(pool, only, limit, window, include_waiting)
    get_run_logger().info("%d scope(s) have unconsolidated episodes", len(scopes))
    return scopes


DB_TRANSIENT = (psycopg.OperationalError,)


def _raise_first(again: list[Member], step: str, logger: Any) -> None:
    """Raise the first retryable failure of the step, for the task's retry policy to see
    (each one is logged with its scope: the retry redoes only those)."""
    for member in again:
        logger.warning("%s: %s failed: %s", member.scope.label, step, member.error)
    if again:
        raise cast(Exception, again[0].error)


@step("db", "load-episodes", task_run_name="load [{group_label}]")
async def load_group(
    pool: AsyncConnectionPool,
    group: ScopeGroup,
    extractor: Extractor,
    plan: BatchPlan,
    limits: Limits,
    group_label: str,
) -> None:
    """Load each member's next batch (a retry redoes only the members whose load broke)."""
    again = await groups.run_step(
        group.at("claimed"),
        lambda m: groups.load(pool, m, extractor, plan),
        DB_TRANSIENT,
        limits.db,
    )
    logger = get_run_logger()
    loaded = [m.batch for m in group.at("loaded") if m.batch is not None]
    for batch in loaded:
        for note in batch.notes:
            logger.warning("%s: %s", batch.scope.label, note)
    logger.info(
        "%d batch(es) loaded: %d episode(s), %d already consolidated (no LLM call)",
        len(loaded),
        sum(len(b.episodes) for b in loaded),
        sum(b.seen_before for b in loaded),
    )
    _raise_first(again, "load", logger)


@step("llm", "extract-facts", task_run_name="extract [{group_label}]")
async def extract_group(
    pool: AsyncConnectionPool,
    group: ScopeGroup,
    extractor: Extractor,
    limits: Limits,
    group_label: str,
) -> None:
    """Extract each loaded member's facts; a retry calls the model only for the members that
    have no answer yet."""
    again = await groups.run_step(
        group.at("loaded"),
        lambda m: groups.extract(pool, m, extractor, limits.llm),
        (TransientExtractionError,),
    )
    logger = get_run_logger()
    answered = cached = skipped = 0
    for member in group.at("extracted"):
        extraction = member.extraction
        if extraction is None:
            skipped += 1
            continue
        cached += extraction.cached
        answered += not extraction.cached
        for repair in extraction.repairs:
            logger.warning("%s: repaired the model's answer: %s", member.scope.label, repair)
    logger.info(
        "%s: %d answer(s) from the model, %d from the cache, %d skipped (already consolidated)",
        extractor.name,
        answered,
        cached,
        skipped,
    )
    _raise_first(again, "extract", logger)


@step("db", "write-facts", task_run_name="write [{group_label}]")
async def write_group(
    pool: AsyncConnectionPool,
    group: ScopeGroup,
    plan: BatchPlan,
    limits: Limits,
    group_label: str,
) -> None:
    """Write each extracted member's batch, one transaction per member; each scope's outcome
    is a line of the run's log."""
    writing = group.at("extracted")
    again = await groups.run_step(
        writing, lambda m: groups.write(pool, m, plan), DB_TRANSIENT, limits.db
    )
    logger = get_run_logger()
    for member in writing:
        if member.error is not None:
            continue
        result = member.results[-1]
        logger.info(
            "%s: job %s %s: %d episode(s), %d new fact(s), %d reinforced%s",
            member.scope.label,
            result.job_id,
            result.outcome,
            result.episodes,
            result.facts_created,
            result.facts_reinforced,
            f" ({result.error})" if result.error else "",
        )
    _raise_first(again, "write", logger)


@step("db", "record-failure", task_run_name="fail [{group_label}]")
async def record_failures(
    pool: AsyncConnectionPool,
    group: ScopeGroup,
    secrets: list[str | None],
    plan: BatchPlan,
    limits: Limits,
    group_label: str,
) -> State[None]:
    """Record each failing member's failure in its job row (its episodes stay pending); the
    task run ends Failed, naming them. A retry records only those not recorded yet."""
    logger = get_run_logger()
    failing = group.failing()
    again: list[Exception] = []
    recorded: list[ScopeResult] = []

    async def one(member: Member) -> None:
        try:
            async with limits.db:
                recorded.append(await groups.fail(pool, member, secrets, plan))
        except Exception as exc:  # the member keeps its error: the flow reports it anyway
            logger.error("%s: could not record the failure: %s", member.scope.label, exc)
            if isinstance(exc, DB_TRANSIENT):
                again.append(exc)

    await asyncio.gather(*(one(m) for m in failing))
    for result in recorded:
        logger.error(
            "%s: job %s failed; episodes stay pending: %s",
            result.scope.label,
            result.job_id,
            result.error,
        )
    if again:
        raise again[0]
    first = recorded[0] if recorded else None
    message = f"{len(failing)} scope(s) failed; episodes stay pending" + (
        f" ({first.scope.label}: {first.error})" if first else ""
    )
    return Failed(message=message[:1000])


async def _embed(
    pool: AsyncConnectionPool,
    scope: Scope | None,
    embedder: TextEmbedder,
    logger: Any,
    limit: int | None = None,
) -> Embedded:
    done = await embed_missing(pool, embedder, scope, limit=limit)
    # the scope's conversations too, so inject finds their messages by meaning
    messages = await embed_snippets(pool, embedder, scope, limit=limit)
    done = done._replace(snippets=messages.stored)
    where = f"{scope.label}: " if scope is not None else ""
    if scope is not None:
        for name in await ensure_ann_indexes(pool, embedder, scope):
            logger.info("%sbuilt index %s: nearest vectors now come from it", where, name)
    for fact_id, reason in done.refusals:  # in the run's log, where operators look
        logger.warning(
            "%sfact %d is left without an embedding: %s; it is not asked for again until the "
            "model changes or `agent-memory embed --retry-rejected`",
            where,
            fact_id,
            reason,
        )
    logger.info(
        "%s%d fact(s) embedded with %s, %d refused by it; %d message(s) of past conversations",
        where,
        done.stored,
        embedder.model,
        done.refused,
        done.snippets,
    )
    return done


@step("embedding", "embed-facts", task_run_name="embed [{scope_label}]")
async def embed_facts(
    pool: AsyncConnectionPool,
    scope: Scope | None,
    embedder: TextEmbedder,
    scope_label: str,
    limit: int | None = None,
) -> Embedded:
    """Embed the facts (and conversations' messages) that have no vector from ``embedder``,
    of one scope or (None) of all."""
    return await _embed(pool, scope, embedder, get_run_logger(), limit)


@dataclass
class Embedding:
    """A group's scopes to embed, and what each got (kept across the task's retries)."""

    scopes: list[Scope]
    done: dict[Scope, Embedded] = field(default_factory=dict)
    errors: dict[Scope, Exception] = field(default_factory=dict)


@step("embedding", "embed-facts", task_run_name="embed [{group_label}]")
async def embed_group(
    pool: AsyncConnectionPool,
    work: Embedding,
    embedder: TextEmbedder,
    limits: Limits,
    group_label: str,
) -> None:
    """Embed each scope's new facts and messages; a retry redoes only the scopes whose
    embedding failed with an error worth retrying."""
    logger = get_run_logger()
    transient = (TransientEmbeddingError,)

    async def one(scope: Scope) -> None:
        try:
            async with limits.llm:
                work.done[scope] = await _embed(pool, scope, embedder, logger)
            work.errors.pop(scope, None)
        except Exception as exc:  # the facts are written: only their vectors wait
            work.errors[scope] = exc

    await asyncio.gather(
        *(
            one(s)
            for s in work.scopes
            if s not in work.done
            and (s not in work.errors or isinstance(work.errors[s], transient))
        )
    )
    again = [e for e in work.errors.values() if isinstance(e, transient)]
    if again:
        raise again[0]


@step("db", "find-held-back-scopes")
async def find_held_back(pool: AsyncConnectionPool) -> HeldBack:
    """The scopes with pending episodes this run leaves out (in backoff, or parked), said in
    the run's log with the command that takes them now."""
    async with pool.connection() as conn:
        held = await retry_repo.held_back(conn)
    note = held.note()
    if note:
        get_run_logger().warning("%s", note)
    return held


@step("db", "settle-abandoned-runs")
async def settle_abandoned_runs(pool: AsyncConnectionPool) -> int:
    """Mark Crashed in Prefect the runs that left jobs 'running' and are gone (killed, or
    their machine died): Prefect cannot tell, and shows them Running forever otherwise. This
    run, or the next of their scopes, takes their work over. Returns how many were marked."""
    async with pool.connection() as conn:
        jobs = await job_repo.abandoned(conn)
    runs: dict[str, list[int]] = {}
    for job in jobs:
        if job.flow_run_id:
            runs.setdefault(job.flow_run_id, []).append(job.id)
    if not runs:
        return 0
    logger = get_run_logger()
    marked = 0
    async with get_client() as client:
        for run_id, job_ids in runs.items():
            try:
                run = await client.read_flow_run(UUID(run_id))
                if run.state is None or run.state.is_final():
                    continue
                message = (
                    f"its process stopped while consolidating job(s) "
                    f"{', '.join(map(str, job_ids))}; a later run takes their scopes over"
                )
                await client.set_flow_run_state(run.id, Crashed(message=message), force=True)
                marked += 1
                logger.warning("flow run %s (%s) marked Crashed: %s", run.name, run_id, message)
            except Exception as exc:  # best effort: the jobs themselves are taken over anyway
                logger.warning("could not mark flow run %s Crashed: %s", run_id, exc)
    return marked
