"""Turning conversation messages into JSON that PostgreSQL stores losslessly, and back.

Messages arrive as LangChain message objects (``MessagesState``) or as plain dicts (OpenAI chat
format). A LangChain message is stored as its full ``model_dump()`` (type, content, id, name,
tool calls, tool_call_id, additional kwargs, metadata) plus an OpenAI-style ``role``; a dict is
stored as given. :func:`to_langchain` rebuilds equal message objects.

What JSONB cannot hold is handled here, once: text with NUL characters or lone surrogates is
made storable (U+FFFD in their place) and the episode says so; values that are not JSON (sets,
arbitrary objects) are refused with an error that names where they are, and so are values nested
deeper than :data:`MAX_NESTING` (Python's own parsers and walkers fail past about a thousand
levels with a RecursionError that names nothing). :func:`check_occurred_at` is the one rule for
an episode's time.
"""

from __future__ import annotations

import base64
import datetime as dt
import enum
import json
import math
import uuid
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from langchain_core.messages import BaseMessage, messages_from_dict

from agent_memory.errors import EpisodeTooLargeError, InvalidMessageError

# how deep lists and objects may nest in a message or an imported line: far more than any
# conversation needs, far less than Python's recursion limit (so the error is ours, not a
# RecursionError from json or from the walk below)
MAX_NESTING = 100

# The times an episode may hold. PostgreSQL stores timestamptz back to 4713 BC, but psycopg
# reads it as a Python datetime (years 1 to 9999) in the session's time zone:
# '0001-01-01T00:00:00+14:00' (10:00 on 31 December of year 0 in UTC) would be stored, and every
# later read of its scope would fail with "timestamp too small". A day's margin at each end
# keeps the reading valid in any session time zone.
EARLIEST_TIME = dt.datetime(1, 1, 2, tzinfo=dt.UTC)
LATEST_TIME = dt.datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=dt.UTC)
_TIME_RANGE = "0001-01-02T00:00:00Z to 9999-12-30T23:59:59Z"
# how far ahead of this machine's clock an episode's time may be (clocks differ a little)
CLOCK_SKEW = dt.timedelta(minutes=5)


def check_occurred_at(when: dt.datetime, shown: str | None = None) -> dt.datetime:
    """``when`` if an episode may hold it: with a time zone, within what can be read back
    (:data:`EARLIEST_TIME` to :data:`LATEST_TIME`) and not in the future; otherwise an
    :class:`InvalidMessageError` naming the value (``shown``, as the caller was given it).

    Example: ``check_occurred_at(datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))))``
    raises "occurred_at 0001-01-01T00:00:00+14:00 is outside the times memory can store ...".
    """
    name = shown if shown is not None else when.isoformat()
    if when.tzinfo is None or when.utcoffset() is None:
        raise InvalidMessageError(f"occurred_at {name} has no time zone; give one")
    # aware datetimes compare by their UTC instant without converting (which would overflow)
    if not EARLIEST_TIME <= when <= LATEST_TIME:
        raise InvalidMessageError(
            f"occurred_at {name} is outside the times memory can store ({_TIME_RANGE}, in UTC)"
        )
    if when > dt.datetime.now(dt.UTC) + CLOCK_SKEW:
        raise InvalidMessageError(
            f"occurred_at {name} is in the future; an episode records a conversation that happened"
        )
    return when


