"""The ``agent-memory`` command: demo, migrate, consolidate, decay, stats, serve.

The top of the stack: the only part of the library that reaches up to ``flows/`` (and so to
Prefect), and it imports them inside the commands that need them.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from datetime import UTC, date, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, get_args

import typer
from rich.console import Console
from rich.table import Table

from agent_memory.errors import AgentMemoryError
from agent_memory.models import JobStatus, Scope, scope_label
from agent_memory.private import keep_private
from agent_memory.settings import Settings, use_settings

app = typer.Typer(
    name="agent-memory",
    help="Memory that lasts across sessions for LangGraph agents, on PostgreSQL and Prefect.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped or redirected output has no terminal width: rich would squeeze tables (and wrap
# messages) to 80 columns. Lines stay whole there, and tables get room.
_PIPED_WIDTH = 250
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else _PIPED_WIDTH)
errors = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else _PIPED_WIDTH)

UserOpt = Annotated[str | None, typer.Option("--user", help="user_id of the scope")]
AgentOpt = Annotated[str | None, typer.Option("--agent", help="agent_id of the scope")]
WorkflowOpt = Annotated[str | None, typer.Option("--workflow", help="workflow_id of the scope")]


def _private_defaults(*, quiet: bool = False) -> None:
    """No telemetry, no network at import; set before Prefect or litellm is imported."""
    keep_private()
    if quiet:
        # a quiet terminal, not a quiet UI: only the console handler is raised, so the run's
        # INFO records still go to the Prefect API (the UI's logs tab)
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
        os.environ.setdefault("PREFECT_LOGGING_ROOT_LEVEL", "ERROR")


def _flow_server() -> None:
    """Point this command's flow runs at a Prefect server: the one Prefect is configured with
    (PREFECT_API_URL, or its profile), else the local one kept in the background (started by
    the first command that needs it; see :mod:`deployments.local_server`), unless
    AGENT_MEMORY_PREFECT_SERVER=ephemeral asks for Prefect's own server per command."""
    from prefect.context import refresh_global_settings_context
    from prefect.settings import PREFECT_API_URL

    from agent_memory.settings import PrefectSettings

    settings = PrefectSettings()
    if settings.server == "ephemeral":
        if "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" not in os.environ:
            # Prefect's own deadline (20 s) is too short for a loaded machine
            timeout = str(int(settings.start_timeout_s))
            os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = timeout
            refresh_global_settings_context()
        return
    if PREFECT_API_URL.value():
        return
    from agent_memory_deployments.local_server import ensure

    os.environ["PREFECT_API_URL"] = ensure(settings)
    refresh_global_settings_context()


def _scope(user: str | None, agent: str | None, workflow: str | None) -> Scope | None:
    """The scope named by the options; None (all scopes) only when no option was given."""
    if user is None and agent is None and workflow is None:
        return None
    return Scope(user, agent, workflow)  # refuses "" and the like, naming the option


