"""The levels commands: ``levels refile`` moves facts written before levels of memory to the
level consolidation would file them at today (docs/guide.md, "Levels of memory");
``levels left-behind`` lists, and erases, the facts earlier erasures left at a level with no
source (docs/guarantees.md, "What an erasure removes")."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from agent_memory.errors import AgentMemoryError
from agent_memory_deployments.cli._app import (
    _fail,
    _flow_server,
    _private_defaults,
    _settings,
    _table,
    app,
    console,
)

levels_app = typer.Typer(help="Levels of memory: what is about the person, what about a task.")
app.add_typer(levels_app, name="levels", no_args_is_help=True)


@levels_app.command("refile")
def refile(
    user: Annotated[
        list[str] | None, typer.Option("--user", help="only this user id's scopes (repeatable)")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="count what would move or merge; write nothing")
    ] = False,
) -> None:
    """Re-file facts at their levels under AGENT_MEMORY_SHARE, as consolidation files new ones
    (identity and preferences go to the person's level; the rest stays), as the Prefect flow
    memory-refile; prints per scope how many facts moved, merged into the level's same fact,
    or were kept (shown by a Store item)."""
    _private_defaults()
    try:
        from agent_memory.refile import check_users

        users = check_users(user)
        _settings()
        _flow_server()
        from agent_memory_flows.refile import RefileParams, refile_flow

        report = asyncio.run(refile_flow(RefileParams(users=users, dry_run=dry_run)))
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    rows = [r for r in report["results"] if r["moved"] or r["merged"] or r["kept"]]
    if rows:
        console.print(_table("Re-filing" + (" (dry run)" if dry_run else ""), rows))
    verb = "would move" if dry_run else "moved"
    console.print(
        f"{report['scopes']} scope(s) under share={report['share']}: {report['moved']} fact(s) "
        f"{verb} to their level, {report['merged']} merged into the same fact there, "
        f"{report['kept']} kept (shown by a Store item)",
        highlight=False,
    )


@levels_app.command("left-behind")
def left_behind(
    erase: Annotated[
        bool, typer.Option("--erase", help="erase them (without it: list them, write nothing)")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
) -> None:
    """The facts an erasure before schema 31 left at another level (the person's, an agent's
    own) with no source: their conversations were erased, they were not. Lists them per level;
    --erase erases them as an erasure now would (with their history), then vacuums."""
    from agent_memory_deployments.cli.erasure_report import print_derived, print_files
    from agent_memory_deployments.cli.manage import _with_manager

    if erase and not yes and not typer.confirm("Erase the facts erasures left behind?"):
        console.print("nothing erased")
        raise typer.Exit(1)
    try:
        found = asyncio.run(
            _with_manager(_settings(), lambda m: m.erase_left_behind(dry_run=not erase))
        )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    if not found.derived.gone:
        console.print("no fact was left behind by an erasure")
        return
    print_derived(found.derived, found.dry_run)
    if found.dry_run:
        console.print("dry run: nothing was written (--erase erases them)", highlight=False)
    else:
        print_files(found.files)
