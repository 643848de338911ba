"""The consolidation steps as Prefect tasks (run names show the scope)."""

from __future__ import annotations

from uuid import UUID

from prefect import get_client, get_run_logger, task
from prefect.client.schemas.objects import State
from prefect.states import Crashed, Failed
from psycopg_pool import AsyncConnectionPool

from agent_memory import consolidation as steps
from agent_memory.consolidation import ScopeBatch, ScopeResult
from agent_memory.db import jobs as job_repo
from agent_memory.db import retries as retry_repo
from agent_memory.db.retries import HeldBack
from agent_memory.decay import DEFAULT_REINFORCEMENT, Reinforcement
from agent_memory.embedding import (
    Embedded,
    TextEmbedder,
    embed_missing,
    embed_snippets,
    ensure_ann_indexes,
)
from agent_memory.extraction.base import Extraction, Extractor
from agent_memory.models import DecayFrom, Scope, Window
from tasks.policy import DB_RETRIES, EMBED_RETRIES, LLM_RETRIES, STEP


@task(name="find-pending-scopes", **STEP, **DB_RETRIES)
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


@task(name="load-episodes", task_run_name="load [{scope_label}]", **STEP, **DB_RETRIES)
async def load_scope_batch(
    pool: AsyncConnectionPool,
    scope: Scope,
    extractor: Extractor,
    flow_run_id: str | None,
    max_episodes: int,
    scope_label: str,
    token_budget: int = 8000,
    window: Window | None = None,
    decay_from: DecayFrom = "import",
) -> ScopeBatch | None:
    batch = await steps.load_batch(
        pool, scope, extractor, flow_run_id, max_episodes, token_budget, window, decay_from
    )
    if batch is not None:
        for note in batch.notes:
            get_run_logger().warning("%s", note)
        get_run_logger().info(
            "job %d: %d episode(s), checksum %s%s",
            batch.job_id,
            len(batch.episodes),
            batch.checksum[:12],
            " (already consolidated: no LLM call)" if batch.seen_before else "",
        )
    return batch


@task(name="extract-facts", task_run_name="extract [{scope_label}]", **STEP, **LLM_RETRIES)
async def extract_facts(
    pool: AsyncConnectionPool, batch: ScopeBatch, extractor: Extractor, scope_label: str
) -> Extraction | None:
    extraction = await steps.extract(pool, batch, extractor)
    logger = get_run_logger()
    if extraction is None:
        logger.info("content already consolidated and no cached answer: skipped")
        return None
    logger.info(
        "%s: %d fact(s)%s",
        extraction.extractor,
        len(extraction.facts),
        " (cached answer)" if extraction.cached else "",
    )
    for repair in extraction.repairs:
        logger.warning("repaired the model's answer: %s", repair)
    return extraction


@task(name="write-facts", task_run_name="write [{scope_label}]", **STEP, **DB_RETRIES)
async def write_scope(
    pool: AsyncConnectionPool,
    batch: ScopeBatch,
    extraction: Extraction | None,
    scope_label: str,
    reinforce: Reinforcement = DEFAULT_REINFORCEMENT,
) -> ScopeResult:
    result = await steps.write_or_yield(pool, batch, extraction, reinforce)
    get_run_logger().info(
        "job %d %s: %d episode(s), %d new fact(s), %d reinforced",
        batch.job_id,
        result.outcome,
        result.episodes,
        result.facts_created,
        result.facts_reinforced,
    )
    return result


@task(name="embed-facts", task_run_name="embed [{scope_label}]", **STEP, **EMBED_RETRIES)
async def embed_facts(
    pool: AsyncConnectionPool,
    scope: Scope | None,
    embedder: TextEmbedder,
    scope_label: str,
    limit: int | None = None,
) -> Embedded:
    done = await embed_missing(pool, embedder, scope, limit=limit)
    # the scope's conversations too, so inject finds their messages by meaning
    messages = await embed_snippets(pool, embedder, scope, limit=limit)
    done = done._replace(snippets=messages.stored)
    logger = get_run_logger()
    if scope is not None:
        for name in await ensure_ann_indexes(pool, embedder, scope):
            logger.info("built index %s: the scope's nearest vectors now come from it", name)
    for fact_id, reason in done.refusals:  # in the run's log, where operators look
        logger.warning(
            "fact %d is left without an embedding: %s; it is not asked for again until the "
            "model changes or `agent-memory embed --retry-rejected`",
            fact_id,
            reason,
        )
    logger.info(
        "%d fact(s) embedded with %s, %d refused by it; %d message(s) of past conversations",
        done.stored,
        embedder.model,
        done.refused,
        done.snippets,
    )
    return done


@task(name="record-failure", task_run_name="fail [{scope_label}]", **STEP, **DB_RETRIES)
async def record_failure(
    pool: AsyncConnectionPool,
    scope: Scope,
    job_id: int | None,
    error: BaseException,
    secrets: list[str | None],
    scope_label: str,
    batch: ScopeBatch | None = None,
) -> State[ScopeResult]:
    """The scope's failure, recorded in its job row; the task run ends Failed, its data the
    scope's :class:`ScopeResult` (``await state.aresult(raise_on_failure=False)``)."""
    result = await steps.fail(pool, scope, job_id, error, secrets, batch)
    message = f"job {job_id} failed; episodes stay pending: {result.error}"
    get_run_logger().error("%s", message)
    return Failed(message=message[:1000], data=result)


@task(name="find-held-back-scopes", **STEP, **DB_RETRIES)
async def find_held_back(pool: AsyncConnectionPool) -> HeldBack:
    """The scopes with pending episodes this run leaves out (in backoff, or parked), said in
    the run's log with the command that takes them now."""
    async with pool.connection() as conn:
        held = await retry_repo.held_back(conn)
    note = held.note()
    if note:
        get_run_logger().warning("%s", note)
    return held


@task(name="settle-abandoned-runs", **STEP, **DB_RETRIES)
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
