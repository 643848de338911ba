"""A chunk of a run's scopes as one task, for task runners that run tasks in other processes
(Dask): the chunk opens its own connection pool and claims there, and its scopes' steps run
as the usual load / extract / write tasks inside it."""

from __future__ import annotations

from agent_memory.consolidation import ScopeResult
from agent_memory.models import Scope, Window
from agent_memory.settings import get_settings
from agent_memory_flows.params import ConsolidationParams
from agent_memory_tasks.policy import step


@step("none", "consolidate-chunk", task_run_name="consolidate [{label}]")
async def consolidate_chunk(
    scopes: list[Scope], params: ConsolidationParams, window: Window | None, label: str
) -> list[ScopeResult]:
    """Consolidate these scopes in this (worker) process; one result per scope with work."""
    from agent_memory_flows.run import consolidate_scopes, open_run_pool

    async with open_run_pool(get_settings()) as pool:
        return await consolidate_scopes(pool, scopes, params, window)
