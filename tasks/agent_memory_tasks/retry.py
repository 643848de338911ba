"""Picking the scopes a retry run takes, as a Prefect task."""

from __future__ import annotations

from uuid import UUID

from prefect import get_client, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.client.schemas.actions import ArtifactCreate
from prefect.settings import PREFECT_UI_URL
from psycopg_pool import AsyncConnectionPool

from agent_memory.db import failures as failure_repo
from agent_memory.db import jobs as job_repo
from agent_memory.models import Scope
from agent_memory_tasks.policy import step


@step("db", "find-retry-scopes")
async def find_retry_scopes(
    pool: AsyncConnectionPool, job_ids: list[int] | None, all_failed: bool, limit: int
) -> list[Scope]:
    """Explicit (``job_ids``, ``all_failed``): those scopes, parked or not, their failure
    streaks forgotten, and (``all_failed``) every scope whose job a dead run left 'running'.
    Scheduled (neither): the failed scopes whose backoff has passed."""
    orphans: list[Scope] = []
    async with pool.connection() as conn, conn.transaction():
        if job_ids:
            scopes = await failure_repo.reset_jobs(conn, job_ids)
        elif all_failed:
            scopes = await failure_repo.reset_all(conn)
            orphans = [job.scope for job in await job_repo.abandoned(conn)]
        else:
            scopes = await failure_repo.due(conn, limit)
    scopes = list(dict.fromkeys([*scopes, *orphans]))
    get_run_logger().info(
        "%d failed scope(s) to retry%s",
        len(scopes),
        f", {len(set(orphans))} of them left running by a run that is gone" if orphans else "",
    )
    return scopes[:limit]


@step("db", "find-failed-jobs-of-run")
async def failed_jobs_of_run(pool: AsyncConnectionPool, flow_run_id: str) -> list[int]:
    """The jobs that failed (or were parked) in one flow run."""
    async with pool.connection() as conn:
        job_ids = await job_repo.failed_of_run(conn, flow_run_id)
    get_run_logger().info("run %s has %d failed job(s)", flow_run_id, len(job_ids))
    return job_ids


@step("none", "link-runs")
async def link_runs(old_run_id: str, new_run_id: str, scopes: int) -> None:
    """An artifact on each run naming the other: the retried run leads to its retry, and the
    retry to what it retried (best effort: the retry itself does not depend on it)."""
    logger = get_run_logger()
    try:
        async with get_client() as client:
            old = await client.read_flow_run(UUID(old_run_id))
            await client.create_artifact(
                ArtifactCreate(
                    key="memory-retried-by",
                    type="markdown",
                    flow_run_id=old.id,
                    data=f"Its failed scopes were retried by flow run `{new_run_id}`"
                    f" ({_ui_link(new_run_id)}).",
                )
            )
        await acreate_markdown_artifact(
            key="memory-retry-of",
            markdown=f"Retries the {scopes} failed scope(s) of flow run **{old.name}** "
            f"`{old_run_id}` ({_ui_link(old_run_id)}).",
        )
    except Exception as exc:
        logger.warning("could not link run %s to its retry %s: %s", old_run_id, new_run_id, exc)


def _ui_link(run_id: str) -> str:
    ui = PREFECT_UI_URL.value()
    return f"[in the UI]({ui}/runs/flow-run/{run_id})" if ui else "open it in the Prefect UI"
