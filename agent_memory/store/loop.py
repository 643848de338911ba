"""The store's event loop: the guard on its sync face and the batching of its async calls.

LangGraph's ``AsyncPostgresStore`` belongs to the event loop it was made in, and this store
does as ``AsyncBatchedBaseStore`` does:

* **the guard**: for a store made in a running loop (``await MemoryManager.create()``,
  ``afrom_conn_string``), a sync call (``get``, ``put``, ``batch``, ...) made on the thread
  that runs the store's loop would block that loop until the database answers; it raises
  ``asyncio.InvalidStateError`` with upstream's message instead. From another thread, while
  the loop runs, it is sent to the loop (``asyncio.run_coroutine_threadsafe``) and joins the
  batches there; with no loop running it runs at once on the sync pool.
* **batching**: each ``aget``/``aput``/``asearch``/``adelete``/``alist_namespaces`` is one
  operation put in a queue of its loop; whatever is queued when the queue's runner gets to it
  runs as one ``abatch`` (in chunks of `CHUNK` operations, one after the other), so any
  number of concurrent calls share one connection instead of each waiting for its own (60,000
  concurrent calls ended in ``PoolTimeout`` before).

An accumulated batch keeps each caller's semantics: identical reads are run once and share
their result; puts to one key keep the last one queued (the store's ``batch`` writes the last
put of each key, as upstream dedupes); a caller's bad operation fails that caller only (it is
checked alone, the rest run); and when a chunk fails in the database, its operations run again
one by one, so an error reaches only the caller whose operation caused it.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph.store.base import GetOp, ListNamespacesOp, Op, PutOp, Result, SearchOp

__all__ = ["CHUNK", "StoreLoop"]

# at most this many operations in one transaction: its row locks are held for a short time, and
# the callers of one chunk get their results while the next runs
CHUNK = 1000

Run = Callable[[list[Op]], Awaitable[list[Result]]]
Check = Callable[[list[Op]], object]


def _method(ops: list[Op]) -> str:
    """The store method a sync call of ``ops`` came from (as BaseStore's faces make them)."""
    if len(ops) != 1:
        return "batch"
    op = ops[0]
    if isinstance(op, GetOp):
        return "get"
    if isinstance(op, SearchOp):
        return "search"
    if isinstance(op, ListNamespacesOp):
        return "list_namespaces"
    if isinstance(op, PutOp):
        return "delete" if op.value is None else "put"
    return "batch"


def loop_error(store_name: str, method_name: str) -> asyncio.InvalidStateError:
    """Upstream's error (``langgraph.store.base.batch._check_loop``), word for word."""
    replacement_str = (
        f"Specifically, replace `store.{method_name}(...)` with `await store.a{method_name}(...)"
        if method_name
        else "For example, replace `store.get(...)` with `await store.aget(...)`"
    )
    return asyncio.InvalidStateError(
        f"Synchronous calls to {store_name} detected in the main event loop. "
        "This can lead to deadlocks or performance issues. "
        "Please use the asynchronous interface for main thread operations. "
        f"{replacement_str} "
    )


class _Queue:
    """The operations queued on one loop, and its runner (a task while there is work)."""

    def __init__(self) -> None:
        self.waiting: list[tuple[asyncio.Future[Result], Op]] = []
        self.runner: asyncio.Task[None] | None = None


class StoreLoop:
    """A store's loop (the one running where it was made: a store made outside any loop, as
    ``PostgresStore``, has none and no guard) and the queues of its async calls, one per loop
    they are made in."""

    __slots__ = ("_check", "_loop", "_queues", "_run")

    def __init__(self, run: Run, check: Check) -> None:
        """``run``: the store's unqueued ``abatch`` (one transaction); ``check``: its checks
        of a batch (raises on a bad operation, touches nothing)."""
        self._run = run
        self._check = check
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = (
            weakref.WeakKeyDictionary()
        )
        with contextlib.suppress(RuntimeError):
            self._loop = weakref.ref(asyncio.get_running_loop())

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The store's loop while it is open."""
        loop = self._loop() if self._loop is not None else None
        return loop if loop is not None and not loop.is_closed() else None

    # ---- the sync face -------------------------------------------------------------------

    def sync(self, store_name: str, ops: list[Op]) -> list[Result] | None:
        """The results of a sync call of ``ops`` run on the store's loop from another thread;
        None when it is to run here (no loop running). Raises ``asyncio.InvalidStateError`` on
        the loop's own thread."""
        loop = self.loop
        if loop is None:
            return None
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is loop:
            raise loop_error(store_name, _method(ops))
        if not loop.is_running():
            return None
        return asyncio.run_coroutine_threadsafe(self.submit(ops), loop).result()

    # ---- the async face ------------------------------------------------------------------

    async def submit(self, ops: list[Op]) -> list[Result]:
        """Run one operation in the running loop's next accumulated batch (several: as one
        batch of their own, in one transaction)."""
        loop = asyncio.get_running_loop()
        if len(ops) != 1:
            return await self._run(ops)
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = _Queue()
        future: asyncio.Future[Result] = loop.create_future()
        queue.waiting.append((future, ops[0]))
        if queue.runner is None or queue.runner.done():
            queue.runner = loop.create_task(self._drain(queue))
        return [await future]

    async def _drain(self, queue: _Queue) -> None:
        """Run what is queued, as batches, until nothing is."""
        while queue.waiting:
            taken = [(f, op) for f, op in queue.waiting[:CHUNK] if not f.done()]
            del queue.waiting[:CHUNK]
            if taken:
                await self._run_chunk(taken)

    async def _run_chunk(self, taken: list[tuple[asyncio.Future[Result], Op]]) -> None:
        ops = [op for _, op in taken]
        try:
            self._check(ops)
        except Exception:
            # someone's operation is bad: each is checked alone, the bad ones fail their caller
            good: list[tuple[asyncio.Future[Result], Op]] = []
            for future, op in taken:
                try:
                    self._check([op])
                except Exception as exc:
                    _fail(future, exc)
                else:
                    good.append((future, op))
            taken, ops = good, [op for _, op in good]
            if not taken:
                return
        unique, where = _dedupe(ops)
        try:
            results = await self._run(unique)
        except Exception:
            await self._one_by_one(taken)
            return
        for (future, _), index in zip(taken, where, strict=True):
            if not future.done():
                future.set_result(results[index])

    async def _one_by_one(self, taken: list[tuple[asyncio.Future[Result], Op]]) -> None:
        """A failed chunk again, each operation alone: its error goes to its caller only."""
        for future, op in taken:
            if future.done():
                continue
            try:
                result = (await self._run([op]))[0]
            except Exception as exc:
                _fail(future, exc)
            else:
                if not future.done():
                    future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def _dedupe(ops: list[Op]) -> tuple[list[Op], list[int]]:
    """The operations to run (identical reads once; the store keeps each key's last put) and,
    for each of ``ops``, the index of its result."""
    unique: list[Op] = []
    where: list[int] = []
    seen: dict[Op, int] = {}
    for op in ops:
        if isinstance(op, PutOp):
            where.append(len(unique))
            unique.append(op)
            continue
        try:
            index = seen.get(op)
        except TypeError:  # a search whose filter holds a dict is not hashable: run it alone
            index = None
            hashable = False
        else:
            hashable = True
        if index is None:
            index = len(unique)
            unique.append(op)
            if hashable:
                seen[op] = index
        where.append(index)
    return unique, where
