"""The one home of the schedules. ``prefect.yaml`` holds the same values for teams that deploy
to a work pool; a test keeps the two in step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Schedule:
    """One deployment: its flow (a module path, importable wherever the package is installed),
    when it runs and with what."""

    name: str
    entrypoint: str
    cron: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    concurrency_limit: int = 1
    timezone: str = "UTC"


CONSOLIDATION = Schedule(
    name="memory-consolidation-hourly",
    entrypoint="agent_memory_flows.consolidation.consolidation_flow",
    cron="0 * * * *",
    description="Consolidate pending episodes into facts, every hour.",
    parameters={"params": {"max_scopes": 10_000, "max_episodes_per_scope": 1_000}},
)

DECAY = Schedule(
    name="memory-decay-daily",
    entrypoint="agent_memory_flows.decay.decay_flow",
    cron="15 3 * * *",
    description="Purge faded facts and publish decay analytics, every day at 03:15 UTC.",
    parameters={"params": {"batch_size": 5_000}},
)

RETRY = Schedule(
    name="memory-retry-failed",
    entrypoint="agent_memory_flows.retry.retry_flow",
    cron="*/10 * * * *",
    description="Consolidate again the failed scopes whose backoff has passed, every 10 minutes.",
    parameters={"params": {"max_scopes": 10_000}},
)

SCHEDULES = (CONSOLIDATION, DECAY, RETRY)
