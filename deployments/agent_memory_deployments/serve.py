"""Serving the schedules from one process: no worker, no Docker, just a Prefect server."""

from __future__ import annotations

from typing import Any

from prefect import aserve
from prefect.deployments.runner import RunnerDeployment

from agent_memory_deployments.schedules import CONSOLIDATION, DECAY, RETRY, Schedule
from agent_memory_flows.consolidation import consolidation_flow
from agent_memory_flows.decay import decay_flow
from agent_memory_flows.retry import retry_flow


async def _deployment(flow: Any, schedule: Schedule) -> RunnerDeployment:
    deployment: RunnerDeployment = await flow.to_deployment(
        name=schedule.name,
        cron=schedule.cron,
        parameters=schedule.parameters,
        concurrency_limit=schedule.concurrency_limit,
        description=schedule.description,
        tags=["agent-memory"],
    )
    return deployment


async def build_deployments() -> list[RunnerDeployment]:
    return [
        await _deployment(consolidation_flow, CONSOLIDATION),
        await _deployment(decay_flow, DECAY),
        await _deployment(retry_flow, RETRY),
    ]


async def serve_all() -> None:
    """Register the deployments and run their scheduled flow runs until interrupted."""
    await aserve(*(await build_deployments()), print_starting_message=True)
