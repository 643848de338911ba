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
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

KILL_AT = "AGENT_MEMORY_TEST_KILL_AT"
RAISE_AT = "AGENT_MEMORY_TEST_RAISE_AT"
POINTS = ("after_load", "after_llm", "in_write", "after_commit")
INSTALL = "import tests.faults\ntests.faults.from_environment()\n"


def _kill(point: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _raise(point: str) -> None:
    raise psycopg.OperationalError(f"injected fault at {point}")


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
    """Make ``point`` kill the process (``action="kill"``) or raise (``"raise"``)."""
    from agent_memory.consolidation import groups as steps
    from agent_memory.consolidation import write
    from agent_memory.db import failures

    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; one of {', '.join(POINTS)}")
    act = _kill if action == "kill" else _raise
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
    for variable, action in ((KILL_AT, "kill"), (RAISE_AT, "raise")):
        if os.environ.get(variable):
            install(os.environ[variable], action)
