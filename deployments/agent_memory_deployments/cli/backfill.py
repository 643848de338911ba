"""The backfill commands: import history (JSON Lines, LangGraph checkpoints), consolidate it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from agent_memory.backfill import ImportReport
from agent_memory.errors import AgentMemoryError
from agent_memory.models import Level
from agent_memory_deployments.cli._app import (
    WideOpt,
    _end_run,
    _fail,
    _flow_server,
    _private_defaults,
    _settings,
    app,
    console,
    errors,
)
from agent_memory_deployments.cli.watch import run_watched

backfill_app = typer.Typer(help="Import and consolidate historical conversations.")


class DecayFromOption(StrEnum):
    """``backfill run --decay-from`` (agent_memory.models.DecayFrom)."""

    import_ = "import"
    conversation = "conversation"


def _end_import(report: ImportReport, where: str, line: str) -> None:
    """Name each skipped record, print the import's one-line summary; exit 1 if any skipped."""
    for bad in report.bad:
        errors.print(f"[yellow]skipped[/] {where}{bad}", highlight=False)
    console.print(line, highlight=False)
    raise typer.Exit(1 if report.bad else 0)


class LevelOption(StrEnum):
    """``backfill run --level``: where the backfilled conversations' facts are filed."""

    rules = "rules"
    user = "user"
    user_agent = "user_agent"
    agent = "agent"
    exact = "exact"

    def level(self) -> Level | None:
        """The level forced on the run (None: by the rules; exact: the scope itself)."""
        if self is LevelOption.rules:
            return None
        return "scope" if self is LevelOption.exact else cast(Level, self.value)


class OnErrorChoice(StrEnum):
    reject = "reject"
    skip = "skip"


app.add_typer(backfill_app, name="backfill", no_args_is_help=True)


