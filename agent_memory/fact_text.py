"""The text of a fact: how a Store value becomes the sentence inject shows, and the one check
of a fact's text that every way in (the manager, the Store, the tools, MCP) runs before any SQL.

A Store value's text (:func:`memory_text`) is read, not dumped: LangMem's memory tools put
``{"content": "..."}`` or, with a schema, ``{"content": {...the schema's fields...}}``, its
store manager ``{"kind": "Memory", "content": {"content": "..."}}``. The rule, applied from the
value down:

* a string is its own text; a number or true / false is written as JSON writes it; null and
  empty things have none;
* a mapping whose text field (``content``, ``text``, ``memory``, ``fact``, the first that has
  any) holds text is that text; at the top of a value ``importance`` and ``kind`` are the
  fact's settings, not its text;
* any other mapping is its fields in their order, ``name: text`` joined by ``"; "``, and a
  nested one is put in parentheses: ``{"name": "Erin", "allergy": "peanuts"}`` is
  ``"name: Erin; allergy: peanuts"``;
* a list is its items' texts joined by ``", "``.

So ``{"content": {"content": "Erin is allergic to peanuts"}}`` is "Erin is allergic to
peanuts", never the JSON of it.

:func:`check_text` refuses what PostgreSQL cannot keep as text or what is not a fact: no text,
a NUL character, a lone surrogate, more than :data:`MAX_FACT_CHARS` characters; its message
names the problem and shows the value cut to its first characters, however large it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from agent_memory.errors import AgentMemoryError, InvalidFactError
from agent_memory.models import Fact

# the value fields a memory's text is taken from, in this order (LangMem writes "content")
TEXT_FIELDS = ("content", "text", "memory", "fact")
# the fields of a Store value that set the fact's importance and kind, not its text
SETTING_FIELDS = ("importance", "kind")
# the longest fact (models.Fact's bound)
MAX_FACT_CHARS = 4000
# how much of a bad value an error message shows
SHOWN_CHARS = 60


def shown(value: object) -> str:
    """``value`` as an error message names it: its ``repr`` cut to its first characters, with
    its length when it was cut."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS + 20:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[:SHOWN_CHARS]}...{size}"


def memory_text(value: Mapping[str, Any]) -> str:
    """The text of the fact a Store memory item's ``value`` is (see the module): ``""`` when
    it holds none."""
    return _text({k: v for k, v in value.items() if k not in SETTING_FIELDS}, top=True)


def _text(value: Any, top: bool = False) -> str:
    if isinstance(value, str):
        return " ".join(value.split())
    if value is None:
        return ""
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, Mapping):
        for name in TEXT_FIELDS:
            if name in value:
                text = _text(value[name])
                if text:
                    return text
        parts = []
        for name, item in value.items():
            text = _text(item)
            if text and isinstance(item, Mapping) and len(item) > 1:
                text = f"({text})"
            if text:
                parts.append(f"{name}: {text}")
        return "; ".join(parts)
    if isinstance(value, Sequence):
        return ", ".join(t for t in (_text(item) for item in value) if t)
    return str(value)


def check_text(
    content: object,
    what: str = "fact content",
    error: type[AgentMemoryError] = InvalidFactError,
) -> str:
    """``content`` with its white space collapsed, when it can be a fact; else ``error``
    naming ``what`` and the problem, with the value cut short (see the module)."""
    if not isinstance(content, str):
        raise error(f"{what} {shown(content)} is a {type(content).__name__}, not text")
    if "\x00" in content:
        at = content.index("\x00")
        raise error(
            f"{what} {shown(content)} holds a NUL character (at {at}), which text cannot hold;"
            " remove it"
        )
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(
            f"{what} {shown(content)} holds a lone surrogate (at {exc.start}), which is not"
            " text; remove it"
        ) from None
    text = " ".join(content.split())
    if not text:
        raise error(f"{what} {shown(content)} is empty; a fact needs words")
    if len(text) > MAX_FACT_CHARS:
        raise error(
            f"{what} {shown(content)} is {len(text)} characters long, over the limit of"
            f" {MAX_FACT_CHARS} for one fact"
        )
    return text


def fact_of(content: str, importance: float, kind: str) -> Fact:
    """A fact said directly (by hand, a tool, MCP), checked: :class:`InvalidFactError` names
    what cannot be stored."""
    text = check_text(content)  # before pydantic, whose message would hold all of it
    try:
        return Fact(content=text, importance=importance, kind=kind)  # type: ignore[arg-type]
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = problem["loc"][0] if problem["loc"] else "fact"
        raise InvalidFactError(
            f"fact {field} {shown(problem.get('input'))} cannot be stored: {problem['msg']}"
        ) from None
