"""Prefect tasks: one pipeline step each, with its retry policy on the decorator.

The logic lives in ``agent_memory``; a task adds the retries, a run name that shows the scope,
and logging.
"""
