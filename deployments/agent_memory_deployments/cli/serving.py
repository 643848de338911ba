"""Serving the schedules, and the local Prefect server the commands share."""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

import typer

from agent_memory.errors import AgentMemoryError
from agent_memory_deployments.cli._app import (
    _fail,
    _private_defaults,
    _settings,
    app,
    console,
)


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(help="where to start a Prefect server if none is set")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=1, max=65535, help="the port of the Prefect server it starts")
    ] = 4200,
    prefect_database_url: Annotated[
        str | None,
        typer.Option(
            envvar="PREFECT_API_DATABASE_CONNECTION_URL",
            show_envvar=False,  # the description names it: the options box cuts a long name
            help="a PostgreSQL (with pg_trgm) for the started server's state; default SQLite",
        ),
    ] = None,
) -> None:
    """Serve the hourly consolidation and daily decay schedules (no worker, no Docker).

    Uses the Prefect server at PREFECT_API_URL, or starts one on HOST:PORT (UI included),
    which keeps its state in SQLite, or in the PostgreSQL of --prefect-database-url (or of
    the variable PREFECT_API_DATABASE_CONNECTION_URL).
    """
    _private_defaults()
    server = None
    if not os.environ.get("PREFECT_API_URL"):
        from agent_memory_flows.prefect_server import start_prefect_server

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
    help="The Prefect server the commands use: the one PREFECT_API_URL names, or a local one "
    "they start in the background when none is set.",
    no_args_is_help=True,
)
app.add_typer(server_app, name="server")


@server_app.command("status")
def server_status() -> None:
    """Say which Prefect server the commands use (the one PREFECT_API_URL names, else the
    background one), whether it answers, and where its UI is; exit 1 if none answers."""
    from agent_memory_deployments.local_server import healthy, prefect_home, read_state

    _private_defaults()
    configured = _configured_api_url()
    if configured:
        answers = healthy(configured)
        console.print(
            f"Prefect server (PREFECT_API_URL): {configured}, UI {_ui_of(configured)} "
            f"({'answers' if answers else 'not answering'})",
            highlight=False,
        )
        raise typer.Exit(0 if answers else 1)
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


def _configured_api_url() -> str | None:
    """The Prefect API the flows report to when one is configured: PREFECT_API_URL, from the
    environment or Prefect's profile (the commands then start no server of their own)."""
    from prefect.settings import PREFECT_API_URL

    value = PREFECT_API_URL.value()
    return str(value).rstrip("/") if value else None


def _ui_of(api_url: str) -> str:
    """A Prefect server's UI address: its API's, without the ``/api`` the API is served under."""
    return api_url.removesuffix("/api") or api_url


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
