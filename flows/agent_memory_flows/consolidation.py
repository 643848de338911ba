"""The consolidation flow: turn every scope's pending episodes into facts.

Per scope: load (and checksum) -> extract (LLM or offline; skipped when the content was seen)
-> write (facts, episode marks and the job's status in one transaction). A failing scope gets a
``failed`` job row and keeps its episodes; the other scopes carry on. A table artifact sums up
the run. The run's body is :func:`agent_memory_flows.run.run_consolidation`; the steps are in
``agent_memory.consolidation``.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, runtime

from agent_memory_flows.outcome import outcome
from agent_memory_flows.params import ConsolidationParams
from agent_memory_flows.reports import FAILED_EVENT, PARKED_EVENT, SUMMARY_KEY
from agent_memory_flows.run import run_consolidation

__all__ = [
    "FAILED_EVENT",
    "PARKED_EVENT",
    "SUMMARY_KEY",
    "ConsolidationParams",
    "consolidation_flow",
]


def _run_name() -> str:
    params = runtime.flow_run.parameters.get("params")
    scope = getattr(params, "scope", None)
    where = scope.key() if scope else "all scopes"
    if getattr(params, "shard_count", 1) > 1:
        where += f", shard {params.shard + 1}/{params.shard_count}"
    return f"consolidate [{where}]"


@flow(name="memory-consolidation", flow_run_name=_run_name, persist_result=False)
async def consolidation_flow(
    params: ConsolidationParams = ConsolidationParams(),  # noqa: B008 - immutable in practice
) -> Any:
    """Consolidate pending episodes into facts, scope by scope (Failed if a scope failed)."""
    return outcome(await run_consolidation(params))