def _table(title: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in rows[0] if rows else ["(none)"]:
        table.add_column(str(column))
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    return table


def _settings() -> Settings:
    settings = Settings()
    use_settings(settings)
    return settings


def _fail(exc: Exception) -> typer.Exit:
    errors.print(f"[red]error:[/] {exc}", highlight=False)
    return typer.Exit(2)


def _end_run(title: str, summary: Mapping[str, Any], line: str) -> None:
    """Print a consolidation run's table and one-line summary; exit 1 if a scope failed."""
    if summary["results"]:
        console.print(_table(title, summary["results"]))
    console.print(line, highlight=False)
    if summary.get("held_back"):
        console.print(f"[yellow]{summary['held_back']}[/]", highlight=False)
    raise typer.Exit(1 if summary["failed"] else 0)


@app.command()
def demo() -> None:
    """Replay the seed's end-to-end run: two sessions, consolidation, injection, decay."""
    _private_defaults(quiet=True)
    from agent_memory import demo as demo_module

    try:
        _flow_server()
        failed = asyncio.run(demo_module.run(console, _settings()))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    raise typer.Exit(1 if failed else 0)


@app.command()
def migrate() -> None:
    """Create or update the database schema (safe to re-run)."""
    from agent_memory.db.connection import resolve
    from agent_memory.db.migrations import current_version
    from agent_memory.db.pool import setup_schema

    settings = _settings()
    try:
        database = resolve(settings.db)
        applied = setup_schema(database, settings.memory)
        with database.connect() as conn:
            version = current_version(conn)
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    console.print(f"database: {database.display}", highlight=False)
    console.print(f"applied: {', '.join(applied) if applied else 'nothing (up to date)'}")
    console.print(f"schema version: {version}")


@app.command()
def consolidate(
    user: UserOpt = None,
    agent: AgentOpt = None,
    workflow: WorkflowOpt = None,
    max_scopes: Annotated[int, typer.Option(min=1)] = 10_000,
) -> None:
    """Run the consolidation flow now (all scopes with pending episodes, or one scope)."""
    _private_defaults()
    try:
        scope = _scope(user, agent, workflow)
        _settings()
        _flow_server()
        from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
        from agent_memory_flows.outcome import run_for_summary

        params = ConsolidationParams(
            scope=scope.as_dict() if scope else None,  # type: ignore[arg-type]
            max_scopes=max_scopes,
        )
        summary = asyncio.run(run_for_summary(consolidation_flow, params))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _end_run(
        "Consolidation",
        summary,
        f"{summary['scopes']} scope(s): {summary['completed']} completed, "
        f"{summary['skipped']} skipped, {summary['failed']} failed; "
        f"{summary['facts_created']} new fact(s) ({summary['extractor']})",
    )


def _print_report(report: dict[str, Any]) -> None:
    console.print(_table(f"Importance on {report['as_of']}", report["distribution"]))
    console.print(_table("Projected expiry", report["expiry"]))
    console.print(_table("Largest scopes", report["scopes"]))
    console.print(
        f"{report['facts']} fact(s); purged {report['purged']}; "
        f"{report['expiring_within_7_days']} expiring within 7 days "
        f"(purge below {report['purge_below']})",
        highlight=False,
    )


@app.command()
def decay(
    user: UserOpt = None,
    agent: AgentOpt = None,
    workflow: WorkflowOpt = None,
    as_of: Annotated[
        datetime | None, typer.Option(formats=["%Y-%m-%d"], help="day to decay to (UTC)")
    ] = None,
) -> None:
    """Run the decay flow now: purge faded facts and print the analytics."""
    _private_defaults()
    try:
        scope = _scope(user, agent, workflow)
        _settings()
        _flow_server()
        from agent_memory_flows.decay import DecayParams, decay_flow

        params = DecayParams(
            scope=scope.as_dict() if scope else None,  # type: ignore[arg-type]
            as_of=as_of.date() if as_of else None,
        )
        report = asyncio.run(decay_flow(params))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _print_report(report)


def _day(value: str | None, option: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not a date (YYYY-MM-DD)", param_hint=option
        ) from None


async def _search(
    settings: Settings, scope: Scope, query: str, since: date | None, until: date | None, limit: int
) -> list[Any]:
    from agent_memory.manager import MemoryManager

    manager = await MemoryManager.create(settings=settings)
    try:
        return await manager.search_conversations(
            scope, query, since=since, until=until, limit=limit
        )
    finally:
        await manager.close()


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="what to look for in past conversations")],
    user: UserOpt = None,
    agent: AgentOpt = None,
    workflow: WorkflowOpt = None,
    since: Annotated[
        str | None, typer.Option(help="said on or after this day (YYYY-MM-DD)")
    ] = None,
    until: Annotated[str | None, typer.Option(help="said before this day (YYYY-MM-DD)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 10,
) -> None:
    """Search the messages of a scope's past conversations by relevance (full text and
    meaning), best first, each with its date and speaker."""
    _private_defaults(quiet=True)
    scope = _scope(user, agent, workflow)
    if scope is None:
        raise typer.BadParameter("name the scope to search", param_hint="--user/--agent/--workflow")
    first, last = _day(since, "--since"), _day(until, "--until")
    try:
        found = asyncio.run(_search(_settings(), scope, query, first, last, limit))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    for snippet in found:
        console.print(f"{snippet.score:.3f}  {snippet.line()}", highlight=False, soft_wrap=True)
    console.print(f"{len(found)} message(s)", highlight=False)


@app.command()
def embed(
    limit: Annotated[int | None, typer.Option(min=1, help="facts to embed at most")] = None,
    retry_rejected: Annotated[
        bool, typer.Option(help="ask the model again for the facts it refused before")
    ] = False,
) -> None:
    """Embed the facts the configured embedding model has not embedded yet (run it after
    changing AGENT_MEMORY_EMBEDDING_MODEL)."""
    _private_defaults()
    try:
        _settings()
        _flow_server()
        from agent_memory_flows.embeddings import EmbedParams, reembed_flow

        summary = asyncio.run(reembed_flow(EmbedParams(limit=limit, retry_rejected=retry_rejected)))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    console.print(
        f"{summary['embedded_now']} fact(s) embedded with {summary['model']}, "
        f"{summary['refused_now']} refused; {summary['embedded']} have its embedding, "
        f"{summary['left']} still to do, {summary['refused']} refused",
        highlight=False,
    )
    for refusal in summary["refusals"]:
        console.print(
            f"refused fact {refusal['fact_id']}: {refusal['reason']}",
            highlight=False,
            soft_wrap=True,  # one line per fact, however long the model's reason
        )


async def _stats(
    settings: Settings, scope: Scope | None, as_of: date, *, chart: bool = False
) -> dict[str, Any]:
    """What ``stats`` prints; with ``chart``, also the PNG of analytics.plot under "chart"."""
    from agent_memory import analytics
    from agent_memory.db import episodes as episode_repo
    from agent_memory.db import jobs as job_repo
    from agent_memory.db.pool import open_pool

    async with open_pool(settings, max_size=1) as pool, pool.connection() as conn:
        pending, done, scopes = await episode_repo.counts(conn)
        jobs = await job_repo.counts_by_status(conn)
        frame = await analytics.load_frame(conn, scope, settings.memory.purge_threshold)
    report = analytics.report(
        frame, as_of=as_of, purge_below=settings.memory.purge_threshold, purged=0
    )
    return {
        "episodes_pending": pending,
        "episodes_consolidated": done,
        "fact_scopes": scopes,
        "jobs": jobs,
        "report": report.summary(),
        "chart": analytics.plot(report) if chart else None,
    }


PlotOpt = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        metavar="FILE",
        help="also write a PNG of the importance distribution and the projected survival",
    ),
]


