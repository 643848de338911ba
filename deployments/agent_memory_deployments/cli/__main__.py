"""``python -m agent_memory_deployments.cli``: the ``agent-memory`` command."""

from agent_memory_deployments.cli import main

main()
