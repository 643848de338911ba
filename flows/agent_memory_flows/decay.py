"""The decay flow: forget what has faded, then report on what memory holds.

Importance halves every half-life (by the fact's kind, ``AGENT_MEMORY_HALF_LIFE_*``, grown by
each conversation that says it again) and facts below ``AGENT_MEMORY_PURGE_THRESHOLD`` (0.05)
are purged. Decay is a function of the date, not of how
often this runs: a second run on the same day, or a Prefect retry, changes nothing.
"""

from __future__ import annotations

import asyncio
import base64
from datetime import date
from typing import Any

from prefect import flow, runtime
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from pydantic import BaseModel, ConfigDict, Field

from agent_memory import analytics, progress
from agent_memory.db.pool import open_pool
from agent_memory.db.scope_keys import namer_for
from agent_memory.decay import DecayPolicy, today
from agent_memory.settings import get_settings
from agent_memory_flows.params import ScopeParam
from agent_memory_tasks.decay import (
    decay_analytics,
    purge_faded_facts,
    record_decay_run,
    sync_decay_policy,
)
from agent_memory_tasks.policy import configured


class DecayParams(BaseModel):
    """What one decay run covers."""

    model_config = ConfigDict(extra="forbid")

    scope: ScopeParam | None = Field(default=None, description="one scope; None: all of them")
    as_of: date | None = Field(default=None, description="the day to decay to (UTC); default today")
    purge_below: float | None = Field(
        default=None, gt=0.0, lt=1.0, description="default: AGENT_MEMORY_PURGE_THRESHOLD"
    )
    batch_size: int = Field(default=5_000, ge=1, le=1_000_000)


CHART_KEY = "memory-decay-chart"


def _chart_markdown(report: analytics.DecayReport, label: str, png: bytes) -> str:
    """The chart as a markdown artifact with the PNG inline (a data: URI).

    Prefect 3 has no artifact that holds image bytes: an image artifact is a URL that the UI
    puts in an <img> (and prints in full beside it), so it needs a host serving the file. The
    UI's markdown renderer lets data:image URIs through for <img> (its sanitizer adds the data
    protocol for src), so the chart shows in the run's Artifacts tab with nothing to serve and
    nothing to reach over the network.
    """
    data = base64.b64encode(png).decode("ascii")
    return (
        f"## Decay on {report.as_of}: importance and projected survival\n\n"
        f"scope: {label}; {report.facts} fact(s) after purging {report.purged}\n\n"
        f"![importance distribution and projected survival](data:image/png;base64,{data})\n"
    )


def _run_name() -> str:
    params = runtime.flow_run.parameters.get("params")
    scope = getattr(params, "scope", None)
    day = getattr(params, "as_of", None) or today()
    return f"decay [{scope.key() if scope else 'all scopes'}] {day}"


@flow(name="memory-decay", flow_run_name=_run_name, persist_result=False)
async def decay_flow(
    params: DecayParams = DecayParams(),  # noqa: B008 - immutable in practice
) -> dict[str, Any]:
    """Purge faded facts and publish the decay analytics as artifacts."""
    settings = get_settings()
    as_of = params.as_of or today()
    policy = DecayPolicy.of(settings.memory)
    purge_below = params.purge_below or settings.memory.purge_threshold
    scope = params.scope.to_scope() if params.scope else None
    name = await asyncio.to_thread(namer_for, settings.db)
    label = name(scope) if scope else "all scopes"
    async with open_pool(settings, max_size=2) as pool:
        # purge with the policy the expiry days were computed with, then apply a changed one
        retry = settings.task_retries
        purge = configured(purge_faded_facts, retry)
        progress.note("purging faded facts")
        purged = await purge(pool, purge_below, as_of, scope, params.batch_size, label)
        await configured(sync_decay_policy, retry)(pool, policy, as_of)
        analyse = configured(decay_analytics, retry)
        progress.note("analysing what is left")
        report = await analyse(pool, as_of, scope, purge_below, purged, label, name)
        await configured(record_decay_run, retry)(pool, report, scope, policy)
    await acreate_table_artifact(
        table=report.distribution or [{"importance": "-", "facts": 0}],
        key="memory-decay-distribution",
        description=f"Importance of {report.facts} fact(s) on {as_of}, after purging {purged}",
    )
    await acreate_table_artifact(
        table=report.expiry or [{"within_days": "-", "expiring": 0, "remaining": 0}],
        key="memory-decay-expiry",
        description=f"Projected expiry (purge below {purge_below})",
    )
    await acreate_table_artifact(
        table=report.scopes or [{"scope": "-", "facts": 0}],
        key="memory-decay-scopes",
        description="Facts per scope (largest first)",
    )
    progress.note("drawing the chart")
    # drawing takes a few hundred ms of CPU: off the event loop, which serves Prefect's client
    png = await asyncio.to_thread(analytics.plot, report)
    await acreate_markdown_artifact(markdown=_chart_markdown(report, label, png), key=CHART_KEY)
    await acreate_markdown_artifact(
        markdown=(
            f"## Decay on {as_of}\n\n- scope: {label}\n- purged: **{purged}**\n"
            f"- facts left: **{report.facts}**\n"
            f"- expiring within 7 days: **{report.summary()['expiring_within_7_days']}**\n"
        ),
        key="memory-decay-summary",
    )
    return report.summary()