def _chart_error(path: Path, reason: str) -> typer.Exit:
    errors.print(
        f"[red]error:[/] cannot write the chart to {str(path)!r}: {reason}",
        highlight=False,
        soft_wrap=True,
    )
    return typer.Exit(2)


@app.command()
def stats(
    user: UserOpt = None, agent: AgentOpt = None, workflow: WorkflowOpt = None, plot: PlotOpt = None
) -> None:
    """Print what memory holds: episodes, jobs, and the decay analytics (changes nothing).

    ``--plot FILE`` also writes the importance distribution and the projected survival curve
    as a PNG.
    """
    from agent_memory.decay import today

    # the obvious mistakes fail before the database is read; the rest when the file is written
    if plot is not None and plot.is_dir():
        raise _chart_error(plot, "it is a directory")
    if plot is not None and not plot.parent.is_dir():
        raise _chart_error(plot, f"no directory {str(plot.parent)!r}")
    try:
        result = asyncio.run(
            _stats(_settings(), _scope(user, agent, workflow), today(), chart=plot is not None)
        )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    console.print(
        f"episodes: {result['episodes_pending']} pending, {result['episodes_consolidated']} "
        f"consolidated; scopes with facts: {result['fact_scopes']}; jobs: "
        + (", ".join(f"{n} {s}" for s, n in result["jobs"].items()) or "none"),
        highlight=False,
    )
    _print_report(result["report"])
    if plot is not None:
        try:
            plot.write_bytes(result["chart"])
        except OSError as exc:
            raise _chart_error(plot, exc.strerror or str(exc)) from None
        # soft_wrap: a long path stays one piece that can be copied
        console.print(f"chart written to {plot}", highlight=False, soft_wrap=True)


