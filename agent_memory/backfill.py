"""Importing historical conversations as episodes, with the time they happened.

JSON Lines, one conversation per line (see ``docs/backfill.md`` and ``examples/history.jsonl``)::

    {"user_id": "u-42", "agent_id": "support", "occurred_at": "2026-03-01T09:30:00+00:00",
     "id": "conv-0001", "messages": [{"role": "user", "content": "I moved to Lyon."}]}

``user_id`` / ``agent_id`` / ``workflow_id`` name the scope (at least one), ``occurred_at`` is
an ISO 8601 time with a zone, ``messages`` are OpenAI chat messages or LangChain message dicts
(``{"type": "human", "content": ...}`` or ``messages_to_dict``'s ``{"type", "data"}``), ``id``
(optional) is the source's own id, and ``metadata`` (optional) an object kept with the episode.

Importing the same data again adds nothing: every episode carries a natural key, the source's
id or else a hash of its time and messages, unique within its scope. A file is imported in one
transaction: with ``on_error="reject"`` one bad line rejects the whole file, with ``"skip"``
bad lines are reported (with their line numbers) and the rest is imported.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from agent_memory.db import episodes as episode_repo
from agent_memory.errors import AgentMemoryError, BackfillError, DatabaseUnavailableError
from agent_memory.messages import (
    MAX_NESTING,
    check_occurred_at,
    nested_too_deep,
    serialize_messages,
)
from agent_memory.models import Scope
from agent_memory.redact import redact

OnError = Literal["skip", "reject"]
_SCOPE_FIELDS = ("user_id", "agent_id", "workflow_id")
_KNOWN_FIELDS = {*_SCOPE_FIELDS, "occurred_at", "messages", "id", "metadata"}
_LANGCHAIN_TYPES = {"human", "ai", "system", "tool", "function", "chat"}
_OPENAI_ROLES = {"user", "assistant", "system", "tool", "function", "developer"}
_CHUNK = 500
_TOO_DEEP = f"lists and objects nested more than {MAX_NESTING} levels deep"


@dataclass(frozen=True)
class Conversation:
    """One valid line: an episode ready to insert."""

    line: int
    scope: Scope
    occurred_at: datetime
    messages: list[dict[str, Any]]
    metadata: dict[str, Any]
    source_key: str


@dataclass(frozen=True)
class BadLine:
    """A line (or a checkpoint thread) that could not be imported, and why."""

    line: int
    error: str
    thread: str | None = None

    def __str__(self) -> str:
        where = f"thread {self.thread!r}" if self.thread is not None else f"line {self.line}"
        return f"{where}: {self.error}"


@dataclass
class ImportReport:
    """What an import did."""

    path: str
    lines: int = 0
    inserted: int = 0
    duplicates: int = 0
    bad: list[BadLine] = field(default_factory=list)


def _message(raw: Any, i: int) -> dict[str, Any]:
    """One message as the dict the library stores (OpenAI or LangChain shape), or an error."""
    if not isinstance(raw, dict):
        raise ValueError(f"messages[{i}] is a {type(raw).__name__}, not an object")
    if "data" in raw and raw.get("type") in _LANGCHAIN_TYPES:  # messages_to_dict's shape
        from langchain_core.messages import messages_from_dict

        from agent_memory.messages import message_to_json

        try:
            return message_to_json(messages_from_dict([raw])[0])
        except Exception as exc:  # a malformed dump: name it, do not guess
            raise ValueError(f"messages[{i}] is not a valid LangChain message: {exc}") from None
    role, kind = raw.get("role"), raw.get("type")
    if role not in _OPENAI_ROLES and kind not in _LANGCHAIN_TYPES:
        raise ValueError(
            f"messages[{i}] has role {role!r} and type {kind!r}; expected an OpenAI role "
            f"({', '.join(sorted(_OPENAI_ROLES))}) or a LangChain type"
        )
    if "content" not in raw:
        raise ValueError(f"messages[{i}] has no 'content'")
    return raw


def _time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"occurred_at {value!r} is not an ISO 8601 string")
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"occurred_at {value!r} is not an ISO 8601 time") from None
    return check_occurred_at(when, repr(value))


def source_key(source_id: Any, occurred_at: datetime, messages: list[dict[str, Any]]) -> str:
    """The natural key: the source's id when it has one, else a hash of time and messages."""
    if source_id is not None:
        return f"id:{source_id}"
    body = json.dumps(
        {"occurred_at": occurred_at.astimezone(UTC).isoformat(), "messages": messages},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


def parse_line(text: str, number: int, *, max_bytes: int) -> Conversation:
    """One JSON Lines record as a conversation; ValueError (or AgentMemoryError) naming the
    bad value otherwise."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:  # json's parser recurses per level: far deeper than allowed
        raise ValueError(_TOO_DEEP) from None
    if nested_too_deep(record):
        raise ValueError(_TOO_DEEP)
    if not isinstance(record, dict):
        raise ValueError(f"a {type(record).__name__}, not an object")
    unknown = sorted(set(record) - _KNOWN_FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(map(repr, unknown))}")
    if all(record.get(k) is None for k in _SCOPE_FIELDS):
        raise ValueError("no scope: give at least one of user_id, agent_id, workflow_id")
    scope = Scope.from_mapping({k: record.get(k) for k in _SCOPE_FIELDS})
    if "occurred_at" not in record:
        raise ValueError("no 'occurred_at'")
    occurred_at = _time(record["occurred_at"])
    raw = record.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"'messages' must be a non-empty list, got {raw!r:.60}")
    messages, size, replaced = serialize_messages(
        [_message(m, i) for i, m in enumerate(raw)], max_bytes=max_bytes
    )
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError(f"'metadata' must be an object, got {metadata!r:.60}")
    source_id = record.get("id")
    if source_id is not None and not isinstance(source_id, str | int):
        raise ValueError(f"'id' must be a string or an integer, got {source_id!r:.60}")
    metadata = {**metadata, "bytes": size, "imported_from_line": number}
    if replaced:
        metadata["replaced"] = replaced
    return Conversation(
        number, scope, occurred_at, messages, metadata, source_key(source_id, occurred_at, messages)
    )


def read_jsonl(path: Path, *, max_bytes: int) -> Iterator[tuple[int, Conversation | BadLine]]:
    """Each non-blank line's conversation or error, with the bytes read so far."""
    with path.open("rb") as handle:
        done = 0
        for number, raw in enumerate(handle, 1):
            done += len(raw)
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield done, BadLine(number, f"not UTF-8 (byte {exc.start})")
                continue
            try:
                yield done, parse_line(text, number, max_bytes=max_bytes)
            except (ValueError, AgentMemoryError) as exc:
                yield done, BadLine(number, str(exc))


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
    if not groups or not groups <= set(_SCOPE_FIELDS):
        raise BackfillError(
            f"thread pattern {pattern!r} must name groups among {', '.join(_SCOPE_FIELDS)}"
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
        try:
            threads = [r["thread_id"] for r in source.execute(episode_repo.CHECKPOINT_THREADS)]
        except psycopg.errors.UndefinedTable:
            raise BackfillError(
                "the checkpoint database has no 'checkpoints' table (is it a PostgresSaver's?)"
            ) from None
        saver = PostgresSaver(source)  # type: ignore[arg-type]
        for n, thread in enumerate(threads, 1):
            report.lines += 1
            try:
                scope = scope_of_thread(thread, compiled)
                latest = saver.get_tuple({"configurable": {"thread_id": thread}})
                messages = list(
                    (latest.checkpoint["channel_values"].get("messages") or []) if latest else []
                )
                prefix = f"thread:{thread}:"
                done = cur.execute(
                    episode_repo.IMPORTED_FROM_THREAD, {**scope.as_dict(), "prefix": prefix}
                ).fetchone()
                already = int(done[0]) if done else 0
                new = messages[already:]
                if latest is None or not new:
                    continue  # counted as already there
                stored, size, replaced = serialize_messages(new, max_bytes=max_bytes)
            except (ValueError, AgentMemoryError) as exc:
                bad = BadLine(n, str(exc), thread=thread)
                if on_error == "reject":
                    raise BackfillError(
                        f"{bad}; nothing was imported (use {skip_is} to import the other threads)"
                    ) from None
                report.bad.append(bad)
                continue
            metadata: dict[str, Any] = {
                "bytes": size,
                "thread_id": thread,
                "checkpoint_id": latest.checkpoint["id"],
                "first_message": already,
            }
            if replaced:
                metadata["replaced"] = replaced
            cur.execute(
                episode_repo.IMPORT,
                {
                    **scope.as_dict(),
                    "messages": Jsonb(stored),
                    "message_count": len(stored),
                    "metadata": Jsonb(metadata),
                    "occurred_at": datetime.fromisoformat(latest.checkpoint["ts"]),
                    "source_key": f"{prefix}{already}",
                },
            )
            report.inserted += max(cur.rowcount, 0)
            if progress is not None:
                progress(n)
    report.duplicates = report.lines - len(report.bad) - report.inserted
    return report
