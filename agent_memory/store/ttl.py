"""TTL for `agent_memory.store.AgentMemoryStore`, as LangGraph's ``PostgresStore`` has
it: ``ttl=`` a ``TTLConfig`` (``default_ttl`` minutes for a put that names none,
``refresh_on_read``, ``sweep_interval_minutes``), ``put(..., ttl=minutes)``,
``get``/``search(..., refresh_ttl=...)``, ``sweep_ttl`` and a background sweeper.

An item expires ``ttl`` minutes after it was put, or after it was last read when reads refresh
it. Unlike ``PostgresStore`` by default, an expired item is gone from every read at once
(``omit_expired`` is always on), not only once a sweep deleted it. The sweep deletes it; an
expired item of a memory namespace also stops being a fact: its fact is invalidated and kept,
superseded, as history, as a delete does, so inject no longer gives it (until the sweep, inject
still does: a fact fades by the decay policy, not by the store's clock).

Example::

    store = AgentMemoryStore(manager, ttl={"default_ttl": 60, "sweep_interval_minutes": 5})
    store.start_ttl_sweeper()          # or: await store.astart_ttl_sweeper()
    store.put(("memories", "alice"), "mood", {"content": "Alice is tired today"})
    store.put(("docs",), "draft", {"text": "..."}, ttl=10)   # this one: 10 minutes
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import threading
from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langgraph.store.base import BaseStore, TTLConfig

from agent_memory.db import store_ttl
from agent_memory.db.dual import Steps, run_async, run_sync
from agent_memory.errors import InvalidStoreRequestError

if TYPE_CHECKING:
    from agent_memory.backend import Backend

logger = logging.getLogger(__name__)

# a century: longer is a mistake (and past PostgreSQL's timestamps for large values)
MAX_TTL_MINUTES = 100 * 366 * 24 * 60
DEFAULT_SWEEP_MINUTES = 5  # as PostgresStore's
_CONFIG_KEYS = ("default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired")


def _minutes(value: Any, what: str, *, none: bool = True) -> float | None:
    if value is None and none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= MAX_TTL_MINUTES
    ):
        raise InvalidStoreRequestError(
            f"{what} {value!r:.80} is not a number of minutes in (0, {MAX_TTL_MINUTES}]"
        )
    return float(value)


def check_ttl(ttl: Any, where: str) -> float | None:
    """A put's TTL in minutes (None: the item never expires); refused, naming it, unless a
    number of minutes above 0 (at most a century)."""
    return _minutes(ttl, f"{where}: TTL")


def check_ttl_config(ttl: Any) -> TTLConfig | None:
    """The store's ``ttl=`` configuration, checked (a copy); bad values refused, named."""
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise InvalidStoreRequestError(f"ttl {ttl!r:.80} is not a TTLConfig mapping")
    unknown = [name for name in ttl if name not in _CONFIG_KEYS]
    if unknown:
        raise InvalidStoreRequestError(
            f"ttl setting {unknown[0]!r} is unknown; known: {', '.join(_CONFIG_KEYS)}"
        )
    _minutes(ttl.get("default_ttl"), "ttl default_ttl")
    _minutes(ttl.get("sweep_interval_minutes"), "ttl sweep_interval_minutes")
    for name in ("refresh_on_read", "omit_expired"):
        if name in ttl and not isinstance(ttl[name], bool):
            raise InvalidStoreRequestError(f"ttl {name} {ttl[name]!r:.80} is not True or False")
    if ttl.get("omit_expired") is False:
        raise InvalidStoreRequestError(
            "ttl omit_expired False is not supported: AgentMemoryStore hides an expired item"
            " at once, before the sweep deletes it"
        )
    return TTLConfig(**ttl)  # type: ignore[typeddict-item]


def refresh_steps(refresh: bool, rows: Sequence[tuple[Any, ...]]) -> Steps[None]:
    """A read's refresh (``refresh``: its ``refresh_ttl``) of the store rows among ``rows``
    (items of `agent_memory.db.store`, whose last field names the row,
    `agent_memory.db.store_ttl.ident`: only those with a TTL, ``t`` and the id, are
    refreshed, so a read of rows without one runs no statement for it)."""
    if refresh:
        ids = [int(row[-1][1:]) for row in rows if str(row[-1]).startswith("t")]
        yield from store_ttl.refresh_steps(ids)


class SweeperFuture(concurrent.futures.Future[None]):
    """`TTLStore.start_ttl_sweeper`'s future; awaiting it gives it back at once, so that
    code written for ``AsyncPostgresStore`` (``await store.start_ttl_sweeper()``) runs too."""

    def __await__(self) -> Generator[Any, None, SweeperFuture]:
        return self
        yield  # a generator: awaiting it never suspends


