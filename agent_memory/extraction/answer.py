"""Reading a model's answer as JSON: out of code fences or prose around it, and as the list
of items it holds whatever key a model put it under (`agent_memory.extraction.parse`
reads each item)."""

from __future__ import annotations

import json
import re
from typing import Any

from agent_memory.errors import ExtractionError

CONTENT_KEYS = ("content", "fact", "text", "memory", "statement")
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_LIST_KEYS = ("operations", "facts", "memories", "items", "results", "data")


def _excerpt(text: str, limit: int = 120) -> str:
    text = text.strip().replace("\n", " ")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def load_json(text: str, repairs: list[str]) -> Any:
    """The JSON value of a model's answer, out of code fences or prose around it if need be
    (each such repair added to ``repairs``); ExtractionError naming the answer if none."""
    stripped = text.strip()
    if not stripped:
        raise ExtractionError("the model answered with empty text; expected a JSON array")
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    fenced = _FENCE.search(stripped)
    if fenced:
        try:
            value = json.loads(fenced.group(1))
            repairs.append("removed code fences")
            return value
        except json.JSONDecodeError:
            pass
    # prose around the JSON: take the widest bracketed span that parses
    for open_, close in (("[", "]"), ("{", "}")):
        start, end = stripped.find(open_), stripped.rfind(close)
        if 0 <= start < end:
            try:
                value = json.loads(stripped[start : end + 1])
                repairs.append("removed prose around the JSON")
                return value
            except json.JSONDecodeError:
                continue
    raise ExtractionError(f"the model's answer is not valid JSON: {_excerpt(stripped)}")


def as_list(value: Any, repairs: list[str]) -> list[Any]:
    """The answer's items: the array itself, the array under a key models use for it, or one
    fact object alone; ExtractionError naming what came instead."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        for key in _LIST_KEYS:
            if isinstance(value.get(key), list):
                repairs.append(f"took the array under key {key!r}")
                return list(value[key])
        if any(k in value for k in CONTENT_KEYS):
            repairs.append("wrapped a single fact object in an array")
            return [value]
        raise ExtractionError(
            f"the model answered with an object with keys {sorted(value)[:8]}, expected an array "
            "of facts"
        )
    raise ExtractionError(
        f"the model answered with a JSON {type(value).__name__} ({value!r:.80}), expected an array"
    )
