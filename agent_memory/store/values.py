"""What a Store value may hold beyond being JSON: text PostgreSQL can keep.

``jsonb`` cannot hold the NUL character (psycopg would raise its own ``DataError`` from the
middle of a batch), and a lone surrogate is not text at all (it cannot be encoded as UTF-8).
`check_chars` finds the first such string in a value, a key or a value, and refuses the
value before any SQL runs, naming where it is and showing the string cut short.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_memory.errors import InvalidStoreRequestError
from agent_memory.fact_text import shown


def _problem(text: str) -> str | None:
    if "\x00" in text:
        return f"a NUL character (at {text.index(chr(0))})"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate (at {exc.start})"
    return None


def check_chars(where: str, value: Mapping[str, Any]) -> None:
    """Refuse ``value`` (of ``where``: the item) when a string in it, as a key or a value,
    holds a character PostgreSQL cannot store (see the module). Walked without recursion."""
    stack: list[tuple[str, Any]] = [("value", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            problem = _problem(item)
            if problem:
                raise InvalidStoreRequestError(
                    f"{where}: {path[:120]} {shown(item)} holds {problem}, which the store cannot"
                    " keep; remove it"
                )
        elif isinstance(item, Mapping):
            for key, child in reversed(list(item.items())):
                problem = _problem(key) if isinstance(key, str) else None
                if problem:
                    raise InvalidStoreRequestError(
                        f"{where}: {path[:120]} has the field name {shown(key)}, which holds"
                        f" {problem}; remove it"
                    )
                stack.append((f"{path}[{shown(key)}]", child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}[{i}]", child) for i, child in reversed(list(enumerate(item))))
