"""Managing what memory holds about a person: facts list, search, add, edit and forget;
export; erase; and the MCP server that lets any MCP client do the same for one scope."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import anyio
import typer

from agent_memory.db.vacuum import DEFAULT_REWRITE_MAX_BYTES
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
from agent_memory_deployments.cli.erasure_report import print_erasure
from agent_memory_deployments.cli.inspect import facts_app

if TYPE_CHECKING:
    from agent_memory.erasure import ErasureSummary


async def _with_manager(settings: Settings, call: Any) -> Any:
    from agent_memory.manager import MemoryManager

    manager = await MemoryManager.create(settings=settings)
    try:
        return await call(manager)
    finally:
        await manager.close()


ExactOpt = Annotated[
    bool,
    typer.Option(
        "--exact", help="this scope only, not every scope of the user (any agent or workflow)"
    ),
]


@app.command()
def export(
    user: UserOpt = None,
    agent: AgentOpt = None,
    workflow: WorkflowOpt = None,
    exact: ExactOpt = False,
) -> None:
    """Print everything memory holds about a person as one JSON document: every scope of
    --user (any agent or workflow; --agent/--workflow narrow it) with its facts, history,
    provenance, episodes and Store items, and their checkpoint threads. With --exact, or
    without --user, the one scope named: export --user U > file.json"""
    try:
        scope = _scope(user, agent, workflow)
        if scope is None:
            raise typer.BadParameter("name the scope to export: --user, --agent or --workflow")

        async def call(m: Any) -> dict[str, Any]:
            if user is not None and not exact:
                return await m.export_user(user, agent_id=agent, workflow_id=workflow)  # type: ignore[no-any-return]
            return await m.export(scope)  # type: ignore[no-any-return]

        document = asyncio.run(_with_manager(_settings(), call))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


@app.command()
def erase(
    user: UserOpt = None,
    agent: AgentOpt = None,
    workflow: WorkflowOpt = None,
    exact: ExactOpt = False,
    thread_pattern: Annotated[
        str | None,
        typer.Option(help="how checkpoint thread ids map to scopes, as for backfill checkpoints"),
    ] = None,
    rewrite_max_mb: Annotated[
        int,
        typer.Option(min=0, help="rewrite (VACUUM FULL) touched tables up to this size; 0: never"),
    ] = DEFAULT_REWRITE_MAX_BYTES // 2**20,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="list what would be erased and what kept, per level; write nothing"
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
) -> None:
    """Erase everything memory holds about a person: every scope of --user (any agent or
    workflow; --agent/--workflow narrow it; --exact: the one scope named) with its episodes,
    facts, vectors, jobs, Store items and checkpoint threads, and the facts filed at other
    levels that only those conversations taught, keeping only a record per scope that it
    happened; then vacuum the tables and release the WAL. --dry-run lists it first."""
    try:
        scope = _scope(user, agent, workflow)
        if scope is None:
            raise typer.BadParameter("name the scope to erase: --user, --agent or --workflow")
        person = user is not None and not exact
        what = f"every scope of {scope.label}" if person else scope.label
        if (
            not dry_run
            and not yes
            and not typer.confirm(f"Erase everything memory holds about {what}?")
        ):
            console.print("nothing erased")
            raise typer.Exit(1)
        options = {
            "thread_pattern": thread_pattern,
            "rewrite_max_bytes": rewrite_max_mb * 2**20,
            "dry_run": dry_run,
        }

        async def call(m: Any) -> ErasureSummary:
            if person:
                return await m.erase_user(  # type: ignore[no-any-return]
                    user, agent_id=agent, workflow_id=workflow, **options
                )
            return await m.erase_scope(scope, **options)  # type: ignore[no-any-return]

        summary = asyncio.run(_with_manager(_settings(), call))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    print_erasure(summary)


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
    history: Annotated[bool, typer.Option("--history", help="superseded facts too")] = False,
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
    importance: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="how much it matters, 0 to 1 (decays)")
    ] = 0.5,
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
        bool,
        typer.Option(
            "--allow-any-user", help="let the tools name any user (a trusted client only)"
        ),
    ] = False,
    auth_token: Annotated[
        str | None,
        typer.Option(
            help="the bearer token every HTTP request must carry; required off loopback "
            "(better: the variable named above, which other users' ps does not show)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve one scope's memory to MCP clients: over stdio, or streamable HTTP with --port.
    The tools take no user unless --allow-user or --allow-any-user lets them. Over HTTP
    beyond loopback, only with a bearer token (--auth-token, or the variable
    AGENT_MEMORY_MCP_AUTH_TOKEN)."""
    _private_defaults()
    try:
        scope = _named(user, agent, workflow)
        from agent_memory_deployments.mcp_auth import check_exposure, serve_http
        from agent_memory_deployments.mcp_server import build_server

        settings = _settings()
        secret = settings.mcp.auth_token
        token = auth_token or (secret.get_secret_value() if secret else None)
        if port:
            check_exposure(host, token, any_user=allow_any_user)
        others: list[str] | Literal["any"] = "any" if allow_any_user else (allow_user or [])
        server = build_server(settings, scope, host=host, port=port or 8000, other_users=others)
    except AgentMemoryError as exc:
        raise _fail(exc) from None

    def http() -> Awaitable[None]:
        return serve_http(server, token)

    anyio.run(_until_sigterm, http if port else server.run_stdio_async)


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
