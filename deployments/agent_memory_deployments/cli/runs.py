"""Commands that run the pipeline now: demo, migrate, consolidate, decay, embed, index."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated

import typer

from agent_memory.errors import AgentMemoryError
from agent_memory.models import Scope
from agent_memory.settings import Settings
from agent_memory_deployments.cli._app import (
    AgentOpt,
    UserOpt,
    WideOpt,
    WorkflowOpt,
    _end_run,
    _fail,
    _flow_server,
    _print_report,
    _private_defaults,
    _scope,
    _settings,
    app,
    console,
)
from agent_memory_deployments.cli.watch import run_watched, shows_progress


@app.command()
def demo() -> None:
    """Watch memory work end to end on a sample user: two turns of a LangGraph agent with
    consolidation between them (facts from turn 1 come back in turn 2), then decay; an OK or
    FAIL line per step."""
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
    max_scopes: Annotated[
        int, typer.Option(min=1, help="consolidate at most this many scopes in this run")
    ] = 10_000,
    wide: WideOpt = False,
) -> None:
    """Run the consolidation flow now (all scopes with pending episodes, or one scope); on a
    terminal, a progress bar of the scopes done."""
    _private_defaults(quiet=shows_progress())  # the bar, not Prefect's lines, on a terminal
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
        summary = run_watched(
            lambda: run_for_summary(consolidation_flow, params),
            "scopes",
            "episodes",
            starting="starting the consolidation flow",
        )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _end_run(
        "Consolidation",
        summary,
        f"{summary['scopes']} scope(s): {summary['completed']} completed, "
        f"{summary['skipped']} skipped, {summary['failed']} failed; "
        f"{summary['facts_created']} new fact(s) ({summary['extractor']})",
        wide=wide,
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
    """Run the decay flow now: purge faded facts and print the analytics (on a terminal, the
    facts purged so far and the step it is at)."""
    _private_defaults(quiet=shows_progress())
    try:
        scope = _scope(user, agent, workflow)
        _settings()
        _flow_server()
        from agent_memory_flows.decay import DecayParams, decay_flow

        params = DecayParams(
            scope=scope.as_dict() if scope else None,  # type: ignore[arg-type]
            as_of=as_of.date() if as_of else None,
        )
        report = run_watched(
            lambda: decay_flow(params), "purged", starting="starting the decay flow"
        )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _print_report(report)


@app.command()
def embed(
    limit: Annotated[int | None, typer.Option(min=1, help="facts to embed at most")] = None,
    retry_rejected: Annotated[
        bool,
        typer.Option(
            "--retry-rejected", help="ask the model again for the facts it refused before"
        ),
    ] = False,
) -> None:
    """Embed the facts the configured embedding model has not embedded yet (run it after
    changing AGENT_MEMORY_EMBEDDING_MODEL); on a terminal, a progress bar of the facts done."""
    _private_defaults(quiet=shows_progress())
    try:
        _settings()
        _flow_server()
        from agent_memory_flows.embeddings import EmbedParams, reembed_flow

        params = EmbedParams(limit=limit, retry_rejected=retry_rejected)
        summary = run_watched(
            lambda: reembed_flow(params), "facts", "messages", starting="starting the flow"
        )
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


async def _index(settings: Settings, scope: Scope | None) -> tuple[int, int]:
    from agent_memory.db import snippet_queue
    from agent_memory.db.pool import open_pool

    scopes = None if scope is None else [scope]
    async with open_pool(settings, max_size=1) as pool, pool.connection() as conn:
        done = await snippet_queue.drain(conn, scopes)
        return done, await snippet_queue.waiting(conn, scopes)


@app.command()
def index(user: UserOpt = None, agent: AgentOpt = None, workflow: WorkflowOpt = None) -> None:
    """Index the sentences of recorded conversations for the search now (of one scope, or of
    all), as the consolidation flow does before it loads them and a MemoryManager a moment
    after each record; until then a search reads them from their messages."""
    _private_defaults(quiet=True)
    scope = _scope(user, agent, workflow)
    try:
        done, left = asyncio.run(_index(_settings(), scope))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    console.print(
        f"{done} conversation(s) indexed; {left} still waiting"
        " (recorded meanwhile, or held by another drain)",
        highlight=False,
    )
