"""Picking the scopes a retry run takes, as a Prefect task."""

from __future__ import annotations

from prefect import get_run_logger, task
from psycopg_pool import AsyncConnectionPool

from agent_memory.db import jobs as job_repo
from agent_memory.db import retries as retry_repo
from agent_memory.models import Scope
from tasks.policy import DB_RETRIES, STEP


@task(name="find-retry-scopes", **STEP, **DB_RETRIES)
async def find_retry_scopes(
    pool: AsyncConnectionPool, job_ids: list[int] | None, all_failed: bool, limit: int
) -> list[Scope]:
    """Explicit (``job_ids``, ``all_failed``): those scopes, parked or not, their failure
    streaks forgotten, and (``all_failed``) every scope whose job a dead run left 'running'.
    Scheduled (neither): the failed scopes whose backoff has passed."""
    orphans: list[Scope] = []
    async with pool.connection() as conn, conn.transaction():
        if job_ids:
            scopes = await retry_repo.reset_jobs(conn, job_ids)
        elif all_failed:
            scopes = await retry_repo.reset_all(conn)
            orphans = [job.scope for job in await job_repo.abandoned(conn)]
        else:
            scopes = await retry_repo.due(conn, limit)
    scopes = list(dict.fromkeys([*scopes, *orphans]))
    get_run_logger().info(
        "%d failed scope(s) to retry%s",
        len(scopes),
        f", {len(set(orphans))} of them left running by a run that is gone" if orphans else "",
    )
    return scopes[:limit]
