"""Managing what memory holds about a person: export, erase."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

import typer

from agent_memory.errors import AgentMemoryError
from agent_memory.models import Scope
from agent_memory.settings import Settings
from agent_memory_deployments.cli._app import (
    AgentOpt,
    UserOpt,
    WorkflowOpt,
    _fail,
    _scope,
    _settings,
    app,
    console,
)


async def _export(settings: Settings, scope: Scope) -> dict[str, Any]:
    from agent_memory.manager import MemoryManager

    manager = await MemoryManager.create(settings=settings)
    try:
        return await manager.export(scope)
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
        document = asyncio.run(_export(_settings(), scope))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


async def _erase(settings: Settings, scope: Scope, pattern: str | None) -> dict[str, int]:
    from agent_memory.manager import MemoryManager

    manager = await MemoryManager.create(settings=settings)
    try:
        return await manager.erase(scope, thread_pattern=pattern)
    finally:
        await manager.close()


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
        removed = asyncio.run(_erase(_settings(), scope, thread_pattern))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    rows = ", ".join(f"{n} {name}" for name, n in removed.items() if n)
    console.print(f"erased {scope.label}: {rows}", highlight=False)
