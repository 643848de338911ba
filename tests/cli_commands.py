"""Every command of ``agent-memory``, as the words a user types (``["jobs", "list"]``)."""

from __future__ import annotations

from typing import Any

import typer

from agent_memory_deployments.cli import app


def _walk(command: Any, path: list[str], ctx: Any, groups: bool) -> list[list[str]]:
    if not hasattr(command, "list_commands"):
        return [path]
    found: list[list[str]] = [path] if groups else []
    for name in command.list_commands(ctx):
        found += _walk(command.get_command(ctx, name), [*path, name], ctx, groups)
    return found


def every_command(groups: bool = False) -> list[list[str]]:
    """Each leaf command of the app, in the order ``--help`` lists them; with ``groups``, the
    app itself (``[]``) and each group of commands too."""
    root = typer.main.get_command(app)
    return _walk(root, [], typer.Context(root), groups)


def command_at(path: list[str]) -> Any:
    """The click command the words ``path`` name (``[]``: the app)."""
    command: Any = typer.main.get_command(app)
    ctx = typer.Context(command)
    for name in path:
        command = command.get_command(ctx, name)
    return command
