"""Long statements in PostgreSQL's own placeholders, converted once per process.

psycopg turns a statement's ``%(name)s`` placeholders into ``$1``, ``$2``... on every execute,
and keeps the converted text only for statements of up to 4,096 characters (longer ones are
taken for generated SQL that seldom recurs). The ranking statements inject runs on every turn
are longer, so each paid that conversion again. :func:`native` converts such a statement once,
and the drivers in :mod:`agent_memory.db.dual` run it on a raw cursor (psycopg's public cursor
for native placeholders), with the values in placeholder order: the same text reaches the
server, with the same values adapted the same way, so it is prepared and planned as before.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import psycopg

# psycopg converts shorter statements once and caches them itself
NATIVE_FROM = 4097

_PLACEHOLDER = re.compile(r"%(?:\((\w+)\)s|(%)|(.?))", re.S)


@functools.lru_cache(maxsize=256)
def native(query: str) -> tuple[str, tuple[str, ...]] | None:
    """``query`` with ``$n`` for each distinct ``%(name)s`` (in order of first use) and ``%``
    for ``%%``, and the names in ``$n`` order. None for a statement with any other placeholder
    (``%s``, ``%(name)b``...), which psycopg converts as usual."""
    names: list[str] = []
    index: dict[str, int] = {}
    other = False

    def replace(match: re.Match[str]) -> str:
        nonlocal other
        name, percent = match.group(1), match.group(2)
        if percent:
            return "%"
        if name is None:
            other = True
            return match.group(0)
        if name not in index:
            names.append(name)
            index[name] = len(names)
        return f"${index[name]}"

    text = _PLACEHOLDER.sub(replace, query)
    return None if other else (text, tuple(names))


def native_form(query: str, params: Any) -> tuple[str, list[Any]] | None:
    """The native text of ``query`` and its values from ``params`` in placeholder order, for a
    statement psycopg would convert anew on every call; None for any other (run as usual)."""
    if len(query) < NATIVE_FROM or not isinstance(params, Mapping):
        return None
    converted = native(query)
    if converted is None:
        return None
    text, names = converted
    try:
        return text, [params[name] for name in names]
    except KeyError as missing:  # as psycopg says it
        raise psycopg.ProgrammingError(f"query parameter missing: {missing.args[0]}") from None


def renamed(query: str, names: frozenset[str], prefix: str) -> str:
    """``query`` with each ``%(name)s`` placeholder of ``names`` renamed ``%(<prefix>name)s``
    (``%%`` and every other placeholder left as they are)."""

    def rename(match: re.Match[str]) -> str:
        name = match.group(1)
        return f"%({prefix}{name})s" if name in names else match.group(0)

    return _PLACEHOLDER.sub(rename, query)