async def _jobs(settings: Settings, status: str | None, limit: int) -> list[Any]:
    from agent_memory.db import jobs as job_repo
    from agent_memory.db.pool import open_pool

    async with open_pool(settings, max_size=1) as pool, pool.connection() as conn:
        return await job_repo.list_jobs(conn, status, limit)  # type: ignore[arg-type]


JOB_STATUSES = get_args(JobStatus)
StatusOpt = Annotated[str | None, typer.Option(help=f"one of {', '.join(JOB_STATUSES)}")]
LimitOpt = Annotated[int, typer.Option(min=1, max=10_000)]

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
            "error": (j.error or "")[:60],
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

        summary = asyncio.run(
            run_for_summary(
                retry_flow,
                RetryParams(job_ids=job or None, all_failed=all_failed, from_run=run),
            )
        )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _end_run(
        "Retry",
        summary,
        f"{summary['scopes']} scope(s) retried: {summary['completed']} completed, "
        f"{summary['skipped']} skipped, {summary['failed']} failed",
    )


facts_app = typer.Typer(help="Inspect facts.", no_args_is_help=True)
app.add_typer(facts_app, name="facts")


async def _explain(settings: Settings, fact_id: int) -> tuple[Any, list[Any]]:
    from agent_memory.db import facts as fact_repo
    from agent_memory.db.pool import open_pool
    from agent_memory.decay import today

    async with open_pool(settings, max_size=1) as pool, pool.connection() as conn:
        fact = await fact_repo.get(conn, fact_id, today())
        return fact, (await fact_repo.sources(conn, fact_id) if fact else [])


@facts_app.command("explain")
def facts_explain(fact_id: Annotated[int, typer.Argument(help="the fact's id")]) -> None:
    """Show a fact and the episodes it came from."""
    from agent_memory.messages import role_and_text

    try:
        fact, sources = asyncio.run(_explain(_settings(), fact_id))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    if fact is None:
        errors.print(f"[red]error:[/] no fact with id {fact_id}")
        raise typer.Exit(2)
    console.print(f"[bold]fact {fact.id}[/]: {fact.content}", highlight=False)
    console.print(
        f"scope {scope_label(fact.user_id, fact.agent_id, fact.workflow_id)}; importance "
        f"{fact.importance:.3f} today "
        f"({fact.base_importance:.3f} on {fact.importance_at:%Y-%m-%d})",
        highlight=False,
    )
    since = f"; true since {fact.valid_from:%Y-%m-%d}" if fact.valid_from else ""
    until = f" until {fact.valid_to:%Y-%m-%d}" if fact.valid_to else ""
    console.print(
        f"kind {fact.kind}, half-life {fact.half_life or 0:.0f} days "
        f"({fact.mentions} mention(s)){since}{until}",
        highlight=False,
    )
    console.print(f"from {len(sources)} episode(s):")
    for episode_id, occurred_at, messages, job_id in sources:
        console.print(f"  episode {episode_id} ({occurred_at:%Y-%m-%d %H:%M}, job {job_id})")
        for message in messages:
            role, text = role_and_text(message)
            console.print(f"    {role}: {text[:200]}", highlight=False, soft_wrap=True)


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(help="where to start a Prefect server if none is set")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 4200,
    prefect_database_url: Annotated[
        str | None,
        typer.Option(
            envvar="PREFECT_API_DATABASE_CONNECTION_URL",
            help="a PostgreSQL (with pg_trgm) for the started server's state; default SQLite",
        ),
    ] = None,
) -> None:
    """Serve the hourly consolidation and daily decay schedules (no worker, no Docker).

    Uses the Prefect server at PREFECT_API_URL, or starts one on HOST:PORT (UI included).
    """
    _private_defaults()
    server = None
    if not os.environ.get("PREFECT_API_URL"):
        from agent_memory_deployments.server import start_prefect_server

        try:
            server = start_prefect_server(host, port, database_url=prefect_database_url)
        except AgentMemoryError as exc:
            raise _fail(exc) from None
        os.environ["PREFECT_API_URL"] = server.api_url
        console.print(f"Prefect server and UI: {server.url}")
    _settings()
    from agent_memory_deployments.serve import serve_all

    try:
        asyncio.run(serve_all())
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.stop()


