"""The store's accumulated async batches keep each caller's semantics (store/loop.py)."""

from __future__ import annotations

import asyncio

import pytest

from agent_memory import MemoryManager
from agent_memory.errors import InvalidStoreRequestError
from agent_memory.settings import Settings


async def test_one_batch_keeps_each_callers_result_and_error(settings: Settings) -> None:
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        store = manager.store()
        ns = ("docs", "a")
        outcomes = await asyncio.gather(
            store.aput(ns, "k", {"n": 1}),
            store.aput(ns, "bad", {"n": float("nan")}),  # not JSON: this caller only fails
            store.aput(ns, "k", {"n": 2}),  # the last put of a key wins
            store.aget(ns, "k"),
            store.aget(ns, "k"),
            return_exceptions=True,
        )
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], InvalidStoreRequestError)
        got = await store.aget(ns, "k")
        assert got is not None and got.value == {"n": 2}
        assert await store.aget(ns, "bad") is None
        with pytest.raises(asyncio.InvalidStateError, match=r"await store\.aget"):
            store.get(ns, "k")
        assert (await asyncio.to_thread(store.get, ns, "k")).value == {"n": 2}  # type: ignore[union-attr]
    finally:
        await manager.close()
