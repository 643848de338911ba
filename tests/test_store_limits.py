"""The largest keys and namespaces the Store keeps (agent_memory/store/limits.py): up to the
bounds an item is kept and read back, whatever its characters; beyond them every operation is
refused by the store's own error, naming the value (cut short) and the bound, before any SQL
runs and with nothing written (PostgreSQL would refuse the row with ProgramLimitExceeded)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from langgraph.store.base import InvalidNamespaceError

from agent_memory import MemoryManager
from agent_memory.errors import AgentMemoryError, InvalidStoreRequestError
from agent_memory.settings import Settings
from agent_memory.store import AgentMemoryStore
from agent_memory.store.limits import MAX_KEY_BYTES, MAX_NAMESPACE_BYTES, MAX_NAMESPACE_LABELS


@pytest.fixture
def store(settings: Settings) -> Iterator[AgentMemoryStore]:
    manager = MemoryManager.create_sync(settings=settings, migrate=False)
    yield manager.store()
    manager.close_sync()


def noise(size: int) -> str:
    """``size`` random hex digits: PostgreSQL compresses an index entry where it can, which
    would let a long run of one letter through; these it cannot."""
    return random.Random(size).randbytes((size + 1) // 2).hex()[:size]


def test_items_at_the_bounds_are_kept_and_read_back(
    store: AgentMemoryStore, db: psycopg.Connection[Any]
) -> None:
    # the widest entry: as many labels as allowed, each padded most (a length of 4n + 1)
    many = tuple(noise(13) for _ in range(MAX_NAMESPACE_LABELS - 1))
    many += (noise(MAX_NAMESPACE_BYTES - sum(map(len, many))),)
    one = (noise(MAX_NAMESPACE_BYTES),)
    emoji = "\N{GRINNING FACE}" * (MAX_KEY_BYTES // 4)  # four bytes of UTF-8 each
    user = "\N{LATIN SMALL LETTER E WITH ACUTE}" * 256  # the longest user id, 512 bytes
    for namespace, key in [
        (many, noise(MAX_KEY_BYTES)),
        (one, emoji),
        (("memories", user), noise(MAX_KEY_BYTES)),
    ]:
        assert len("".join(namespace).encode()) <= MAX_NAMESPACE_BYTES
        assert len(key.encode()) == MAX_KEY_BYTES
        store.put(namespace, key, {"content": "Kept at the bounds"})
        got = store.get(namespace, key)
        assert got is not None and got.key == key and got.namespace == namespace
        store.put(namespace, key, {"content": "Kept at the bounds, said again"})
        assert [i.key for i in store.search(namespace)] == [key]
    assert db.execute("SELECT count(*) FROM agent_memory.store_items").fetchone() == (3,)


NS = ("docs",)
HUGE_KEY = noise(10_000_000)
HUGE_LABEL = noise(1_000_000)


def _ops(namespace: tuple[str, ...], key: str) -> list[Callable[[AgentMemoryStore], Any]]:
    return [
        lambda s: s.put(namespace, key, {"content": "x"}),
        lambda s: s.get(namespace, key),
        lambda s: s.delete(namespace, key),
    ]


@pytest.mark.parametrize(
    ("namespace", "key", "error", "bound"),
    [
        (NS, HUGE_KEY, InvalidStoreRequestError, f"limit of {MAX_KEY_BYTES}"),
        (NS, "k" * (MAX_KEY_BYTES + 1), InvalidStoreRequestError, f"limit of {MAX_KEY_BYTES}"),
        (NS, "é" * 513, InvalidStoreRequestError, "1026 bytes of UTF-8"),
        ((HUGE_LABEL,), "k", InvalidNamespaceError, f"limit of {MAX_NAMESPACE_BYTES}"),
        (("memories", HUGE_LABEL), "k", InvalidNamespaceError, "1000000 bytes"),
        (("a" * 1000, "b" * 25), "k", InvalidNamespaceError, "1025 bytes of UTF-8"),
        (
            ("x",) * (MAX_NAMESPACE_LABELS + 1),
            "k",
            InvalidNamespaceError,
            f"65 labels, over the limit of {MAX_NAMESPACE_LABELS}",
        ),
    ],
    ids=["10MB-key", "key", "key-utf8", "1MB-label", "memory-label", "namespace", "depth"],
)
async def test_oversized_keys_and_namespaces_get_the_stores_error_before_any_sql(
    store: AgentMemoryStore,
    db: psycopg.Connection[Any],
    namespace: tuple[str, ...],
    key: str,
    error: type[Exception],
    bound: str,
) -> None:
    calls = [
        *_ops(namespace, key),
        lambda s: s.search(namespace),
        lambda s: s.list_namespaces(prefix=namespace),
    ]
    if key != "k":  # a namespace's bound applies to searches too; a key's only to items
        calls = calls[:3]
    for call in calls:
        with pytest.raises(error) as caught:
            call(store)
        exc = caught.value
        assert isinstance(exc, AgentMemoryError) and isinstance(exc, InvalidStoreRequestError)
        message = str(exc)
        assert bound in message and len(message) < 400, message
        assert exc.__context__ is None  # nothing from psycopg underneath
    with pytest.raises(error):
        await store.aput(namespace, key, {"content": "x"})
    assert db.execute("SELECT count(*) FROM agent_memory.store_items").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (0,)