server_app = typer.Typer(
    help="The local Prefect server commands start in the background when no PREFECT_API_URL "
    "is set.",
    no_args_is_help=True,
)
app.add_typer(server_app, name="server")


@server_app.command("status")
def server_status() -> None:
    """Say whether the background Prefect server runs, and where its UI is."""
    from agent_memory_deployments.local_server import healthy, prefect_home, read_state

    server = read_state(prefect_home())
    if server is None:
        console.print(
            "no background Prefect server runs (the next command that runs a flow starts one)",
            highlight=False,
        )
        raise typer.Exit(1)
    state = "healthy" if healthy(server.api_url) else "not answering"
    console.print(
        f"Prefect server and UI: {server.url} ({state}; keeper pid {server.pid}, log {server.log})",
        highlight=False,
    )


@server_app.command("stop")
def server_stop() -> None:
    """Stop the background Prefect server (its runs' history stays in PREFECT_HOME)."""
    from agent_memory_deployments.local_server import stop

    server = stop()
    console.print(
        f"stopped the Prefect server at {server.url}"
        if server
        else "no background Prefect server runs",
        highlight=False,
    )


backfill_app = typer.Typer(help="Import and consolidate historical conversations.")


class DecayFromOption(StrEnum):
    """``backfill run --decay-from`` (agent_memory.models.DecayFrom)."""

    import_ = "import"
    conversation = "conversation"


def _end_import(report: Any, where: str, line: str) -> None:
    """Name each skipped record, print the import's one-line summary; exit 1 if any skipped."""
    for bad in report.bad:
        errors.print(f"[yellow]skipped[/] {where}{bad}", highlight=False)
    console.print(line, highlight=False)
    raise typer.Exit(1 if report.bad else 0)


class OnErrorChoice(StrEnum):
    reject = "reject"
    skip = "skip"


app.add_typer(backfill_app, name="backfill", no_args_is_help=True)


