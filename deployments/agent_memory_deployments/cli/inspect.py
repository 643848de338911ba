"""Commands that read memory: search, stats, facts explain."""

from __future__ import annotations

import asyncio
from datetime import date
from pathlib import Path
from typing import Annotated, Any

import typer

from agent_memory.errors import AgentMemoryError
from agent_memory.models import Scope
from agent_memory.settings import Settings
from agent_memory_deployments.cli._app import (
    AgentOpt,
    UserOpt,
    WorkflowOpt,
    _day,
    _fail,
    _print_report,
    _private_defaults,
    _scope,
    _settings,
    app,
    console,
    errors,
)


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
    limit: Annotated[int, typer.Option(min=1, max=1000, help="messages to show at most")] = 10,
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


# what each level of memory is, as `facts explain` says where a fact is filed
_LEVELS = {
    "user": "the person's level, shared by all their agents",
    "user_agent": "the person with one agent",
    "workflow": "one workflow",
    "agent": "the agent's own knowledge, shared by all its users",
    "scope": "a scope of no person",
}

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
    filed = Scope(fact.user_id, fact.agent_id, fact.workflow_id)
    console.print(
        f"filed under {filed.label} ({_LEVELS[filed.level]}); importance "
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
    for episode_id, occurred_at, messages, job_id, said_in in sources:
        console.print(
            f"  episode {episode_id} ({occurred_at:%Y-%m-%d %H:%M}, {said_in.label}, job {job_id})",
            highlight=False,
        )
        for message in messages:
            role, text = role_and_text(message)
            console.print(f"    {role}: {text[:200]}", highlight=False, soft_wrap=True)
