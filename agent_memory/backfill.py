"""Importing historical conversations as episodes, with the time they happened.

From a JSON Lines file, one conversation per line (the format, and how a line is read and
checked, is :mod:`agent_memory.backfill_format`'s), or from a LangGraph checkpointer's database.

Importing the same data again adds nothing: every episode carries a natural key, the source's
id or else a hash of its time and messages, unique within its scope. A file is imported in one
transaction: with ``on_error="reject"`` one bad line rejects the whole file, with ``"skip"``
bad lines are reported (with their line numbers) and the rest is imported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

import psycopg
from psycopg.types.json import Jsonb

from agent_memory.backfill_format import SCOPE_FIELDS, BadLine, read_jsonl
from agent_memory.backfill_format import Conversation as Conversation  # re-exported, as before
from agent_memory.backfill_format import parse_line as parse_line
from agent_memory.backfill_format import source_key as source_key
from agent_memory.db import episodes as episode_repo
from agent_memory.errors import AgentMemoryError, BackfillError, DatabaseUnavailableError
from agent_memory.messages import role_and_text, serialize_messages
from agent_memory.models import Scope
from agent_memory.redact import redact

OnError = Literal["skip", "reject"]
_CHUNK = 500


@dataclass
class ImportReport:
    """What an import did."""

    path: str
    lines: int = 0
    inserted: int = 0
    duplicates: int = 0
    bad: list[BadLine] = field(default_factory=list)
    # messages with no text (nor tool calls) in the conversations read: stored as they are, so
    # the conversation keeps its shape, but with nothing to index or to learn from
    empty_messages: int = 0


def empty_messages(messages: list[dict[str, Any]]) -> int:
    """How many of ``messages`` say nothing: no text, no tool call."""
    return sum(not role_and_text(m)[1].strip() for m in messages)


@contextmanager
def _database_errors(conn: psycopg.Connection[Any], report: ImportReport) -> Iterator[None]:
    """The database failing mid-import as one error that says so (the transaction is rolled
    back, so nothing was imported) instead of psycopg's traceback."""
    try:
        yield
    except psycopg.OperationalError as exc:
        said = " ".join(redact(str(exc)).split()).rstrip(".")  # psycopg's spans lines
        where = f"{report.path}, after {report.lines} record(s) read"
        if conn.broken:
            raise DatabaseUnavailableError(
                f"lost the database during the import ({where}): {said}; nothing was "
                "imported (import again once it is back: what is there is not added twice)"
            ) from None
        raise BackfillError(
            f"the database stopped the import ({where}): {said}; nothing was imported"
        ) from None


def import_jsonl(
    conn: psycopg.Connection[Any],
    path: Path,
    *,
    on_error: OnError = "reject",
    max_bytes: int = 8 * 1024 * 1024,
    progress: Callable[[int], None] | None = None,
    skip_is: str = "on_error='skip'",
) -> ImportReport:
    """Import a JSON Lines file as episodes, in one transaction.

    ``on_error="reject"``: the first bad line raises :class:`BackfillError` (naming it) and
    nothing is imported. ``"skip"``: bad lines are listed in the report, the rest is imported.
    ``progress`` is called with the bytes read so far; ``skip_is`` is how the caller's user
    asks for skipping (the command line says ``--on-error skip``), named in the refusal.
    """
    if on_error not in ("skip", "reject"):
        raise BackfillError(f"on_error {on_error!r} is not 'skip' or 'reject'")
    if not path.is_file():
        raise BackfillError(f"{path} is not a file")
    report = ImportReport(str(path))
    pending: list[dict[str, Any]] = []

    def flush(cur: psycopg.Cursor[Any]) -> None:
        if pending:
            cur.executemany(episode_repo.IMPORT, pending)
            report.inserted += max(cur.rowcount, 0)
            pending.clear()

    with _database_errors(conn, report), conn.transaction(), conn.cursor() as cur:
        for done, item in read_jsonl(path, max_bytes=max_bytes):
            report.lines += 1
            if isinstance(item, BadLine):
                if on_error == "reject":
                    raise BackfillError(
                        f"{path}, {item}; nothing was imported (use {skip_is} to import "
                        "the other lines)"
                    )
                report.bad.append(item)
            else:
                report.empty_messages += empty_messages(item.messages)
                pending.append(
                    {
                        **item.scope.as_dict(),
                        "messages": Jsonb(item.messages),
                        "message_count": len(item.messages),
                        "metadata": Jsonb(item.metadata),
                        "occurred_at": item.occurred_at,
                        "source_key": item.source_key,
                    }
                )
                if len(pending) >= _CHUNK:
                    flush(cur)
            if progress is not None:
                progress(done)
        flush(cur)
    report.duplicates = report.lines - len(report.bad) - report.inserted
    return report


# ---- LangGraph checkpoints ------------------------------------------------------------------


def thread_pattern(pattern: str | None) -> re.Pattern[str] | None:
    """The thread -> scope mapping: a regular expression whose named groups are scope fields
    (``(?P<user_id>[^:]+):(?P<agent_id>.+)``); None maps a thread id to ``user_id``."""
    if pattern is None:
        return None
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise BackfillError(
            f"thread pattern {pattern!r} is not a regular expression: {exc}"
        ) from None
    groups = set(compiled.groupindex)
    if not groups or not groups <= set(SCOPE_FIELDS):
        raise BackfillError(
            f"thread pattern {pattern!r} must name groups among {', '.join(SCOPE_FIELDS)}"
            f" (it names {', '.join(sorted(groups)) or 'none'})"
        )
    return compiled


