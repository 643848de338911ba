"""The JSON Lines format of a backfill: one conversation per line, read and checked.

Each line is an object (see ``docs/backfill.md`` and ``examples/history.jsonl``)::

    {"user_id": "u-42", "agent_id": "support", "occurred_at": "2026-03-01T09:30:00+00:00",
     "id": "conv-0001", "messages": [{"role": "user", "content": "I moved to Lyon."}]}

``user_id`` / ``agent_id`` / ``workflow_id`` name the scope (at least one), ``occurred_at`` is
an ISO 8601 time with a zone, ``messages`` are OpenAI chat messages or LangChain message dicts
(``{"type": "human", "content": ...}`` or ``messages_to_dict``'s ``{"type", "data"}``), ``id``
(optional) is the source's own id, and ``metadata`` (optional) an object kept with the episode.
:mod:`agent_memory.backfill` imports what this reads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_memory.errors import AgentMemoryError
from agent_memory.messages import (
    MAX_NESTING,
    check_occurred_at,
    nested_too_deep,
    serialize_messages,
)
from agent_memory.models import Scope

SCOPE_FIELDS = ("user_id", "agent_id", "workflow_id")
_KNOWN_FIELDS = {*SCOPE_FIELDS, "occurred_at", "messages", "id", "metadata"}
_LANGCHAIN_TYPES = {"human", "ai", "system", "tool", "function", "chat"}
_OPENAI_ROLES = {"user", "assistant", "system", "tool", "function", "developer"}
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
    if all(record.get(k) is None for k in SCOPE_FIELDS):
        raise ValueError("no scope: give at least one of user_id, agent_id, workflow_id")
    scope = Scope.from_mapping({k: record.get(k) for k in SCOPE_FIELDS})
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
