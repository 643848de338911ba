"""Fault injection for the crash tests, from the test side only: the production modules carry
no hook. At a named point of a consolidation step the process is killed by SIGKILL, or a
broken-connection error is raised, by wrapping the library function the point follows:

* ``after_load``   - a batch is loaded and its job row started (``load_batch`` returned)
* ``after_llm``    - the extraction is cached (``extract_batch`` returned)
* ``in_write``     - the facts, marks and job row are written, not yet committed (inside the
  write's transaction, right after its last statement, ``failures.clear``)
* ``after_commit`` - the write committed (``write`` returned)

In a child process, set :data:`KILL_AT` or :data:`RAISE_AT` in its environment and run
:data:`INSTALL` first (``tests.processes.run_python`` does); in the test's own process, call
:func:`install` with pytest's ``monkeypatch.setattr``.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg

KILL_AT = "AGENT_MEMORY_TEST_KILL_AT"
RAISE_AT = "AGENT_MEMORY_TEST_RAISE_AT"
# pause there: make the file ``paused`` in the folder PAUSE_DIR names, go on once ``go`` is in it
PAUSE_AT = "AGENT_MEMORY_TEST_PAUSE_AT"
PAUSE_DIR = "AGENT_MEMORY_TEST_PAUSE_DIR"
PAUSE_DEADLINE_S = 300.0
POINTS = ("after_load", "after_llm", "in_write", "after_commit")
INSTALL = "import tests.faults\ntests.faults.from_environment()\n"


def _kill(point: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _raise(point: str) -> None:
    raise psycopg.OperationalError(f"injected fault at {point}")


def _pause(point: str) -> None:
    """Say so, and wait for the test's word (a file), however long the machine takes to get
    there; a test that never says it fails the child after the deadline rather than hang."""
    folder = Path(os.environ[PAUSE_DIR])
    (folder / "paused").touch()
    deadline = time.monotonic() + PAUSE_DEADLINE_S
    while not (folder / "go").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"paused at {point}: no word to go on in {PAUSE_DEADLINE_S} s")
        time.sleep(0.02)


def _after(fn: Callable[..., Awaitable[Any]], fault: Callable[[], None]) -> Any:
    @functools.wraps(fn)
    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = await fn(*args, **kwargs)
        fault()
        return result

    return wrapped


def install(
    point: str,
    action: str = "kill",
    patch: Callable[[Any, str, Any], None] = setattr,
) -> None:
    """Make ``point`` kill the process (``action="kill"``), raise (``"raise"``) or pause until
    the test says (``"pause"``: see `PAUSE_AT`)."""
    from agent_memory.consolidation import groups as steps
    from agent_memory.consolidation import write
    from agent_memory.db import failures

    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; one of {', '.join(POINTS)}")
    act = {"kill": _kill, "raise": _raise, "pause": _pause}[action]
    # where each function is looked up when called: the group steps call load_batch and
    # extract_batch, write_or_yield calls write_batch, write_batch calls failures.clear
    owner, name = {
        "after_load": (steps, "load_batch"),
        "after_llm": (steps, "extract_batch"),
        "in_write": (failures, "clear"),
        "after_commit": (write, "write_batch"),
    }[point]
    patch(owner, name, _after(getattr(owner, name), lambda: act(point)))


def from_environment() -> None:
    """Install the faults that :data:`KILL_AT` and :data:`RAISE_AT` name, if any."""
    for variable, action in ((KILL_AT, "kill"), (RAISE_AT, "raise"), (PAUSE_AT, "pause")):
        if os.environ.get(variable):
            install(os.environ[variable], action)
