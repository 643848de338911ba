"""What the orchestrator is told about a scope and an error: a pseudonymous key and a summary.

Prefect keeps what it is sent (run and task-run names, logs, state messages, artifacts, events)
in its own database, which erasing a scope in PostgreSQL does not reach. So the pipeline names
a scope there by a keyed hash of it, ``scope-`` and 16 hex digits (HMAC-SHA256 under the
installation's secret, :mod:`agent_memory.db.scope_keys`): stable, so operators search by it,
and meaningless without the secret, which only the database owner can read. And an error, or a
model's answer, that may quote a conversation is said by its class, its size, where it went
wrong when the error says, and a hash: never quoted. The whole error stays in the job row in
PostgreSQL (``agent-memory jobs list``), which erasure removes with the scope.

>>> scope_key(b"k" * 32, Scope(user_id="alice"))
'scope-b57e0754e1fe8b90'
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterable

from agent_memory.causes import leading_cause
from agent_memory.models import Scope

PREFIX = "scope-"
# 64 bits: at a million scopes, two sharing a key has odds of about 1 in 37 million
DIGITS = 16

Namer = Callable[[Scope], str]


def scope_key(secret: bytes, scope: Scope) -> str:
    """The pseudonymous key of ``scope`` under ``secret`` (``scope-`` and 16 hex digits)."""
    message = json.dumps(list(scope.params), separators=(",", ":")).encode("utf-8")
    digest = hmac.new(secret, message, hashlib.sha256).hexdigest()
    return PREFIX + digest[:DIGITS]


def namer(secret: bytes) -> Namer:
    """A scope's key under ``secret``, as a function (what the pipeline names scopes by)."""
    return lambda scope: scope_key(secret, scope)


def by_label(scope: Scope) -> str:
    """The plain label (``user=alice``): the name where nothing leaves the process."""
    return scope.label


def reveal(secret: bytes, key: str, scopes: Iterable[Scope]) -> Scope | None:
    """The scope among ``scopes`` whose key is ``key`` (None when none is)."""
    wanted = key.strip().lower()
    return next((s for s in scopes if hmac.compare_digest(scope_key(secret, s), wanted)), None)


# an exception's class as Python and the providers' clients name it ("BadRequestError: ..."):
# where an error came from, not what a conversation said
_CLASS = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception)): ")
# a value a note quotes (Python's repr of a string): the model's words
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def summarise(error: BaseException | str) -> str:
    """``error`` without its words: ``ExtractionError <- BadRequestError (312 characters, at
    char 40, sha256 1f2e3d4c5b6a)``: its class and the classes of its causes, its size, where
    it went wrong when the error says, and a hash; led by its cause when the error leads with
    one of :mod:`agent_memory.causes`' phrases (``connection refused to http://...: ...``).
    A string is taken as ``Class: message`` (how job rows say an error), and the classes it
    names as ``Class: `` are its causes."""
    if isinstance(error, BaseException):
        kinds, text = _causes(error), str(error)
        where = _position(error)
    else:
        kind, sep, text = error.partition(": ")
        if not sep or not kind.isidentifier():
            kind, text = "error", error
        kinds = [kind, *_CLASS.findall(text)]
        where = ""
    digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
    named = " <- ".join(dict.fromkeys(kinds))
    # the cause an error leads with is the project's words about a setting (the provider's
    # address, a status, a deadline; agent_memory.causes), never a conversation's: it is said,
    # first, so two failures with the same classes but different causes read differently
    cause = leading_cause(text)
    said = f"{named} ({len(text):,} characters{where}, sha256 {digest})"
    return f"{cause}: {said}" if cause else said


def unquoted(note: str) -> str:
    """A note of the project's own wording with each value it quotes said by its size: "fact 0:
    kind 'x' is not ..." -> "fact 0: kind (1 character) is not ..."."""

    def size(match: re.Match[str]) -> str:
        n = len(match.group(0)) - 2
        return f"({n} character{'s' if n != 1 else ''})"

    return _QUOTED.sub(size, note)


def _causes(error: BaseException) -> list[str]:
    """``error``'s class and its causes' (``raise ... from``, or raised while handling)."""
    kinds: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kinds.append(type(current).__name__)
        kinds.extend(_CLASS.findall(str(current)))
        current = current.__cause__ or current.__context__
    return kinds


def _position(error: BaseException) -> str:
    """Where a parse error says it went wrong (json's ``pos``, ``lineno`` and ``colno``)."""
    pos, line, col = (getattr(error, n, None) for n in ("pos", "lineno", "colno"))
    if isinstance(line, int) and isinstance(col, int):
        return f", at line {line} column {col}"
    if isinstance(pos, int):
        return f", at char {pos}"
    return ""
