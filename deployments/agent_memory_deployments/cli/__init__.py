"""The ``agent-memory`` command: demo, migrate, consolidate, decay, search, stats, jobs, facts,
serve, server, backfill and scopes, one module per family of commands.

The top of the stack: the layer that reaches down to the flows (and so to Prefect), importing
them inside the commands that need them.
"""

from __future__ import annotations

# each module registers its commands on the app; --help lists them in this order
# isort: off
from agent_memory_deployments.cli import runs  # noqa: F401
from agent_memory_deployments.cli import inspect  # noqa: F401
from agent_memory_deployments.cli import jobs  # noqa: F401
from agent_memory_deployments.cli import serving  # noqa: F401
from agent_memory_deployments.cli import backfill  # noqa: F401
from agent_memory_deployments.cli import manage  # noqa: F401
from agent_memory_deployments.cli import scopes  # noqa: F401

# isort: on
from agent_memory_deployments.cli._app import app, console

__all__ = ["app", "console", "main"]


def main() -> None:
    """The ``agent-memory`` console script."""
    from agent_memory.extraction.llm import quiet_litellm

    quiet_litellm()  # the command's output is its own: no litellm banner in it
    app()
