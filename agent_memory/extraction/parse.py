"""Validating what a model answered into a list of facts.

Models wrap JSON in prose or code fences, return an object instead of an array, spell keys
differently, or give importance as a word or out of range. What can be repaired without guessing
is repaired (and listed in ``repairs``); anything else raises :class:`ExtractionError` with the
offending value, so the job fails clearly and its episodes stay for a later run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Literal, cast

from agent_memory.errors import ExtractionError
from agent_memory.extraction.answer import CONTENT_KEYS, as_list, load_json
from agent_memory.models import FACT_KINDS, LEVELS, FactKind, KnownFact, Level, Operation

MAX_FACT_CHARS = 1000
MAX_FACTS = 200
DEFAULT_IMPORTANCE = 0.5

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_IMPORTANCE_KEYS = ("importance", "score", "weight", "priority")
_WORDS = {
    "critical": 0.95,
    "very high": 0.9,
    "high": 0.8,
    "medium": 0.5,
    "moderate": 0.5,
    "low": 0.2,
    "very low": 0.1,
    "none": 0.0,
}


def _importance(raw: Any, index: int, repairs: list[str]) -> float:
    if raw is None:
        repairs.append(f"fact {index}: no importance, used {DEFAULT_IMPORTANCE}")
        return DEFAULT_IMPORTANCE
    if isinstance(raw, bool):
        raise ExtractionError(f"fact {index}: importance {raw!r} is not a number")
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in _WORDS:
            repairs.append(f"fact {index}: importance {raw!r} read as {_WORDS[word]}")
            return _WORDS[word]
        try:
            number = float(word.rstrip("%")) / (100 if word.endswith("%") else 1)
        except ValueError:
            raise ExtractionError(f"fact {index}: importance {raw!r} is not a number") from None
        repairs.append(f"fact {index}: importance given as text {raw!r}")
        raw = number
    if not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ExtractionError(f"fact {index}: importance {raw!r} is not a finite number")
    value = float(raw)
    if value < 0.0 or value > 1.0:
        clamped = min(max(value, 0.0), 1.0)
        repairs.append(f"fact {index}: importance {value} clamped to {clamped}")
        value = clamped
    return value


def _content(raw: Any, index: int, repairs: list[str]) -> str | None:
    if not isinstance(raw, str):
        raise ExtractionError(f"fact {index}: content {raw!r:.80} is not text")
    cleaned = _CONTROL.sub("", raw)
    if cleaned != raw:
        repairs.append(f"fact {index}: removed control characters")
    cleaned = " ".join(cleaned.split())
    if not cleaned:
        repairs.append(f"fact {index}: dropped, its content is empty")
        return None
    if len(cleaned) > MAX_FACT_CHARS:
        repairs.append(f"fact {index}: content cut from {len(cleaned)} to {MAX_FACT_CHARS} chars")
        cleaned = cleaned[: MAX_FACT_CHARS - 3].rstrip() + "..."
    return cleaned


_OPS = {
    "add": "add",
    "create": "add",
    "new": "add",
    "update": "update",
    "modify": "update",
    "replace": "update",
    "delete": "delete",
    "remove": "delete",
    "invalidate": "delete",
    "none": "none",
    "noop": "none",
    "nothing": "none",
    "keep": "none",
    "summary": "summary",
    "summarize": "summary",
    "summarise": "summary",
}
MAX_SUMMARY_CHARS = 400


def _target(
    item: dict[str, Any], index: int, known: dict[int, KnownFact], repairs: list[str]
) -> KnownFact | None:
    raw = next((item[k] for k in ("id", "target", "fact_id", "number") if k in item), None)
    if isinstance(raw, str) and raw.strip().lstrip("[").rstrip("]").isdigit():
        raw = int(raw.strip().lstrip("[").rstrip("]"))
    if isinstance(raw, bool) or not isinstance(raw, int):
        repairs.append(f"fact {index}: dropped, its id {raw!r} is not a number")
        return None
    if raw not in known:
        repairs.append(f"fact {index}: dropped, it refers to fact {raw}, which was not given")
        return None
    return known[raw]


def _summary(
    item: dict[str, Any], index: int, episodes: int | None, repairs: list[str]
) -> Operation | None:
    """A ``summary`` item: the episode it is about (1-based) and one sentence."""
    raw = next((item[k] for k in ("episode", "number", "conversation") if k in item), None)
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw.strip())
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        repairs.append(f"item {index}: summary dropped, its episode {raw!r} is not a number")
        return None
    if episodes is not None and raw > episodes:
        repairs.append(f"item {index}: summary dropped, there is no episode {raw}")
        return None
    key = next((k for k in ("summary", "content", "text") if k in item), None)
    try:
        text = _content(item[key], index, repairs) if key else None
    except ExtractionError:  # a summary is optional: a bad one is dropped, not fatal
        text = None
    if text is None:
        repairs.append(f"item {index}: summary of episode {raw} dropped, it has no text")
        return None
    if len(text) > MAX_SUMMARY_CHARS:
        repairs.append(f"item {index}: summary cut to {MAX_SUMMARY_CHARS} chars")
        text = text[: MAX_SUMMARY_CHARS - 3].rstrip() + "..."
    return Operation(op="summary", content=text, episode=raw)


_SOURCE_KEYS = ("episode", "episodes", "source", "sources", "from")
_KIND_KEYS = ("kind", "type", "category")
# what models answer for a kind besides its own name
_KIND_WORDS: dict[str, FactKind] = {
    **{k: k for k in FACT_KINDS},
    "identities": "identity",
    "personal": "identity",
    "profile": "identity",
    "biography": "identity",
    "preferences": "preference",
    "like": "preference",
    "taste": "preference",
    "state": "situation",
    "status": "situation",
    "ongoing": "situation",
    "situations": "situation",
    "events": "event",
    "experience": "event",
    "plans": "plan",
    "appointment": "plan",
    "intention": "plan",
    "goal": "plan",
    "fact": "general",
    "other": "general",
}


def _kind(item: dict[str, Any], index: int, default: FactKind, repairs: list[str]) -> FactKind:
    """The kind a fact is given; ``default`` (general, or an updated fact's own) when none is,
    or one this project does not know."""
    key = next((k for k in _KIND_KEYS if k in item), None)
    if key is None:
        return default
    raw = item[key]
    kind = _KIND_WORDS.get(str(raw).strip().lower()) if isinstance(raw, str) else None
    if kind is None:
        repairs.append(f"fact {index}: kind {raw!r} is not one of {', '.join(FACT_KINDS)}")
        return default
    return kind


def _sources(
    item: dict[str, Any], index: int, episodes: int | None, repairs: list[str]
) -> list[int]:
    """The episode numbers a fact says it comes from; none (all the batch's) when it names
    none, or one that the prompt did not hold."""
    key = next((k for k in _SOURCE_KEYS if k in item), None)
    if key is None:
        return []
    raw = item[key]
    values = raw if isinstance(raw, list) else [raw]
    numbers: list[int] = []
    for value in values:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            repairs.append(f"fact {index}: episode {value!r} is not a number; sources: the batch")
            return []
        if episodes is not None and value > episodes:
            repairs.append(f"fact {index}: there is no episode {value}; sources: the batch")
            return []
        numbers.append(value)
    return sorted(set(numbers))


def _level(item: dict[str, Any], index: int, repairs: list[str]) -> Level | None:
    """The level of memory a fact is filed at, if the answer names one this project has (the
    consolidation files it there only if the scope reads that level)."""
    raw = item.get("level")
    if raw is None:
        return None
    level = str(raw).strip().lower() if isinstance(raw, str) else None
    if level not in LEVELS:
        repairs.append(f"fact {index}: level {raw!r:.40} is not one of {', '.join(LEVELS)}")
        return None
    return level


def _replaces(item: dict[str, Any], index: int, repairs: list[str]) -> str | None:
    """The content of a fact of this answer that an update or delete changes (no id), if it
    names one instead of a known fact's number."""
    if "replaces" not in item or any(k in item for k in ("id", "target", "fact_id", "number")):
        return None
    raw = item["replaces"]
    if not isinstance(raw, str) or not raw.strip():
        repairs.append(f"fact {index}: 'replaces' {raw!r:.60} is not a fact's content; ignored")
        return None
    return raw.strip()


def parse_operations(
    text: str,
    known: Sequence[KnownFact] = (),
    *,
    max_facts: int = MAX_FACTS,
    episodes: int | None = None,
) -> tuple[list[Operation], list[str]]:
    """Operations from a model's answer (items without ``op`` are additions), with the short
    fact numbers mapped back to fact ids, and the repairs made. ``episodes``: how many
    conversations the prompt held (a summary of another one is dropped).

    Raises ExtractionError if the answer is unusable.
    """
    repairs: list[str] = []
    by_number = {k.number: k for k in known}
    items = as_list(load_json(text, repairs), repairs)
    ops = [
        op
        for index, item in enumerate(items)
        if (op := _operation(item, index, by_number, episodes, repairs)) is not None
    ]
    writes = [o for o in ops if o.op in ("add", "update")]
    if len(writes) > max_facts:
        repairs.append(f"kept the {max_facts} most important of {len(writes)} facts")
        keep = set(map(id, sorted(writes, key=lambda o: o.importance, reverse=True)[:max_facts]))
        ops = [o for o in ops if o.op in ("delete", "summary") or id(o) in keep]
    return ops, repairs


def _operation(
    item: Any,
    index: int,
    by_number: dict[int, KnownFact],
    episodes: int | None,
    repairs: list[str],
) -> Operation | None:
    """The operation item ``index`` of the answer says; None when it says none, or one that
    is dropped (and the repair says why)."""
    if isinstance(item, str):
        repairs.append(f"fact {index}: a bare string, used importance {DEFAULT_IMPORTANCE}")
        content = _content(item, index, repairs)
        if content is None:
            return None
        return Operation(op="add", content=content, importance=DEFAULT_IMPORTANCE)
    if not isinstance(item, dict):
        raise ExtractionError(f"fact {index} is a {type(item).__name__}: {item!r:.80}")
    # a key given as null is a key not given (a strict JSON schema asks for every key)
    item = {k: v for k, v in item.items() if v is not None}
    op = _op(item, index, repairs)
    if op is None or op == "none":
        return None
    if op == "summary":
        return _summary(item, index, episodes, repairs)
    replaces = _replaces(item, index, repairs) if op != "add" else None
    target = None
    if op != "add" and replaces is None:
        target = _target(item, index, by_number, repairs)
        if target is None:
            return None
    if op == "delete":
        return Operation(
            op="delete",
            target=target.fact_id if target else None,
            replaces=replaces,
            sources=_sources(item, index, episodes, repairs),
        )
    return _write(
        item, index, cast(Literal["add", "update"], op), target, replaces, episodes, repairs
    )


def _op(item: dict[str, Any], index: int, repairs: list[str]) -> str | None:
    """The item's operation by any of the names models give it; None (with the repair) for
    one not understood: it costs that operation, not the answer."""
    default = "summary" if "summary" in item and "episode" in item else "add"
    raw_op = next((item[k] for k in ("op", "operation", "event", "action") if k in item), default)
    op = _OPS.get(str(raw_op).strip().lower())
    if op is None:
        repairs.append(
            f"fact {index}: dropped, its operation {raw_op!r} is not add/update/delete/summary"
        )
    return op


def _write(
    item: dict[str, Any],
    index: int,
    op: Literal["add", "update"],
    target: KnownFact | None,
    replaces: Any,
    episodes: int | None,
    repairs: list[str],
) -> Operation | None:
    """An add or an update: its content (from whichever key holds it) and importance (an
    update keeps the one it had when none is given); None when it has no content or none of
    importance."""
    key = next((k for k in CONTENT_KEYS if k in item), None)
    if key is None:
        raise ExtractionError(
            f"fact {index} has keys {sorted(item)[:8]} but no 'content': {item!r:.120}"
        )
    if key != "content":
        repairs.append(f"fact {index}: read content from key {key!r}")
    content = _content(item[key], index, repairs)
    if content is None:
        return None
    imp_key = next((k for k in _IMPORTANCE_KEYS if k in item), None)
    if imp_key is None and target is not None:
        importance = target.importance
    else:
        importance = _importance(item.get(imp_key) if imp_key else None, index, repairs)
    if importance <= 0.0:
        repairs.append(f"fact {index}: dropped, its importance is 0")
        return None
    return Operation(
        op=op,
        content=content,
        importance=importance,
        target=target.fact_id if target else None,
        replaces=replaces,
        sources=_sources(item, index, episodes, repairs),
        kind=_kind(item, index, target.kind if target else "general", repairs),
        level=_level(item, index, repairs),
    )
