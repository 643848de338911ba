"""Managing what memory holds about a person: facts list, search, add, edit and forget;
export; erase; and the MCP server that lets any MCP client do the same for one scope."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, NoReturn

import anyio
import typer

from agent_memory.errors import AgentMemoryError
from agent_memory.models import Scope
from agent_memory.settings import Settings
from agent_memory_deployments.cli._app import (
    AgentOpt,
    UserOpt,
    WorkflowOpt,
    _fail,
    _private_defaults,
    _scope,
    _settings,
    _table,
    app,
    console,
)
from agent_memory_deployments.cli.inspect import facts_app


async def _with_manager(settings: Settings, call: Any) -> Any:
    from agent_memory.manager import MemoryManager

    manager = await MemoryManager.create(settings=settings)
    try:
        return await call(manager)
    finally:
        await manager.close()


@app.command()
def export(user: UserOpt = None, agent: AgentOpt = None, workflow: WorkflowOpt = None) -> None:
    """Print everything memory holds about one scope as one JSON document (facts with their
    history and provenance, episodes with their summaries): export --user U > file.json"""
    try:
        scope = _scope(user, agent, workflow)
        if scope is None:
            raise typer.BadParameter("name the scope to export: --user, --agent or --workflow")
        document = asyncio.run(_with_manager(_settings(), lambda m: m.export(scope)))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


@app.command()
def erase(
    user: UserOpt = None,
    agent: AgentOpt = None,
    workflow: WorkflowOpt = None,
    thread_pattern: Annotated[
        str | None,
        typer.Option(help="how checkpoint thread ids map to scopes, as for backfill checkpoints"),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
) -> None:
    """Erase everything memory holds about one scope (episodes, facts, vectors, jobs,
    checkpoint threads...), keeping only a record that it happened."""
    try:
        scope = _scope(user, agent, workflow)
        if scope is None:
            raise typer.BadParameter("name the scope to erase: --user, --agent or --workflow")
        if not yes and not typer.confirm(f"Erase everything memory holds about {scope.label}?"):
            console.print("nothing erased")
            raise typer.Exit(1)
        removed = asyncio.run(
            _with_manager(_settings(), lambda m: m.erase(scope, thread_pattern=thread_pattern))
        )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    rows = ", ".join(f"{n} {name}" for name, n in removed.items() if n)
    console.print(f"erased {scope.label}: {rows}", highlight=False)


def _fact_rows(facts: list[Any]) -> list[dict[str, Any]]:
    return [
        {"id": f.id, "fact": f.content, "kind": f.kind, "importance": round(f.importance, 3)}
        for f in facts
    ]


def _run(call: Any) -> Any:
    try:
        return asyncio.run(_with_manager(_settings(), call))
    except AgentMemoryError as exc:
        raise _fail(exc) from None


def _named(user: str | None, agent: str | None, workflow: str | None) -> Scope:
    scope = _scope(user, agent, workflow)
    if scope is None:
        raise typer.BadParameter("name the scope: --user, --agent or --workflow")
    return scope


@facts_app.command("list")
def facts_list(
    user: UserOpt = None,
    agent: AgentOpt = None,
    workflow: WorkflowOpt = None,
    history: Annotated[bool, typer.Option(help="superseded facts too")] = False,
) -> None:
    """A scope's facts, most important first."""
    scope = _named(user, agent, workflow)
    facts = _run(lambda m: m.facts(scope, history=history))
    console.print(_table(f"Facts of {scope.label}", _fact_rows(facts)))


@facts_app.command("search")
def facts_search(
    query: Annotated[str, typer.Argument(help="what to look for")],
    user: UserOpt = None,
    agent: AgentOpt = None,
    workflow: WorkflowOpt = None,
) -> None:
    """A scope's facts most relevant to QUERY, as inject ranks them."""
    scope = _named(user, agent, workflow)
    frame = _run(lambda m: m.inject(scope, query=query))
    rows = [
        {"id": i, "fact": c, "score": s}
        for i, c, s in zip(
            frame.fact_ids,
            frame.injected_facts,
            frame.scores or [None] * len(frame.fact_ids),
            strict=True,
        )
    ]
    console.print(_table(f"Facts of {scope.label} for {query!r}", rows))


@facts_app.command("add")
def facts_add(
    content: Annotated[str, typer.Argument(help="the fact, e.g. 'User prefers email.'")],
    user: UserOpt = None,
    agent: AgentOpt = None,
    workflow: WorkflowOpt = None,
    importance: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.5,
    kind: Annotated[
        str, typer.Option(help="identity, preference, situation, event, plan or general")
    ] = "general",
) -> None:
    """Add a fact to a scope by hand."""
    scope = _named(user, agent, workflow)
    fact = _run(lambda m: m.add_fact(scope, content, importance=importance, kind=kind))
    console.print(f"fact {fact.id}: {fact.content}", highlight=False)


