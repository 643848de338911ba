"""How far long work has got, told to whoever watches it in this process.

A run's code says what it is about to do (:func:`plan`: 272 episodes, 10 scopes), what it has
just done (:func:`advance`: a batch of 27 episodes written, a scope finished) and what it is
busy with (:func:`note`). Nobody listens unless a caller installs a :class:`Watcher` with
:func:`watching` (the command line does, to draw a progress bar on a terminal); then each call
reaches it as the run proceeds, from the run's own events. Without a watcher each call is one
context-variable read: the run is not slowed, and its results never depend on who watches.

>>> with watching(my_watcher):
...     asyncio.run(run_for_summary(backfill_flow, params))

The watcher lives in a context variable, so a flow run in this process (and its tasks, awaited
in the same context) sees it; a task in another process (the Dask flow's chunks) does not.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Literal, Protocol

# what a run counts: scopes finished, episodes consolidated, facts and past messages embedded,
# facts purged
Unit = Literal["scopes", "episodes", "facts", "messages", "purged"]


class Watcher(Protocol):
    """Told of a run's progress as it happens (called on the run's event loop: be quick)."""

    def plan(self, unit: Unit, total: int) -> None:
        """The run is to do ``total`` of ``unit`` (a second plan of a unit replaces the first)."""

    def advance(self, unit: Unit, done: int) -> None:
        """The run has just done ``done`` more of ``unit``."""

    def note(self, doing: str) -> None:
        """The run is now busy with ``doing`` (a few words: 'indexing conversations')."""


_watcher: ContextVar[Watcher | None] = ContextVar("agent_memory_progress", default=None)


@contextlib.contextmanager
def watching(watcher: Watcher) -> Iterator[Watcher]:
    """Tell ``watcher`` of the progress of the work done in this context."""
    token = _watcher.set(watcher)
    try:
        yield watcher
    finally:
        _watcher.reset(token)


def _tell(call: str, *args: object) -> None:
    watcher = _watcher.get()
    if watcher is None:
        return
    try:
        getattr(watcher, call)(*args)
    except Exception as exc:  # a broken display must not break the run
        logging.getLogger(__name__).warning("progress display failed: %s", exc)


def watched() -> bool:
    """Whether anyone watches: a total that costs a query is worth counting only then."""
    return _watcher.get() is not None


def plan(unit: Unit, total: int) -> None:
    """Say that the run is to do ``total`` of ``unit``."""
    _tell("plan", unit, total)


def advance(unit: Unit, done: int) -> None:
    """Say that the run has just done ``done`` more of ``unit`` (nothing when ``done`` is 0)."""
    if done:
        _tell("advance", unit, done)


def note(doing: str) -> None:
    """Say what the run is busy with now."""
    _tell("note", doing)
