"""Benchmarks: one command, JSON figures, each a ratio to a reference measured in the same run.

Nothing leaves the machine: Prefect's analytics are off and litellm uses its local price list
(set here, before any section imports either)."""

from agent_memory.private import keep_private

keep_private()
