"""Progress of a long command on the terminal: a rich progress bar fed by the run's own events
(:mod:`agent_memory.progress`), drawn on stderr only when stderr is an interactive terminal;
piped, redirected or in CI, the command prints what it printed before and nothing more."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from agent_memory import progress
from agent_memory.progress import Unit
from agent_memory_deployments.cli import _app

T = TypeVar("T")
_REDRAW_S = 0.1  # at most ten redraws a second from events: a run may finish thousands a second


def shows_progress() -> bool:
    """Whether a bar will be drawn: stderr is a terminal that can redraw a line (rich's own
    test, so TTY_COMPATIBLE=1 and TTY_INTERACTIVE=1 force it, TERM=dumb turns it off)."""
    return _app.errors.is_terminal and _app.errors.is_interactive


class _Rate(ProgressColumn):
    """The bar's unit per second, over rich's recent samples."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None:
            return Text("")
        unit = task.fields["unit"]
        return Text(f"{speed:.1f} {unit}/s" if speed >= 0.1 else f"{speed * 60:.1f} {unit}/min")


class TerminalBar:
    """A :class:`agent_memory.progress.Watcher` as one line: what the run is busy with, a bar
    of the ``main`` unit, the counts of each unit ``shown``, the rate and the time left.

    Until the run has planned the main unit the bar pulses (the count still shows); units not
    ``shown`` (a consolidation's embedding, say) are not counted."""

    def __init__(self, bar: Progress, main: Unit, shown: tuple[Unit, ...]) -> None:
        self.bar, self.main = bar, main
        self.totals: dict[str, int] = {}
        self.done: dict[str, int] = dict.fromkeys((main, *shown), 0)
        self.task: TaskID = bar.add_task("starting", total=None, unit=main, counts="")
        self.drawn = 0.0  # when an event last redrew the line (0: never)

    def plan(self, unit: Unit, total: int) -> None:
        if unit in self.done:
            self.totals[unit] = total
            self._update(redraw=True)

    def advance(self, unit: Unit, done: int) -> None:
        if unit in self.done:
            self.done[unit] += done
            # the first step always shows; then at most one redraw per _REDRAW_S (rich's own
            # refresh keeps the clocks going between events)
            self._update(redraw=time.monotonic() - self.drawn >= _REDRAW_S)

    def note(self, doing: str) -> None:
        self.bar.update(self.task, description=doing, refresh=True)

    def _update(self, *, redraw: bool) -> None:
        counts = ", ".join(
            f"{n}/{self.totals[u]} {u}" if u in self.totals else f"{n} {u}"
            for u, n in self.done.items()
        )
        total = self.totals.get(self.main)
        self.bar.update(
            self.task, completed=self.done[self.main], total=total, counts=counts, refresh=redraw
        )
        if redraw:
            self.drawn = time.monotonic()


@contextlib.contextmanager
def _drawing(console: Console, main: Unit, shown: tuple[Unit, ...]) -> Iterator[TerminalBar]:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(bar_width=20),
        TextColumn("{task.fields[counts]}"),
        _Rate(),
        TimeElapsedColumn(),
        TextColumn("elapsed,"),
        TimeRemainingColumn(),
        TextColumn("left"),
    )
    with (
        Progress(*columns, console=console, transient=True, refresh_per_second=2) as bar,
        progress.watching(TerminalBar(bar, main, shown)) as watcher,
    ):
        assert isinstance(watcher, TerminalBar)
        yield watcher


def run_watched(
    run: Callable[[], Coroutine[Any, Any, T]], main: Unit, *shown: Unit, starting: str
) -> T:
    """``asyncio.run(run())``, with a progress bar of ``main`` (and counts of ``shown``) on a
    terminal, ``starting`` on it until the run says what it is doing."""
    if not shows_progress():
        return asyncio.run(run())
    with _drawing(_app.errors, main, shown) as watcher:
        watcher.note(starting)
        return asyncio.run(run())
