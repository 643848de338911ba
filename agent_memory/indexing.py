"""Indexing recorded conversations for the search, off the agent's path.

A record only queues its episode (sql/0026_snippet_queue.sql); `Indexing.index_pending`
makes the snippets of the queued episodes (their sentences, as the search reads them), and the
manager calls it itself ``AGENT_MEMORY_INDEX_AFTER_S`` seconds after a record, in the background
(`IndexLater`), so a record never waits for it and a burst of turns is indexed in a few
statements. The consolidation flow drains the queue too, before it loads episodes, and so does
``agent-memory index``. Until then a search reads a waiting episode's sentences from its
messages (`agent_memory.db.snippets`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from contextlib import suppress

from agent_memory.backend import Backend
from agent_memory.db import snippet_queue
from agent_memory.models import Scope

log = logging.getLogger(__name__)

# how long closing waits for a drain running in the sync callers' thread
_JOIN_S = 30.0


class Indexing:
    """Indexing over ``backend``'s pools."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def index_pending(self, scope: Scope | None = None) -> int:
        """Index the sentences of the recorded conversations still waiting for it (of
        ``scope``, or of every scope) now; how many conversations this call indexed. Safe to
        call at any time and from several processes at once: a conversation is indexed once.

        Example::

            await manager.record(scope, messages)
            await manager.index_pending(scope)  # its sentences stored; the flows embed them
        """
        pool = await self._backend.apool()
        async with pool.connection() as conn:
            return await snippet_queue.drain(conn, None if scope is None else [scope])

    def index_pending_sync(self, scope: Scope | None = None) -> int:
        """`index_pending` for code without an event loop."""
        with self._backend.spool().connection() as conn:
            return snippet_queue.drain_sync(conn, None if scope is None else [scope])


class IndexLater:
    """Runs a drain ``delay_s`` seconds after a record, in the background: one at a time per
    event loop (a task) and one for sync callers (a thread). A record while a drain waits
    changes nothing, one while it runs asks for another after it. A failed drain is logged and
    its conversations stay queued for the next. ``delay_s`` 0: never."""

    def __init__(
        self, delay_s: float, drain: Callable[[], Awaitable[int]], drain_sync: Callable[[], int]
    ) -> None:
        self.delay_s = delay_s
        self._drain, self._drain_sync = drain, drain_sync
        self._tasks: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]] = {}
        self._wanted: set[int] = set()  # loops (by id) with a record since their drain began
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._thread_wanted = False
        self._stopped = threading.Event()

    @classmethod
    def of(cls, indexing: Indexing, delay_s: float) -> IndexLater:
        """The background drains of ``indexing``'s `Indexing.index_pending`."""
        return cls(delay_s, indexing.index_pending, indexing.index_pending_sync)

    def soon(self) -> None:
        """After a record in a coroutine: a drain of this event loop soon."""
        if not self.delay_s or self._stopped.is_set():
            return
        loop = asyncio.get_running_loop()
        self._wanted.add(id(loop))
        entry = self._tasks.get(id(loop))
        if entry is None or entry[0] is not loop or entry[1].done():
            task = loop.create_task(self._run(id(loop)), name="agent-memory-index")
            self._tasks[id(loop)] = (loop, task)

    async def _run(self, key: int) -> None:
        while key in self._wanted:
            await asyncio.sleep(self.delay_s)
            self._wanted.discard(key)
            try:
                await self._drain()
            except Exception as exc:  # the next record asks again
                log.warning("indexing recorded conversations failed (they stay queued): %s", exc)

    def soon_sync(self) -> None:
        """After a record without an event loop: a drain in the background thread soon."""
        if not self.delay_s or self._stopped.is_set():
            return
        with self._lock:
            self._thread_wanted = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run_sync, name="agent-memory-index", daemon=True
                )
                self._thread.start()

    def _run_sync(self) -> None:
        while not self._stopped.wait(self.delay_s):
            with self._lock:
                self._thread_wanted = False
            try:
                self._drain_sync()
            except Exception as exc:
                log.warning("indexing recorded conversations failed (they stay queued): %s", exc)
            with self._lock:
                if not self._thread_wanted:
                    self._thread = None
                    return
        with self._lock:
            self._thread = None

    async def stop(self) -> None:
        """No more drains; the one of this loop cancelled (its batch rolls back, queued still),
        the thread's waited for."""
        self._stopped.set()
        current = asyncio.get_running_loop()
        for loop, task in list(self._tasks.values()):
            if loop is current:
                task.cancel()
                with suppress(asyncio.CancelledError, Exception):
                    await task
            elif not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)
        self._tasks.clear()
        await asyncio.to_thread(self._join)

    def stop_sync(self) -> None:
        """`stop` without an event loop."""
        self._stopped.set()
        for loop, task in list(self._tasks.values()):
            if not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)
        self._tasks.clear()
        self._join()

    def _join(self) -> None:
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_JOIN_S)