class Stopped(int):
    """`TTLStore.stop_ttl_sweeper`'s answer: true or false, and awaitable as
    ``AsyncPostgresStore``'s is (``await store.stop_ttl_sweeper()``)."""

    def __await__(self) -> Generator[Any, None, bool]:
        return bool(self)
        yield  # a generator: awaiting it never suspends

    def __repr__(self) -> str:
        return repr(bool(self))


class TTLStore(BaseStore):
    """The TTL half of `agent_memory.store.AgentMemoryStore` (see the module)."""

    supports_ttl: bool = True
    __slots__ = ("_ttl_stop", "_ttl_task", "_ttl_thread", "ttl_config")
    _ttl_thread: threading.Thread | None
    _ttl_task: asyncio.Task[None] | None
    _ttl_stop: threading.Event

    if TYPE_CHECKING:
        _backend: Backend

    def _init_ttl(self, ttl: TTLConfig | None) -> None:
        self.ttl_config = check_ttl_config(ttl)
        self._ttl_thread = None
        self._ttl_task = None
        self._ttl_stop = threading.Event()

    def sweep_ttl(self) -> int:
        """Delete the expired items now (see the module); how many were deleted."""
        with self._backend.spool().connection() as conn:
            return run_sync(conn, store_ttl.sweep_steps())

    async def asweep_ttl(self) -> int:
        """`sweep_ttl` for async code."""
        pool = await self._backend.apool()
        async with pool.connection() as conn:
            return await run_async(conn, store_ttl.sweep_steps())

    def _interval(self, minutes: float | None) -> float:
        """Seconds between sweeps: ``minutes``, else the configuration's, else 5 minutes."""
        config = self.ttl_config or {}
        chosen = minutes or config.get("sweep_interval_minutes") or DEFAULT_SWEEP_MINUTES
        value = _minutes(chosen, "sweep_interval_minutes", none=False)
        return float(value or DEFAULT_SWEEP_MINUTES) * 60

    def _swept(self, deleted: int) -> None:
        if deleted:
            logger.info("Store swept %d expired items", deleted)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> SweeperFuture:
        """Sweep every ``sweep_interval_minutes`` (default: the configuration's, else 5) in a
        background thread, until `stop_ttl_sweeper`; a future done when it stops
        (cancelling it stops it too). Without a TTL configuration nothing starts, as in
        ``PostgresStore``."""
        future = SweeperFuture()
        if not self.ttl_config:
            future.set_result(None)
            return future
        future.add_done_callback(lambda f: self._ttl_stop.set() if f.cancelled() else None)
        if self._ttl_thread is not None and self._ttl_thread.is_alive():
            return future
        seconds = self._interval(sweep_interval_minutes)
        self._ttl_stop.clear()

        def sweep_loop() -> None:
            while not self._ttl_stop.wait(seconds) and not self._backend.closed:
                try:
                    self._swept(self.sweep_ttl())
                except Exception:
                    logger.exception("Store TTL sweep failed; the next one runs as planned")
            if not future.done():
                future.set_result(None)

        self._ttl_thread = threading.Thread(target=sweep_loop, daemon=True, name="ttl-sweeper")
        self._ttl_thread.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> Stopped:
        """Stop the sweeper thread, waiting at most ``timeout`` seconds (None: until it has
        stopped); whether it is stopped (or was not running)."""
        task = self._ttl_task
        if task is not None and not task.done():  # one astart_ttl_sweeper started
            self._ttl_stop.set()
            task.get_loop().call_soon_threadsafe(task.cancel)
        thread = self._ttl_thread
        if thread is None or not thread.is_alive():
            return Stopped(True)
        self._ttl_stop.set()
        thread.join(timeout)
        if thread.is_alive():
            logger.warning("The store's TTL sweeper has not stopped within %s s", timeout)
            return Stopped(False)
        self._ttl_thread = None
        return Stopped(True)

    async def astart_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """`start_ttl_sweeper` for async code: a task of the running event loop."""
        if not self.ttl_config:
            return asyncio.create_task(asyncio.sleep(0))
        if self._ttl_task is not None and not self._ttl_task.done():
            return self._ttl_task
        seconds = self._interval(sweep_interval_minutes)
        self._ttl_stop.clear()

        async def sweep_loop() -> None:
            while not self._ttl_stop.is_set() and not self._backend.closed:
                await asyncio.sleep(seconds)
                try:
                    self._swept(await self.asweep_ttl())
                except Exception:
                    logger.exception("Store TTL sweep failed; the next one runs as planned")

        self._ttl_task = asyncio.create_task(sweep_loop(), name="ttl-sweeper")
        return self._ttl_task

    async def astop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """`stop_ttl_sweeper` for async code (a sweep under way is cancelled: its
        transaction rolls back)."""
        task = self._ttl_task
        if task is None or task.done():
            return True
        self._ttl_stop.set()
        task.cancel()
        await asyncio.wait({task}, timeout=timeout)
        if not task.done():
            logger.warning("The store's TTL sweeper has not stopped within %s s", timeout)
            return False
        self._ttl_task = None
        return True
