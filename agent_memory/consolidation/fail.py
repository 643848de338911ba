"""When a step of a scope's consolidation fails for good: its job row says why and what it
cost, its failure streak sets when it is tried again (or parks it), its episodes stay pending."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from agent_memory.consolidation.load import ScopeBatch
from agent_memory.consolidation.results import ScopeResult
from agent_memory.db import failures as failure_repo
from agent_memory.db import jobs as job_repo
from agent_memory.models import Scope
from agent_memory.redact import redact
from agent_memory.settings import JobSettings
from agent_memory.usage import Usage


async def record_failure(
    pool: AsyncConnectionPool,
    scope: Scope,
    job_id: int | None,
    error: BaseException,
    secrets: list[str | None],
    policy: JobSettings,
    batch: ScopeBatch | None = None,
) -> ScopeResult:
    """Record a failed scope: its job row says why and what it cost, ``policy`` when it is
    tried again; its episodes stay pending."""
    message = redact(f"{type(error).__name__}: {error}", secrets)
    spent = batch.spent if batch is not None else Usage()
    failure = None
    if job_id is not None:
        async with pool.connection() as conn, conn.transaction():
            # the episodes the failed attempt held (they stay pending): a failed job of 12
            # episodes reads so in `agent-memory jobs list`, not as one of none
            held = len(batch.episodes) if batch is not None else 0
            await job_repo.finish(conn, job_id, "failed", episodes=held, error=message, usage=spent)
            failure = await failure_repo.record_failure(
                conn,
                scope,
                job_id,
                message,
                max_attempts=policy.attempts,
                first_wait_s=policy.backoff_s,
                max_wait_s=policy.backoff_max_s,
            )
    return ScopeResult(
        scope,
        "failed",
        job_id,
        error=message,
        failures=failure.failures if failure else 0,
        parked=failure.parked if failure else False,
        llm_calls=spent.calls,
        prompt_tokens=spent.prompt_tokens,
        completion_tokens=spent.completion_tokens,
        cost_usd=spent.cost_usd,
    )