def nested_too_deep(value: Any, limit: int = MAX_NESTING) -> bool:
    """True when parsed JSON ``value`` nests lists and objects more than ``limit`` levels deep
    (walked without recursion, so any depth is measured)."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


_ROLE_OF_TYPE = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "function",
    "chat": "user",
    "developer": "developer",
}
_LANGCHAIN_TYPES = {"human", "ai", "system", "tool", "function", "chat", "remove"}


def clean_text(value: str) -> str:
    """``value`` as PostgreSQL can take it: NUL characters and lone surrogates become U+FFFD."""
    return _Sanitizer().text(value)


class _Sanitizer:
    """Walks a message, copying it into plain JSON values and noting what it had to change."""

    def __init__(self) -> None:
        self.replaced: set[str] = set()

    def text(self, value: str) -> str:
        if "\x00" in value:
            self.replaced.add("nul")
            value = value.replace("\x00", "\ufffd")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # lone surrogates cannot be encoded as UTF-8; U+FFFD marks where one was
            self.replaced.add("surrogate")
            value = "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in value)
        return value

    def value(self, obj: Any, path: str, depth: int = 1) -> Any:
        if depth > MAX_NESTING and isinstance(obj, dict | list | tuple):
            raise InvalidMessageError(
                f"{path:.60}... nests lists and objects more than {MAX_NESTING} levels deep"
            )
        if obj is None or isinstance(obj, bool | int):
            return obj
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, float):
            if not math.isfinite(obj):
                raise InvalidMessageError(f"{path} is {obj!r}, which JSON cannot represent")
            return obj
        if isinstance(obj, dict):
            out: dict[str, Any] = {}
            for key, item in obj.items():
                if not isinstance(key, str):
                    raise InvalidMessageError(
                        f"{path} has a key of type {type(key).__name__} ({key!r:.40}); "
                        "JSON keys must be strings"
                    )
                out[self.text(key)] = self.value(item, f"{path}.{key}", depth + 1)
            return out
        if isinstance(obj, list | tuple):
            return [self.value(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(obj)]
        if isinstance(obj, dt.datetime | dt.date | dt.time):
            return obj.isoformat()
        if isinstance(obj, uuid.UUID | Decimal):
            return str(obj)
        if isinstance(obj, enum.Enum):
            return self.value(obj.value, path, depth)
        if isinstance(obj, bytes):
            return {"__bytes_b64__": base64.b64encode(obj).decode("ascii")}
        if isinstance(obj, BaseMessage):
            return self.value(message_to_json(obj), path, depth)
        dump = getattr(obj, "model_dump", None)
        if callable(dump):
            return self.value(dump(mode="json"), path, depth)
        raise InvalidMessageError(
            f"{path} holds a {type(obj).__module__}.{type(obj).__qualname__} "
            f"({obj!r:.60}), which cannot be stored as JSON"
        )


def message_to_json(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as a JSON-ready dict: its full dump plus an OpenAI ``role``."""
    data = message.model_dump()
    data["role"] = _ROLE_OF_TYPE.get(message.type, message.type)
    if message.type == "chat":
        data["role"] = getattr(message, "role", "user")
    return data


def serialize_messages(
    messages: Sequence[Any], *, max_bytes: int
) -> tuple[list[dict[str, Any]], int, list[str]]:
    """Messages as storable JSON values, their encoded size, and what had to be replaced.

    Raises :class:`InvalidMessageError` for a message that is neither a LangChain message nor a
    dict or holds a value JSON cannot hold, and :class:`EpisodeTooLargeError` past ``max_bytes``.
    """
    sanitizer = _Sanitizer()
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if isinstance(message, BaseMessage):
            raw: Any = message_to_json(message)
        elif isinstance(message, dict):
            raw = message
        else:
            raise InvalidMessageError(
                f"messages[{i}] is a {type(message).__name__} ({message!r:.60}); "
                "expected a LangChain message or a dict"
            )
        out.append(sanitizer.value(raw, f"messages[{i}]"))
    size = len(json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > max_bytes:
        raise EpisodeTooLargeError(
            f"the conversation is {size:,} bytes as JSON, over the limit of {max_bytes:,} "
            "(AGENT_MEMORY_MAX_EPISODE_BYTES)"
        )
    return out, size, sorted(sanitizer.replaced)


def to_langchain(stored: Iterable[dict[str, Any]]) -> list[BaseMessage]:
    """Rebuild LangChain messages from stored JSON (dicts in OpenAI format are converted too)."""
    from langchain_core.messages import convert_to_messages

    result: list[BaseMessage] = []
    for item in stored:
        kind = item.get("type")
        if kind in _LANGCHAIN_TYPES and "content" in item:
            data = {k: v for k, v in item.items() if k != "role" or kind == "chat"}
            result.extend(messages_from_dict([{"type": kind, "data": data}]))
        else:
            result.extend(convert_to_messages([item]))
    return result


def role_and_text(message: dict[str, Any]) -> tuple[str, str]:
    """The speaker and the plain text of a stored message, for prompts and checksums."""
    role = str(message.get("role") or _ROLE_OF_TYPE.get(str(message.get("type")), "unknown"))
    content = message.get("content", "")
    if isinstance(content, list):  # multimodal blocks: keep the text parts
        parts = [
            block.get("text", "") if isinstance(block, dict) else str(block) for block in content
        ]
        content = " ".join(p for p in parts if p)
    if content is None:  # an assistant's message of tool calls alone (OpenAI's format)
        content = ""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    tool_calls = message.get("tool_calls") or []
    if tool_calls and not text:
        names = ", ".join(_tool_name(c) for c in tool_calls if isinstance(c, dict))
        text = f"[called tools: {names}]"
    return role, text


def _tool_name(call: dict[str, Any]) -> str:
    """A tool call's tool: LangChain's ``name``, or OpenAI's ``function.name``."""
    function = call.get("function")
    name = call.get("name") or (function.get("name") if isinstance(function, dict) else None)
    return str(name or "?")
