"""Consolidation fanned out over a Dask cluster (prefect-dask's DaskTaskRunner).

The run's scopes are split into ``chunks``; each chunk is one task, run by a Dask worker
process with its own connection pool and scope claims, and inside it each scope's steps run
as the usual load / extract / write tasks. By default the run starts a local cluster of two
worker processes; to use a running cluster::

    consolidation_dask_flow.with_options(
        task_runner=DaskTaskRunner(address="tcp://scheduler:8786")
    )

Workers read their settings from their environment (``DATABASE_URL``, ``AGENT_MEMORY_*``),
as Prefect workers do. The guarantees are the in-process flow's: a scope is claimed by one
run at a time, every batch commits on its own, a failed scope fails alone.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from prefect import flow, runtime
from prefect_dask.task_runners import DaskTaskRunner
from pydantic import Field

from agent_memory.consolidation import ScopeResult
from agent_memory.db.pool import open_pool
from agent_memory.extraction import build_extractor
from agent_memory.redact import redact
from agent_memory.settings import get_settings
from agent_memory_flows.fanout import consolidate_chunk
from agent_memory_flows.outcome import outcome
from agent_memory_flows.params import ConsolidationParams
from agent_memory_flows.reports import SUMMARY_KEY, publish
from agent_memory_flows.run import pending_scopes, run_window


class DaskConsolidationParams(ConsolidationParams):
    """A consolidation run, and how many tasks its scopes are split into."""

    chunks: int = Field(default=4, ge=1, le=10_000, description="tasks the scopes go in")


def _run_name() -> str:
    params = runtime.flow_run.parameters.get("params")
    return f"consolidate on dask [{getattr(params, 'chunks', '?')} chunks]"


@flow(
    name="memory-consolidation-dask",
    flow_run_name=_run_name,
    task_runner=cast(
        Any,
        DaskTaskRunner(
            cluster_kwargs={
                "n_workers": 2,
                "threads_per_worker": 1,
                "processes": True,
                "dashboard_address": None,
            }
        ),
    ),
    persist_result=False,
)
async def consolidation_dask_flow(
    params: DaskConsolidationParams = DaskConsolidationParams(),  # noqa: B008 - immutable
) -> Any:
    """Consolidate pending episodes into facts, chunks of scopes on Dask workers."""
    window = run_window(params)
    async with open_pool(get_settings(), max_size=1) as pool:
        scopes = await pending_scopes(pool, params, window)
    chunks = [c for c in (scopes[i :: params.chunks] for i in range(params.chunks)) if c]
    futures = [
        consolidate_chunk.submit(c, params, window, f"chunk {i}/{len(chunks)}: {len(c)} scopes")
        for i, c in enumerate(chunks, 1)
    ]
    results: list[ScopeResult] = []
    for chunk, future in zip(chunks, futures, strict=True):
        fetch: Any = future.result  # the chunk's return value (the task's coroutine ran there)
        try:
            results.extend(await asyncio.to_thread(fetch))
        except Exception as exc:  # the chunk could not run (its worker died, no database)
            error = redact(f"chunk failed: {type(exc).__name__}: {exc}")
            results.extend(ScopeResult(s, "failed", error=error) for s in chunk)
    return outcome(await publish(results, build_extractor(get_settings().llm).name, SUMMARY_KEY))