def scope_of_thread(thread_id: str, pattern: re.Pattern[str] | None) -> Scope:
    if pattern is None:
        return Scope(user_id=thread_id)
    match = pattern.fullmatch(thread_id)
    if match is None:
        raise ValueError(f"does not match the thread pattern {pattern.pattern!r}")
    return Scope.from_mapping(match.groupdict())


class _Continuation(NamedTuple):
    """What a thread adds: the messages of its latest checkpoint after those already imported."""

    scope: Scope
    checkpoint: Any
    already: int
    stored: list[dict[str, Any]]
    size: int
    replaced: list[str]


def _checkpoint_threads(source: psycopg.Connection[Any]) -> list[str]:
    try:
        return [r["thread_id"] for r in source.execute(episode_repo.CHECKPOINT_THREADS)]
    except psycopg.errors.UndefinedTable:
        raise BackfillError(
            "the checkpoint database has no 'checkpoints' table (is it a PostgresSaver's?)"
        ) from None


def _continuation(
    cur: psycopg.Cursor[Any],
    saver: Any,
    thread: str,
    pattern: re.Pattern[str] | None,
    *,
    max_bytes: int,
) -> _Continuation | None:
    """What ``thread`` adds, or None when it adds nothing; ValueError (or AgentMemoryError) for
    a thread that cannot be imported."""
    scope = scope_of_thread(thread, pattern)
    latest = saver.get_tuple({"configurable": {"thread_id": thread}})
    messages = list((latest.checkpoint["channel_values"].get("messages") or []) if latest else [])
    done = cur.execute(
        episode_repo.IMPORTED_FROM_THREAD, {**scope.as_dict(), "prefix": f"thread:{thread}:"}
    ).fetchone()
    already = int(done[0]) if done else 0
    new = messages[already:]
    if latest is None or not new:
        return None
    stored, size, replaced = serialize_messages(new, max_bytes=max_bytes)
    return _Continuation(scope, latest.checkpoint, already, stored, size, replaced)


def _thread_episode(thread: str, found: _Continuation) -> dict[str, Any]:
    """The parameters of ``episode_repo.IMPORT`` for what a thread adds."""
    metadata: dict[str, Any] = {
        "bytes": found.size,
        "thread_id": thread,
        "checkpoint_id": found.checkpoint["id"],
        "first_message": found.already,
    }
    if found.replaced:
        metadata["replaced"] = found.replaced
    return {
        **found.scope.as_dict(),
        "messages": Jsonb(found.stored),
        "message_count": len(found.stored),
        "metadata": Jsonb(metadata),
        "occurred_at": datetime.fromisoformat(found.checkpoint["ts"]),
        "source_key": f"thread:{thread}:{found.already}",
    }


def import_checkpoints(
    conn: psycopg.Connection[Any],
    source_dsn: str,
    *,
    pattern: str | None = None,
    on_error: OnError = "reject",
    max_bytes: int = 8 * 1024 * 1024,
    progress: Callable[[int], None] | None = None,
    skip_is: str = "on_error='skip'",
) -> ImportReport:
    """Import the conversations of a LangGraph PostgreSQL checkpointer (``PostgresSaver``) as
    episodes, one per thread: the messages of its latest checkpoint, at that checkpoint's time.

    A thread already imported adds only the messages that came after (so importing again adds
    nothing, and a thread that went on adds its continuation). ``pattern`` maps thread ids to
    scopes (see :func:`thread_pattern`); a thread it does not fit is a bad record, rejected or
    skipped as ``on_error`` says. One transaction: a rejected import stores nothing.
    """
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    if on_error not in ("skip", "reject"):
        raise BackfillError(f"on_error {on_error!r} is not 'skip' or 'reject'")
    compiled = thread_pattern(pattern)
    report = ImportReport("checkpoints")
    try:
        source = psycopg.connect(source_dsn, autocommit=True, row_factory=dict_row)
    except psycopg.Error as exc:
        raise BackfillError(f"cannot reach the checkpoint database: {redact(str(exc))}") from None
    with source, _database_errors(conn, report), conn.transaction(), conn.cursor() as cur:
        threads = _checkpoint_threads(source)
        saver = PostgresSaver(source)  # type: ignore[arg-type]
        for n, thread in enumerate(threads, 1):
            report.lines += 1
            try:
                found = _continuation(cur, saver, thread, compiled, max_bytes=max_bytes)
            except (ValueError, AgentMemoryError) as exc:
                bad = BadLine(n, str(exc), thread=thread)
                if on_error == "reject":
                    raise BackfillError(
                        f"{bad}; nothing was imported (use {skip_is} to import the other threads)"
                    ) from None
                report.bad.append(bad)
                continue
            if found is None:
                continue  # counted as already there
            cur.execute(episode_repo.IMPORT, _thread_episode(thread, found))
            report.inserted += max(cur.rowcount, 0)
            if progress is not None:
                progress(n)
    report.duplicates = report.lines - len(report.bad) - report.inserted
    return report
