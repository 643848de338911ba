"""Scopes as Prefect knows them: by pseudonymous key (``scope-`` and 16 hex digits, see
:mod:`agent_memory.pseudonyms`). ``scopes key`` gives a scope's key, to search Prefect's UI
by; ``scopes reveal`` says whose a key is, while memory holds something of that scope."""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer

from agent_memory.db import scope_keys
from agent_memory.db.connection import resolve
from agent_memory.errors import AgentMemoryError, UnknownScopeError
from agent_memory.pseudonyms import reveal, scope_key
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

scopes_app = typer.Typer(
    help="Scopes by their pseudonymous keys, as Prefect's runs, logs, artifacts and events "
    "name them.",
    no_args_is_help=True,
)
app.add_typer(scopes_app, name="scopes")


def _secret() -> tuple[bytes, str]:
    database = resolve(_settings().db)
    return scope_keys.secret_of(database.dsn), database.dsn


@scopes_app.command("key")
def key(user: UserOpt = None, agent: AgentOpt = None, workflow: WorkflowOpt = None) -> None:
    """Print a scope's key: what to search Prefect's UI by (runs, task runs, artifacts, the
    event resource agent-memory.scope.KEY)."""
    try:
        scope = _scope(user, agent, workflow)
        if scope is None:
            raise typer.BadParameter("name the scope: --user, --agent or --workflow")
        secret, _ = _secret()
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    console.print(scope_key(secret, scope), highlight=False)


@scopes_app.command("reveal")
def reveal_key(
    key: Annotated[str, typer.Argument(help="a scope key, scope-1f2e3d4c5b6a7980")],
) -> None:
    """Print the scope a key stands for, if memory holds anything of it (an erased scope's
    key reveals nothing: that is the point)."""
    try:
        secret, dsn = _secret()
        with psycopg.connect(dsn) as conn:
            found = reveal(secret, key, scope_keys.scopes(conn))
        if found is None:
            raise UnknownScopeError(
                f"no scope memory holds has the key {key!r} (erased, or never existed)"
            )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    console.print(found.label, highlight=False)
