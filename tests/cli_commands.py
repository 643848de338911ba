"""Every command of ``agent-memory``, as the words a user types (``["jobs", "list"]``)."""

from __future__ import annotations

from typing import Any

import typer

from agent_memory_deployments.cli import app


def _walk(command: Any, path: list[str], ctx: Any) -> list[list[str]]:
    if not hasattr(command, "list_commands"):
        return [path]
    found: list[list[str]] = []
    for name in command.list_commands(ctx):
        found += _walk(command.get_command(ctx, name), [*path, name], ctx)
    return found


def every_command() -> list[list[str]]:
    """Each leaf command of the app, in the order ``--help`` lists them."""
    root = typer.main.get_command(app)
    return _walk(root, [], typer.Context(root))
