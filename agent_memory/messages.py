"""Turning conversation messages into JSON that PostgreSQL stores losslessly, and back.

Messages arrive as LangChain message objects (``MessagesState``) or as plain dicts (OpenAI chat
format). A LangChain message is stored as its full ``model_dump()`` (type, content, id, name,
tool calls, tool_call_id, additional kwargs, metadata) plus an OpenAI-style ``role``; a dict is
stored as given. :func:`to_langchain` rebuilds equal message objects.

What JSONB cannot hold is handled here, once: text with NUL characters or lone surrogates is
made storable (U+FFFD in their place) and the episode says so; values that are not JSON (sets,
arbitrary objects) are refused with an error that names where they are.
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

    def value(self, obj: Any, path: str) -> Any:
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
                out[self.text(key)] = self.value(item, f"{path}.{key}")
            return out
        if isinstance(obj, list | tuple):
            return [self.value(item, f"{path}[{i}]") for i, item in enumerate(obj)]
        if isinstance(obj, dt.datetime | dt.date | dt.time):
            return obj.isoformat()
        if isinstance(obj, uuid.UUID | Decimal):
            return str(obj)
        if isinstance(obj, enum.Enum):
            return self.value(obj.value, path)
        if isinstance(obj, bytes):
            return {"__bytes_b64__": base64.b64encode(obj).decode("ascii")}
        if isinstance(obj, BaseMessage):
            return self.value(message_to_json(obj), path)
        dump = getattr(obj, "model_dump", None)
        if callable(dump):
            return self.value(dump(mode="json"), path)
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
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    tool_calls = message.get("tool_calls") or []
    if tool_calls and not text:
        names = ", ".join(str(c.get("name", "?")) for c in tool_calls if isinstance(c, dict))
        text = f"[called tools: {names}]"
    return role, text
