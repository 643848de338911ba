"""The consolidation's Prefect tasks: thin wrappers over the library's steps
(``agent_memory.consolidation``), adding a name per group, the run's logger and the retry
policy of their kind (:mod:`agent_memory_tasks.policy`)."""

from __future__ import annotations

from uuid import UUID

from prefect import get_client, get_run_logger
from prefect.client.schemas.objects import State
from prefect.states import Crashed, Failed
from psycopg_pool import AsyncConnectionPool

from agent_memory.consolidation import groups
from agent_memory.consolidation.embed import Embedding, embed_each, embed_scope
from agent_memory.consolidation.groups import BatchPlan, Limits, ScopeGroup
from agent_memory.consolidation.load import find_scopes
from agent_memory.db import failures as failure_repo
from agent_memory.db import jobs as job_repo
from agent_memory.db import snippet_queue
from agent_memory.db.failures import HeldBack
from agent_memory.embedding import TextEmbedder
from agent_memory.errors import StepError
from agent_memory.extraction.base import Extractor
from agent_memory.models import Scope, Window
from agent_memory.pseudonyms import summarise
from agent_memory.stored_embeddings import Embedded
from agent_memory_tasks.policy import step


@step("db", "find-pending-scopes")
async def find_pending_scopes(
    pool: AsyncConnectionPool,
    only: Scope | None,
    limit: int,
    window: Window | None = None,
    include_waiting: bool = False,
) -> list[Scope]:
    """The scopes with pending episodes (:func:`~agent_memory.consolidation.load.find_scopes`)."""
    scopes = await find_scopes(pool, only, limit, window, include_waiting)
    get_run_logger().info("%d scope(s) have unconsolidated episodes", len(scopes))
    return scopes


@step("db", "index-conversations")
async def index_conversations(pool: AsyncConnectionPool, scopes: list[Scope] | None) -> int:
    """Index the sentences of the recorded conversations of ``scopes`` (None: of every scope)
    still waiting for it (:mod:`agent_memory.db.snippet_queue`), before their episodes are
    loaded: the search reads them from the index from then on. How many were indexed."""
    async with pool.connection() as conn:
        done = await snippet_queue.drain(conn, scopes)
    get_run_logger().info("%d recorded conversation(s) indexed for the search", done)
    return done


@step("db", "load-episodes", task_run_name="load [{group_label}]")
async def load_group(
    pool: AsyncConnectionPool,
    group: ScopeGroup,
    extractor: Extractor,
    plan: BatchPlan,
    limits: Limits,
    group_label: str,
) -> None:
    """Load each member's next batch (:func:`~agent_memory.consolidation.groups.load`)."""
    log = get_run_logger()
    again = await groups.load(pool, group, extractor, plan, limits, log)
    groups.raise_first(again, "load", log, group.name)


@step("llm", "extract-facts", task_run_name="extract [{group_label}]")
async def extract_group(
    pool: AsyncConnectionPool,
    group: ScopeGroup,
    extractor: Extractor,
    limits: Limits,
    group_label: str,
) -> None:
    """Extract each loaded member's facts (:func:`~agent_memory.consolidation.groups.extract`)."""
    log = get_run_logger()
    again = await groups.extract(pool, group, extractor, limits, log)
    groups.raise_first(again, "extract", log, group.name)


@step("db", "write-facts", task_run_name="write [{group_label}]")
async def write_group(
    pool: AsyncConnectionPool,
    group: ScopeGroup,
    plan: BatchPlan,
    limits: Limits,
    group_label: str,
) -> None:
    """Write each extracted member's batch (:func:`~agent_memory.consolidation.groups.write`)."""
    log = get_run_logger()
    again = await groups.write(pool, group, plan, limits, log)
    groups.raise_first(again, "write", log, group.name)


@step("db", "record-failure", task_run_name="fail [{group_label}]")
async def record_failures(
    pool: AsyncConnectionPool,
    group: ScopeGroup,
    secrets: list[str | None],
    plan: BatchPlan,
    limits: Limits,
    group_label: str,
) -> State[None]:
    """Record each failing member's failure (:func:`~agent_memory.consolidation.groups.fail`);
    the task run ends Failed, naming them."""
    again, message = await groups.fail(pool, group, secrets, plan, limits, get_run_logger())
    if again:
        raise StepError(summarise(again[0]), again[0]) from None
    return Failed(message=message)


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
    return await embed_scope(pool, scope, embedder, get_run_logger(), limit, lambda _: scope_label)


@step("embedding", "embed-facts", task_run_name="embed [{group_label}]")
async def embed_group(
    pool: AsyncConnectionPool,
    work: Embedding,
    embedder: TextEmbedder,
    limits: Limits,
    group_label: str,
) -> None:
    """Embed each scope's new facts and messages
    (:func:`~agent_memory.consolidation.embed.embed_each`)."""
    again = await embed_each(pool, work, embedder, limits, get_run_logger())
    if again:  # said without its words: the orchestrator keeps it
        raise StepError(summarise(again[0]), again[0]) from None


@step("db", "find-held-back-scopes")
async def find_held_back(pool: AsyncConnectionPool) -> HeldBack:
    """The scopes with pending episodes this run leaves out (in backoff, or parked), said in
    the run's log with the command that takes them now."""
    async with pool.connection() as conn:
        held = await failure_repo.held_back(conn)
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
