"""The largest key and namespace the Store keeps, checked before any SQL runs.

An item's namespace and key are together its primary key, a btree index entry in PostgreSQL,
which holds at most 2704 bytes (with 8 kB pages). The namespace is a ``text[]``: 24 bytes of
array header and, per label, a 4-byte length and its bytes padded to 4. With the bounds below
the largest entry is 8 (entry header) + 24 + 64 * 7 + 1024 (the namespace) + 4 + 1024 (the
key) + 7 (alignment) = 2539 bytes, under the limit by a margin. Beyond them PostgreSQL would
refuse the row with ``ProgramLimitExceeded``; the store refuses it first, naming the value and
the bound. Values have their own bound, the setting ``store_max_value_bytes``.
"""

from __future__ import annotations

from typing import Any

from langgraph.store.base import InvalidNamespaceError

from agent_memory.errors import InvalidStoreRequestError

# bytes of UTF-8
MAX_KEY_BYTES = 1024
MAX_NAMESPACE_BYTES = 1024  # all of a namespace's labels together
MAX_NAMESPACE_LABELS = 64

_SHOWN_CHARS = 80


class InvalidStoreNamespaceError(InvalidStoreRequestError, InvalidNamespaceError):
    """A namespace the store refuses: caught as LangGraph's ``InvalidNamespaceError`` and as
    agent-memory's `agent_memory.errors.InvalidStoreRequestError` alike."""


def shown(value: str | tuple[str, ...]) -> str:
    """``value`` (a key, a label or a namespace) as an error message names it: its ``repr``,
    cut to its first characters when long."""
    text = repr(value)
    if len(text) <= _SHOWN_CHARS:
        return text
    unit = "characters" if isinstance(value, str) else "labels"
    return f"{text[:_SHOWN_CHARS]}... ({len(value)} {unit})"


def check_key(key: Any) -> str:
    """``key``, refused (naming it) unless a non-empty string of at most
    `MAX_KEY_BYTES` bytes of UTF-8."""
    if not isinstance(key, str) or not key:
        raise InvalidStoreRequestError(f"item key {key!r:.80} is not a non-empty string")
    if "\x00" in key:
        raise InvalidStoreRequestError(
            f"item key {shown(key)} holds a NUL character, which the store cannot keep"
        )
    size = len(key.encode("utf-8", "surrogatepass"))
    if size > MAX_KEY_BYTES:
        raise InvalidStoreRequestError(
            f"item key {shown(key)} is {size} bytes of UTF-8, over the limit of {MAX_KEY_BYTES}"
        )
    return key


def check_size(labels: tuple[str, ...], what: str) -> None:
    """Refuse a namespace (``what``: which one) of more than `MAX_NAMESPACE_LABELS`
    labels or `MAX_NAMESPACE_BYTES` bytes of UTF-8, naming it (cut) and the bound."""
    if len(labels) > MAX_NAMESPACE_LABELS:
        raise InvalidStoreNamespaceError(
            f"{what} {shown(labels)} has {len(labels)} labels, over the limit of"
            f" {MAX_NAMESPACE_LABELS}"
        )
    sizes = [len(label.encode("utf-8", "surrogatepass")) for label in labels]
    if sum(sizes) <= MAX_NAMESPACE_BYTES:
        return
    largest = max(range(len(labels)), key=sizes.__getitem__)
    if sizes[largest] > MAX_NAMESPACE_BYTES:
        raise InvalidStoreNamespaceError(
            f"{what} has the label {shown(labels[largest])} of {sizes[largest]} bytes of"
            f" UTF-8, over the limit of {MAX_NAMESPACE_BYTES} for a namespace's labels together"
        )
    raise InvalidStoreNamespaceError(
        f"{what} {shown(labels)} has {sum(sizes)} bytes of UTF-8 in its labels, over the"
        f" limit of {MAX_NAMESPACE_BYTES}"
    )
