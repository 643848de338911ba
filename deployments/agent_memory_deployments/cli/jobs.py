"""The jobs commands: list consolidation jobs, retry failed ones."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, get_args

import typer

from agent_memory.causes import cause_first
from agent_memory.errors import AgentMemoryError
from agent_memory.models import JobStatus, scope_label
from agent_memory.settings import Settings
from agent_memory_deployments.cli._app import (
    WideOpt,
    _end_run,
    _fail,
    _flow_server,
    _private_defaults,
    _settings,
    _table,
    app,
    console,
    errors,
)
from agent_memory_deployments.cli.watch import run_watched


async def _jobs(settings: Settings, status: str | None, limit: int) -> list[Any]:
    from agent_memory.db import jobs as job_repo
    from agent_memory.db.pool import open_pool

    async with open_pool(settings, max_size=1) as pool, pool.connection() as conn:
        return await job_repo.list_jobs(conn, status, limit)  # type: ignore[arg-type]


JOB_STATUSES = get_args(JobStatus)
StatusOpt = Annotated[str | None, typer.Option(help=f"one of {', '.join(JOB_STATUSES)}")]
LimitOpt = Annotated[int, typer.Option(min=1, max=10_000, help="jobs to show at most")]
# characters of a job's error in the table: its cause, which the error leads with (the whole
# error is in the job row)
_ERROR_WIDTH = 80

jobs_app = typer.Typer(help="Consolidation jobs: list them (the default), retry failed ones.")
app.add_typer(jobs_app, name="jobs")


@jobs_app.callback(invoke_without_command=True)
def jobs(ctx: typer.Context, status: StatusOpt = None, limit: LimitOpt = 50) -> None:
    """List consolidation jobs, newest first, with their cost (tokens, calls, latency, USD)."""
    if ctx.invoked_subcommand is None:
        _list_jobs(status, limit)


@jobs_app.command("list")
def jobs_list(status: StatusOpt = None, limit: LimitOpt = 50) -> None:
    """List consolidation jobs, newest first, with their cost (tokens, calls, latency, USD)."""
    _list_jobs(status, limit)


def _list_jobs(status: str | None, limit: int) -> None:
    if status is not None and status not in JOB_STATUSES:
        errors.print(f"[red]error:[/] status {status!r} is not one of {', '.join(JOB_STATUSES)}")
        raise typer.Exit(2)
    try:
        found = asyncio.run(_jobs(_settings(), status, limit))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    rows = [
        {
            "id": j.id,
            "scope": scope_label(j.user_id, j.agent_id, j.workflow_id),
            "status": j.status,
            "episodes": j.episodes_processed,
            "facts": j.facts_created,
            "model": j.model or j.extractor or "",
            "calls": j.llm_calls,
            "tokens in/out": f"{j.prompt_tokens}/{j.completion_tokens}",
            "ms": j.latency_ms,
            "cost $": "" if j.cost_usd is None else f"{j.cost_usd:.6f}",
            "started": f"{j.started_at:%Y-%m-%d %H:%M:%S}",
            "error": cause_first(j.error or "", _ERROR_WIDTH),
        }
        for j in found
    ]
    console.print(_table("Consolidation jobs", rows))
    total = sum(j.cost_usd or 0.0 for j in found)
    console.print(
        f"{len(found)} job(s); {sum(j.llm_calls for j in found)} LLM call(s), "
        f"{sum(j.prompt_tokens for j in found)} tokens in, "
        f"{sum(j.completion_tokens for j in found)} out, ${total:.6f}",
        highlight=False,
    )


async def _check_retryable(settings: Settings, job_ids: list[int]) -> None:
    from agent_memory.db import failures as failure_repo
    from agent_memory.db.pool import open_pool

    async with open_pool(settings, max_size=1) as pool, pool.connection() as conn:
        await failure_repo.retryable(conn, job_ids)


@jobs_app.command("retry")
def jobs_retry(
    job: Annotated[
        list[int] | None, typer.Option("--job", help="a failed or dead job's id (repeatable)")
    ] = None,
    all_failed: Annotated[
        bool, typer.Option("--all", help="every failed scope, parked (dead) ones included")
    ] = False,
    run: Annotated[
        str | None,
        typer.Option("--run", help="a flow run's id: the scopes that failed in that run"),
    ] = None,
    wide: WideOpt = False,
) -> None:
    """Consolidate failed jobs' scopes again now, parked (dead) ones included.

    Their failure streaks start over: attempts are counted from this retry. ``--run`` is the
    Retry of a run started from the command line (Prefect's own needs a deployment); the new
    run and the old one link each other.
    """
    if sum((bool(job), all_failed, run is not None)) != 1:
        errors.print("[red]error:[/] give one of --job ID (repeatable), --all or --run ID")
        raise typer.Exit(2)
    if run is not None:
        from uuid import UUID

        try:
            run = str(UUID(run))
        except ValueError:
            errors.print(f"[red]error:[/] --run {run!r} is not a flow run id (a UUID)")
            raise typer.Exit(2) from None
    _private_defaults(quiet=True)
    try:
        settings = _settings()
        if job:
            asyncio.run(_check_retryable(settings, job))
        _flow_server()
        from agent_memory_flows.outcome import run_for_summary
        from agent_memory_flows.retry import RetryParams, retry_flow

        params = RetryParams(job_ids=job or None, all_failed=all_failed, from_run=run)
        summary = run_watched(
            lambda: run_for_summary(retry_flow, params),
            "scopes",
            "episodes",
            starting="starting the retry flow",
        )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _end_run(
        "Retry",
        summary,
        f"{summary['scopes']} scope(s) retried: {summary['completed']} completed, "
        f"{summary['skipped']} skipped, {summary['failed']} failed",
        wide=wide,
    )