@facts_app.command("edit")
def facts_edit(
    fact_id: Annotated[int, typer.Argument(help="the fact's id")],
    content: Annotated[str, typer.Argument(help="its new wording")],
) -> None:
    """Correct a fact: the new wording supersedes it (the old one stays as history)."""
    fact = _run(lambda m: m.update_fact(fact_id, content))
    console.print(f"fact {fact.id} replaces fact {fact_id}: {fact.content}", highlight=False)


@facts_app.command("forget")
def facts_forget(fact_id: Annotated[int, typer.Argument(help="the fact's id")]) -> None:
    """Forget a fact: inject never returns it again (it stays as history)."""
    fact = _run(lambda m: m.forget_fact(fact_id))
    console.print(f"fact {fact.id} forgotten: {fact.content}", highlight=False)


@app.command()
def mcp(
    user: UserOpt = None,
    agent: AgentOpt = None,
    workflow: WorkflowOpt = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="serve streamable HTTP on this port")
    ] = None,
    host: Annotated[str, typer.Option(help="the HTTP server's address")] = "127.0.0.1",
    allow_user: Annotated[
        list[str] | None,
        typer.Option(help="a user the tools may name instead of --user (repeatable)"),
    ] = None,
    allow_any_user: Annotated[
        bool, typer.Option(help="let the tools name any user (a trusted client only)")
    ] = False,
) -> None:
    """Serve one scope's memory to MCP clients: over stdio, or streamable HTTP with --port.
    The tools take no user unless --allow-user or --allow-any-user lets them."""
    _private_defaults()
    try:
        scope = _named(user, agent, workflow)
        from agent_memory_deployments.mcp_server import build_server

        others: list[str] | Literal["any"] = "any" if allow_any_user else (allow_user or [])
        server = build_server(_settings(), scope, host=host, port=port or 8000, other_users=others)
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    anyio.run(_until_sigterm, server.run_streamable_http_async if port else server.run_stdio_async)


async def _until_sigterm(serve: Callable[[], Awaitable[None]]) -> None:
    """Run ``serve`` until it ends; SIGTERM, taken in the event loop (where raising it would
    cut through whichever task was running), ends the process at once, after letting go of
    the embedded PostgreSQL: cancelling the server is no way out over stdio, whose reader
    thread stays blocked reading stdin (the interpreter would wait for it before running the
    exit handlers that stop the server). Over HTTP, the HTTP server shuts down on SIGTERM
    first, then hands the signal on."""
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    _end_at_once(128 + signal.SIGTERM)

        group.start_soon(watch)
        await serve()
        group.cancel_scope.cancel()


def _end_at_once(status: int) -> NoReturn:
    from agent_memory.db.connection import release_embedded

    release_embedded()  # stops the embedded server if this process was its last user
    for stream in (sys.stdout, sys.stderr):
        if not stream.closed:  # the MCP transport closes stdout as it ends
            stream.flush()
    os._exit(status)


tenant_app = typer.Typer(
    help="Tenant mode: login roles that row-level security confines to one scope, for"
    " agent-facing connections (the nodes, the Store, the tools, the MCP server)."
)
app.add_typer(tenant_app, name="tenant")


@tenant_app.command("create")
def tenant_create(
    user: UserOpt = None, agent: AgentOpt = None, workflow: WorkflowOpt = None
) -> None:
    """Make the scope's tenant role (or give the one it has a new password) and print its
    connection URL: set it as DATABASE_URL where the agent runs."""
    scope = _named(user, agent, workflow)
    url = _run(lambda m: m.create_tenant(scope))
    sys.stdout.write(url + "\n")


@tenant_app.command("list")
def tenant_list() -> None:
    """Every tenant role and its scope."""
    rows = [{"role": role, "scope": scope.label} for role, scope in _run(lambda m: m.tenants())]
    console.print(_table("Tenant roles", rows))


@tenant_app.command("drop")
def tenant_drop(user: UserOpt = None, agent: AgentOpt = None, workflow: WorkflowOpt = None) -> None:
    """Drop the scope's tenant role (its open sessions end)."""
    scope = _named(user, agent, workflow)
    role = _run(lambda m: m.drop_tenant(scope))
    console.print(f"dropped {role} ({scope.label})", highlight=False)
