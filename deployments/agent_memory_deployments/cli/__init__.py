"""The ``agent-memory`` command: demo, migrate, consolidate, decay, search, stats, jobs, facts,
serve, server, backfill, scopes and levels, one module per family of commands.

The top of the stack: the layer that reaches down to the flows (and so to Prefect), importing
them inside the commands that need them.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

# each module registers its commands on the app; --help lists them in this order
# isort: off
from agent_memory_deployments.cli import runs  # noqa: F401
from agent_memory_deployments.cli import inspect  # noqa: F401
from agent_memory_deployments.cli import jobs  # noqa: F401
from agent_memory_deployments.cli import serving  # noqa: F401
from agent_memory_deployments.cli import backfill  # noqa: F401
from agent_memory_deployments.cli import manage  # noqa: F401
from agent_memory_deployments.cli import scopes  # noqa: F401
from agent_memory_deployments.cli import levels  # noqa: F401

# isort: on
from agent_memory_deployments.cli._app import app, console, fail_on_setting, plain_helps

plain_helps(app)

__all__ = ["app", "console", "main"]


def _end_on_sigterm() -> None:
    """End on SIGTERM (a service manager stopping the command, ``kill``) the way a normal exit
    does: by an exception that unwinds the command, so its ``finally`` blocks and exit handlers
    run: an open import rolls back, and the embedded PostgreSQL stops with its last user (its
    users are counted by process; the count drops in an exit handler). Python's default for
    SIGTERM ends the process at once and skips them, leaving the server running for good."""

    def end(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, end)


def _asks_for_help(args: list[str]) -> bool:
    return not args or "--help" in args


def main() -> None:
    """The ``agent-memory`` console script.

    A bad setting (``AGENT_MEMORY_LLM_TIMEOUT=abc``) ends every command here, before it starts
    anything, as one line naming the variable, its value and what was expected (exit 2); read
    later, inside a flow, it would reach the user as the orchestrator's traceback. Help is
    shown whatever the environment holds."""
    from agent_memory.errors import SettingsError
    from agent_memory.extraction.llm import quiet_litellm
    from agent_memory.settings import get_settings

    _end_on_sigterm()
    quiet_litellm()  # the command's output is its own: no litellm banner in it
    try:
        if not _asks_for_help(sys.argv[1:]):
            get_settings()
        app(prog_name="agent-memory")
    except SettingsError as exc:
        fail_on_setting(exc)
