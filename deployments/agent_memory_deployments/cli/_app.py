"""The command line's shared parts: the app, its consoles, the scope options and the helpers
every command uses (quiet telemetry-free defaults, the Prefect server, errors, tables)."""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import Mapping
from datetime import date
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent_memory.models import Scope
from agent_memory.private import keep_private
from agent_memory.settings import Settings, use_settings

app = typer.Typer(
    name="agent-memory",
    help="Memory that lasts across sessions for LangGraph agents, on PostgreSQL and Prefect.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped or redirected output has no terminal width: rich would squeeze tables (and wrap
# messages) to 80 columns. Lines stay whole there, and tables get room.
_PIPED_WIDTH = 250
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else _PIPED_WIDTH)
errors = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else _PIPED_WIDTH)

UserOpt = Annotated[str | None, typer.Option("--user", help="user_id of the scope")]
AgentOpt = Annotated[str | None, typer.Option("--agent", help="agent_id of the scope")]
WorkflowOpt = Annotated[str | None, typer.Option("--workflow", help="workflow_id of the scope")]


def plain_help(text: str) -> str:
    """A docstring as help text: each paragraph on one line (the terminal wraps it; a line
    break kept from the source would break a sentence in the middle), and reST literals and
    roles (````--run````, ``:class:`X```) as their plain words."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    text = "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)


def plain_helps(commands: typer.Typer) -> None:
    """Make every command's help (from its docstring or ``help=``) plain, as :func:`plain_help`
    says, in ``commands`` and the groups under it: one place, so no command is missed."""
    for info in commands.registered_commands:
        doc = info.help if isinstance(info.help, str) else None
        doc = doc or (info.callback.__doc__ if info.callback else None)
        if doc:
            info.help = plain_help(doc)
    callback = commands.registered_callback  # its docstring is not the group's help
    if callback is not None and isinstance(callback.help, str):
        callback.help = plain_help(callback.help)
    if isinstance(commands.info.help, str):
        commands.info.help = plain_help(commands.info.help)
    for group in commands.registered_groups:
        if isinstance(group.help, str):
            group.help = plain_help(group.help)
        if group.typer_instance is not None:
            plain_helps(group.typer_instance)


def _private_defaults(*, quiet: bool = False) -> None:
    """No telemetry, no network at import; set before Prefect or litellm is imported."""
    keep_private()
    if quiet:
        # a quiet terminal, not a quiet UI: only the console handler is raised, so the run's
        # INFO records still go to the Prefect API (the UI's logs tab)
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
        os.environ.setdefault("PREFECT_LOGGING_ROOT_LEVEL", "ERROR")


def _flow_server() -> None:
    """Point this command's flow runs at a Prefect server: the one Prefect is configured with
    (PREFECT_API_URL, or its profile), else the local one kept in the background (started by
    the first command that needs it; see :mod:`deployments.local_server`), unless
    AGENT_MEMORY_PREFECT_SERVER=ephemeral asks for Prefect's own server per command."""
    from prefect.context import refresh_global_settings_context
    from prefect.settings import PREFECT_API_URL

    from agent_memory.settings import PrefectSettings

    settings = PrefectSettings()
    if settings.server == "ephemeral":
        if "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" not in os.environ:
            # Prefect's own deadline (20 s) is too short for a loaded machine
            timeout = str(int(settings.start_timeout_s))
            os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = timeout
            refresh_global_settings_context()
        return
    if PREFECT_API_URL.value():
        return
    from agent_memory_deployments.local_server import ensure

    os.environ["PREFECT_API_URL"] = ensure(settings)
    refresh_global_settings_context()


def _scope(user: str | None, agent: str | None, workflow: str | None) -> Scope | None:
    """The scope named by the options; None (all scopes) only when no option was given."""
    if user is None and agent is None and workflow is None:
        return None
    return Scope(user, agent, workflow)  # refuses "" and the like, naming the option


def _table(title: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in rows[0] if rows else ["(none)"]:
        table.add_column(str(column))
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    return table


def _settings() -> Settings:
    settings = Settings()
    use_settings(settings)
    return settings


def _fail(exc: Exception) -> typer.Exit:
    errors.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
    return typer.Exit(2)


def fail_on_setting(exc: Exception) -> NoReturn:
    """End the command on a bad setting: one line on stderr, exit 2, no traceback."""
    errors.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
    raise SystemExit(2)


WideOpt = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="every column of the run's table (batches, episodes, each kind of fact, LLM "
        "calls, tokens, the whole error); by default it fits 100 columns",
    ),
]
NARROW = 100  # columns the default table of a run fits in
_SHORT_ERROR = 40  # characters of a scope's error in that table


def _short(error: str) -> str:
    first = error.splitlines()[0] if error else ""
    cut = len(first) > _SHORT_ERROR or first != error
    return first[: _SHORT_ERROR - 1] + "\u2026" if cut else first


def _narrow_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """A run's table in at most :data:`NARROW` columns: scope (wrapped, never cut), outcome,
    new facts, cost and the start of the error."""
    table = Table(title=title, title_justify="left", width=None)
    table.add_column("scope", overflow="fold", max_width=40)
    table.add_column("outcome")
    table.add_column("facts", justify="right")
    table.add_column("cost_usd", justify="right")
    table.add_column("error", overflow="ellipsis", no_wrap=True, max_width=_SHORT_ERROR)
    for row in rows:
        cost = row.get("cost_usd")
        table.add_row(
            str(row["scope"]),
            str(row["outcome"]),
            str(row["facts_created"]),
            "-" if cost is None else f"{cost:.4f}",
            _short(str(row.get("error") or "")),
        )
    return table


def _end_run(title: str, summary: Mapping[str, Any], line: str, *, wide: bool = False) -> None:
    """Print a consolidation run's table (narrow unless ``wide``) and one-line summary; exit 1
    if a scope failed."""
    rows = summary["results"]
    if rows and wide:
        console.print(_table(title, rows))
    elif rows:
        console.print(_narrow_table(title, rows), width=min(console.width, NARROW))
        if any(_short(str(r.get("error") or "")) != (r.get("error") or "") for r in rows):
            console.print("(errors cut short: --wide shows them whole)", highlight=False)
    console.print(line, highlight=False)
    if summary.get("held_back"):
        console.print(f"[yellow]{summary['held_back']}[/]", highlight=False)
    raise typer.Exit(1 if summary["failed"] else 0)


def _day(value: str | None, option: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not a date (YYYY-MM-DD)", param_hint=option
        ) from None


def _print_report(report: dict[str, Any]) -> None:
    console.print(_table(f"Importance on {report['as_of']}", report["distribution"]))
    console.print(_table("Projected expiry", report["expiry"]))
    console.print(_table("Largest scopes", report["scopes"]))
    console.print(
        f"{report['facts']} fact(s); purged {report['purged']}; "
        f"{report['expiring_within_7_days']} expiring within 7 days "
        f"(purge below {report['purge_below']})",
        highlight=False,
    )