@backfill_app.command("import")
def backfill_import(
    path: Annotated[Path, typer.Argument(help="a JSON Lines file, one conversation per line")],
    on_error: Annotated[
        OnErrorChoice,
        typer.Option(
            help="reject: one bad line imports nothing; skip: report bad lines, import the rest"
        ),
    ] = OnErrorChoice.reject,
) -> None:
    """Import conversations as pending episodes (importing the same data again adds nothing).

    Each line is one conversation, a JSON object: "user_id", "agent_id" and/or "workflow_id"
    (the scope; at least one), "occurred_at" (ISO 8601 with a time zone), "messages" (OpenAI
    or LangChain message dicts), and optionally "id" and "metadata". The project's
    documentation (Backfill) has the details and a sample.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from agent_memory.backfill import import_jsonl
    from agent_memory.db.connection import resolve
    from agent_memory.db.pool import setup_schema

    settings = _settings()
    try:
        database = resolve(settings.db)
        setup_schema(database, settings.memory)
        size = path.stat().st_size if path.is_file() else 0
        with (
            Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                DownloadColumn(),
                TimeRemainingColumn(),
                console=errors,
                transient=True,
            ) as bar,
            database.connect() as conn,
        ):
            task = bar.add_task(f"importing {path.name}", total=size)
            report = import_jsonl(
                conn,
                path,
                on_error=on_error.value,
                skip_is="--on-error skip",  # the refusal names this command's option
                max_bytes=settings.memory.max_episode_bytes,
                progress=lambda done: bar.update(task, completed=done),
            )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _end_import(
        report,
        f"{path}, ",
        f"{report.lines} conversation(s) read: {report.inserted} imported, "
        f"{report.duplicates} already there, {len(report.bad)} bad line(s) skipped"
        + (
            f"; {report.empty_messages} message(s) with no text, kept in their conversations"
            if report.empty_messages
            else ""
        ),
    )


@backfill_app.command("checkpoints")
def backfill_checkpoints(
    source: Annotated[
        str,
        typer.Option(
            "--from",
            envvar="AGENT_MEMORY_CHECKPOINT_URL",
            show_envvar=False,  # the help names it
            help="the LangGraph PostgresSaver's database URL (or AGENT_MEMORY_CHECKPOINT_URL)",
        ),
    ],
    thread_pattern: Annotated[
        str | None,
        typer.Option(
            help="thread id -> scope, a regex with named groups user_id/agent_id/workflow_id; "
            "default: the thread id is the user_id"
        ),
    ] = None,
    on_error: Annotated[
        OnErrorChoice,
        typer.Option(help="reject: one bad thread imports nothing; skip: report it, go on"),
    ] = OnErrorChoice.reject,
) -> None:
    """Import LangGraph checkpoint threads as pending episodes (again: only what is new)."""
    from agent_memory.backfill import import_checkpoints
    from agent_memory.db.connection import resolve
    from agent_memory.db.pool import setup_schema

    settings = _settings()
    try:
        database = resolve(settings.db)
        setup_schema(database, settings.memory)
        with database.connect() as conn:
            report = import_checkpoints(
                conn,
                source,
                pattern=thread_pattern,
                on_error=on_error.value,
                skip_is="--on-error skip",  # the refusal names this command's option
                max_bytes=settings.memory.max_episode_bytes,
            )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _end_import(
        report,
        "",
        f"{report.lines} thread(s) read: {report.inserted} imported, "
        f"{report.duplicates} with nothing new, {len(report.bad)} bad thread(s) skipped",
    )


def _backfill_line(summary: Mapping[str, Any]) -> str:
    """The one-line summary of a backfill run."""
    line = (
        f"{summary['pending_before']} pending episode(s) in the window; {summary['episodes']} "
        f"consolidated over {summary['scopes']} scope(s): {summary['completed']} completed, "
        f"{summary['failed']} failed; {summary['facts_created']} new fact(s)"
    )
    if summary.get("facts_below_purge_threshold"):
        line += (
            f"; {summary['facts_below_purge_threshold']} fact(s) already below the purge "
            "threshold go at the next decay"
        )
    return line


@backfill_app.command("run")
def backfill_run(
    since: Annotated[
        datetime | None,
        typer.Option(formats=["%Y-%m-%d"], help="conversations from this day (UTC)"),
    ] = None,
    until: Annotated[
        datetime | None,
        typer.Option(formats=["%Y-%m-%d"], help="conversations before this day (UTC)"),
    ] = None,
    user: Annotated[
        list[str] | None, typer.Option("--user", help="only this user id (repeatable)")
    ] = None,
    decay_from: Annotated[
        DecayFromOption,
        typer.Option(
            "--decay-from",
            help="where facts' decay clock starts: at the import (history useful now) or at "
            "the conversation (as faded as it is old; old history may be purged at once)",
        ),
    ] = DecayFromOption.import_,
    level: Annotated[
        LevelOption,
        typer.Option(
            "--level",
            help="where facts are filed: by the rules, as live consolidation files them "
            "(rules); all at the person's level (user), the person with the agent "
            "(user_agent), the agent's own (agent), or where each was said (exact); a level "
            "the scope does not read under AGENT_MEMORY_SHARE keeps a fact where it was said",
        ),
    ] = LevelOption.rules,
    wide: WideOpt = False,
) -> None:
    """Run the backfill flow: consolidate pending history in the window, oldest first; on a
    terminal, a progress bar of the episodes and scopes done, the rate and the time left.

    Interrupt it and run it again: it carries on where it stopped.
    """
    from agent_memory.db.connection import resolve
    from agent_memory.db.pool import setup_schema
    from agent_memory.models import Window

    _private_defaults(quiet=True)
    try:
        window = Window(
            since.replace(tzinfo=UTC) if since else None,
            until.replace(tzinfo=UTC) if until else None,
            user or None,
        )
        settings = _settings()
        setup_schema(resolve(settings.db), settings.memory)
        _flow_server()
        from agent_memory_flows.backfill import BackfillParams, backfill_flow
        from agent_memory_flows.outcome import run_for_summary

        params = BackfillParams(
            since=window.since,
            until=window.until,
            users=window.users,
            decay_from=decay_from.value,
            level=level.level(),
        )
        summary = run_watched(
            lambda: run_for_summary(backfill_flow, params),
            "episodes",
            "scopes",
            starting="starting the backfill flow",
        )
    except AgentMemoryError as exc:
        raise _fail(exc) from None
    _end_run("Backfill", summary, _backfill_line(summary), wide=wide)
