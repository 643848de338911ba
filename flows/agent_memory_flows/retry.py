"""The retry flow: consolidate again the scopes whose last attempt failed.

On its schedule it takes the failed scopes whose backoff has passed (the wait doubles after
each failure, from ``AGENT_MEMORY_JOB_BACKOFF_S``); a scope that failed
``AGENT_MEMORY_JOB_ATTEMPTS`` times in a row is parked (its job is ``dead``, with its last
error) and waits for an operator: ``agent-memory jobs retry --job ID`` or ``--all`` runs this
flow with those jobs, which forgets their failure streaks.

``--run FLOW_RUN_ID`` retries the failed scopes of one run: Prefect's own Retry needs a
deployment, which a run started from the command line has not. The new run links the old one
(an artifact on each), so the UI leads from one to the other.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, runtime
from pydantic import BaseModel, ConfigDict, Field

from agent_memory.db.pool import open_pool
from agent_memory.settings import get_settings
from agent_memory_flows.outcome import outcome
from agent_memory_flows.params import ConsolidationParams
from agent_memory_flows.run import run_consolidation
from agent_memory_tasks.policy import configured
from agent_memory_tasks.retry import failed_jobs_of_run, find_retry_scopes, link_runs

SUMMARY_KEY = "memory-retry-summary"


class RetryParams(BaseModel):
    """Which failed scopes to retry: these jobs', every one, or (neither) those now due."""

    model_config = ConfigDict(extra="forbid")

    job_ids: list[int] | None = Field(default=None, min_length=1)
    all_failed: bool = False
    from_run: str | None = Field(
        default=None, description="a flow run's id: retry the scopes that failed in it"
    )
    max_scopes: int = Field(default=10_000, ge=1, le=1_000_000)


def _run_name() -> str:
    params = runtime.flow_run.parameters.get("params")
    if getattr(params, "from_run", None):
        return f"retry [run {params.from_run}]"
    if getattr(params, "job_ids", None):
        return f"retry [jobs {', '.join(map(str, params.job_ids))}]"
    return "retry [all failed]" if getattr(params, "all_failed", False) else "retry [due]"


@flow(name="memory-retry-failed", flow_run_name=_run_name, persist_result=False)
async def retry_flow(
    params: RetryParams = RetryParams(),  # noqa: B008 - immutable in practice
) -> Any:
    """Consolidate failed scopes again (see the module's docstring for which)."""
    settings = get_settings()
    failed_of_run = configured(failed_jobs_of_run, settings.task_retries)
    find = configured(find_retry_scopes, settings.task_retries)
    async with open_pool(settings, max_size=1) as pool:
        job_ids = params.job_ids
        if params.from_run is not None:
            job_ids = await failed_of_run(pool, params.from_run)
        scopes = (
            await find(pool, job_ids, params.all_failed, params.max_scopes)
            if job_ids or params.from_run is None
            else []
        )
    if params.from_run is not None:
        await link_runs(params.from_run, str(runtime.flow_run.id), len(scopes))
    return outcome(
        await run_consolidation(
            ConsolidationParams(max_scopes=params.max_scopes),
            scopes=scopes,
            summary_key=SUMMARY_KEY,
        )
    )