@backfill_app.command("import")
def backfill_import(
    path: Annotated[Path, typer.Argument(help="a JSON Lines file, one conversation per line")],
    on_error: Annotated[
        OnErrorChoice,
        typer.Option(
            help="reject: one bad line imports nothing; skip: report bad lines, import the rest"
        ),
    ] = OnErrorChoice.reject,
) -> None:
    """Import conversations as pending episodes (importing the same data again adds nothing).

    The format is in docs/backfill.md; examples/history.jsonl is a sample.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from agent_memory.backfill import import_jsonl
    from agent_memory.db.connection import resolve
    from agent_memory.db.pool import setup_schema

    settings = _settings()
    try:
        database = resolve(settings.db)
        setup_schema(database, settings.memory)
        size = path.stat().st_size if path.is_file() else 0
        with (
            Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                DownloadColumn(),
                TimeRemainingColumn(),
                console=errors,
                transient=True,
            ) as bar,
            database.connect() as conn,
        ):
            task = bar.add_task(f"importing {path.name}", total=size)
            report = import_jsonl(
                conn,
                path,
                on_error=on_error.value,
                max_bytes=settings.memory.max_episode_bytes,
                progress=lambda done: bar.update(task, completed=done),
            )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _end_import(
        report,
        f"{path}, ",
        f"{report.lines} conversation(s) read: {report.inserted} imported, "
        f"{report.duplicates} already there, {len(report.bad)} bad line(s) skipped",
    )


@backfill_app.command("checkpoints")
def backfill_checkpoints(
    source: Annotated[
        str,
        typer.Option(
            "--from",
            envvar="AGENT_MEMORY_CHECKPOINT_URL",
            help="the LangGraph PostgresSaver's database URL (or AGENT_MEMORY_CHECKPOINT_URL)",
        ),
    ],
    thread_pattern: Annotated[
        str | None,
        typer.Option(
            help="thread id -> scope, a regex with named groups user_id/agent_id/workflow_id; "
            "default: the thread id is the user_id"
        ),
    ] = None,
    on_error: Annotated[
        OnErrorChoice,
        typer.Option(help="reject: one bad thread imports nothing; skip: report it, go on"),
    ] = OnErrorChoice.reject,
) -> None:
    """Import LangGraph checkpoint threads as pending episodes (again: only what is new)."""
    from agent_memory.backfill import import_checkpoints
    from agent_memory.db.connection import resolve
    from agent_memory.db.pool import setup_schema

    settings = _settings()
    try:
        database = resolve(settings.db)
        setup_schema(database, settings.memory)
        with database.connect() as conn:
            report = import_checkpoints(
                conn,
                source,
                pattern=thread_pattern,
                on_error=on_error.value,
                max_bytes=settings.memory.max_episode_bytes,
            )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _end_import(
        report,
        "",
        f"{report.lines} thread(s) read: {report.inserted} imported, "
        f"{report.duplicates} with nothing new, {len(report.bad)} bad thread(s) skipped",
    )


@backfill_app.command("run")
def backfill_run(
    since: Annotated[
        datetime | None,
        typer.Option(formats=["%Y-%m-%d"], help="conversations from this day (UTC)"),
    ] = None,
    until: Annotated[
        datetime | None,
        typer.Option(formats=["%Y-%m-%d"], help="conversations before this day (UTC)"),
    ] = None,
    user: Annotated[
        list[str] | None, typer.Option("--user", help="only this user id (repeatable)")
    ] = None,
    decay_from: Annotated[
        DecayFromOption,
        typer.Option(
            "--decay-from",
            help="where facts' decay clock starts: at the import (history useful now) or at "
            "the conversation (as faded as it is old; old history may be purged at once)",
        ),
    ] = DecayFromOption.import_,
) -> None:
    """Run the backfill flow: consolidate pending history in the window, oldest first.

    Interrupt it and run it again: it carries on where it stopped.
    """
    import threading

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from agent_memory.db.connection import resolve
    from agent_memory.db.episodes import count_pending_sync
    from agent_memory.db.pool import setup_schema
    from agent_memory.models import Window

    _private_defaults(quiet=True)
    try:
        window = Window(
            since.replace(tzinfo=UTC) if since else None,
            until.replace(tzinfo=UTC) if until else None,
            user or None,
        )
        settings = _settings()
        database = resolve(settings.db)
        setup_schema(database, settings.memory)
        _flow_server()
        from agent_memory_flows.backfill import BackfillParams, backfill_flow
        from agent_memory_flows.outcome import run_for_summary

        params = BackfillParams(
            since=window.since,
            until=window.until,
            users=window.users,
            decay_from=decay_from.value,
        )
        with database.connect(autocommit=True) as conn:
            total = count_pending_sync(conn, window)
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["summary"] = asyncio.run(run_for_summary(backfill_flow, params))
        except BaseException as exc:  # handed to the main thread, which reports it
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="backfill", daemon=True)
    with (
        Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=errors,
            transient=True,
        ) as bar,
        database.connect(autocommit=True) as conn,
    ):
        task = bar.add_task("episodes consolidated", total=total)
        worker.start()
        while worker.is_alive():
            worker.join(timeout=0.5)
            bar.update(task, completed=max(0, total - count_pending_sync(conn, window)))
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, AgentMemoryError):
            raise _fail(error)
        raise error
    summary = outcome["summary"]
    _end_run(
        "Backfill",
        summary,
        f"{summary['pending_before']} pending episode(s) in the window; {summary['episodes']} "
        f"consolidated over {summary['scopes']} scope(s): {summary['completed']} completed, "
        f"{summary['failed']} failed; {summary['facts_created']} new fact(s)"
        + (
            f"; {summary['facts_below_purge_threshold']} fact(s) already below the purge "
            "threshold go at the next decay"
            if summary.get("facts_below_purge_threshold")
            else ""
        ),
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
