"""Picking the scopes a retry run takes, as a Prefect task."""

from __future__ import annotations

from prefect import get_run_logger, task
from psycopg_pool import AsyncConnectionPool

from agent_memory.db import retries as retry_repo
from agent_memory.models import Scope
from tasks.policy import DB_RETRIES, STEP


@task(name="find-retry-scopes", **STEP, **DB_RETRIES)
async def find_retry_scopes(
    pool: AsyncConnectionPool, job_ids: list[int] | None, all_failed: bool, limit: int
) -> list[Scope]:
    """Explicit (``job_ids``, ``all_failed``): those scopes, parked or not, their failure
    streaks forgotten. Scheduled (neither): the failed scopes whose backoff has passed."""
    async with pool.connection() as conn, conn.transaction():
        if job_ids:
            scopes = await retry_repo.reset_jobs(conn, job_ids)
        elif all_failed:
            scopes = await retry_repo.reset_all(conn)
        else:
            scopes = await retry_repo.due(conn, limit)
    get_run_logger().info("%d failed scope(s) to retry", len(scopes))
    return scopes[:limit]
