"""The backfill flow: consolidate imported history, a date range and a scope filter at a time.

Each scope's episodes go in the order they happened, batch by batch, so later conversations
update (or contradict) what earlier ones taught. A fact's decay clock starts at the import by
default (``decay_from="import"``), so history is useful now rather than as faded as it is old;
``decay_from="conversation"`` starts it when the conversation happened, and the run then says
how many facts the next decay will purge. Every batch commits on its own: interrupt a backfill
and start it again, and it carries on with what is still pending. A progress artifact follows
the run.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from prefect import flow, get_run_logger, runtime
from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from agent_memory import decay as decay_math
from agent_memory import progress
from agent_memory.consolidation import ScopeResult
from agent_memory.consolidation.results import BackfillSummary
from agent_memory.db.decay import count_faded
from agent_memory.db.episodes import count_pending
from agent_memory.db.pool import open_pool
from agent_memory.models import DecayFrom, Level, Scope, Window
from agent_memory.settings import get_settings
from agent_memory_flows.outcome import outcome
from agent_memory_flows.params import ConsolidationParams, ScopeParam
from agent_memory_flows.run import run_consolidation

SUMMARY_KEY = "memory-backfill-summary"
PROGRESS_KEY = "memory-backfill-progress"
_PROGRESS_EVERY_S = 1.0  # at most one progress update a second: thousands of batches per run


class BackfillParams(BaseModel):
    """What one backfill run covers: conversations that happened in [since, until)."""

    model_config = ConfigDict(extra="forbid")

    since: AwareDatetime | None = Field(default=None, description="from (inclusive); None: all")
    until: AwareDatetime | None = Field(default=None, description="to (exclusive); None: now")
    scope: ScopeParam | None = Field(default=None, description="one scope; None: all of them")
    users: list[str] | None = Field(
        default=None, min_length=1, description="only these user ids; None: any"
    )
    max_scopes: int = Field(default=1_000_000, ge=1, le=1_000_000)
    max_episodes_per_scope: int = Field(default=1_000, ge=1, le=100_000)
    max_batches_per_scope: int = Field(default=100_000, ge=1, le=100_000)
    decay_from: DecayFrom = Field(
        default="import",
        description="where facts' decay clock starts: at the import, so history is useful "
        "now (import), or at the conversation, as faded as it is old (conversation)",
    )
    level: Level | None = Field(
        default=None,
        description="file every backfilled fact at this level of memory where the scope reads "
        "it ('user': the person's, shared by all their agents; 'workflow' or 'scope': where "
        "it was said); None: by the rules, as live consolidation files them",
    )

    @model_validator(mode="after")
    def _ordered(self) -> BackfillParams:
        self.window()  # since < until, user ids non-empty: named errors at submission
        return self

    def window(self) -> Window:
        return Window(self.since, self.until, self.users)


def _run_name() -> str:
    params = runtime.flow_run.parameters.get("params")
    since = getattr(params, "since", None)
    until = getattr(params, "until", None)
    scope = getattr(params, "scope", None)

    def day(value: datetime | None) -> str:
        return value.date().isoformat() if value else "…"

    where = scope.key() if scope else "all scopes"
    if since is None and until is None:
        return f"backfill [all time, {where}]"
    return f"backfill [{day(since)} to {day(until)}, {where}]"


@flow(name="memory-backfill", flow_run_name=_run_name, persist_result=False)
async def backfill_flow(
    params: BackfillParams = BackfillParams(),  # noqa: B008 - immutable in practice
) -> Any:
    """Consolidate the pending history in the window, oldest first within each scope."""
    window = params.window()
    progress.note("counting pending episodes")
    async with open_pool(get_settings(), max_size=1) as pool, pool.connection() as conn:
        total = await count_pending(conn, window)
    progress.plan("episodes", total)
    progress_id = await acreate_progress_artifact(
        progress=0.0 if total else 100.0,
        key=PROGRESS_KEY,
        description=f"{total} pending episode(s) in the window",
    )
    done = 0
    last_update = time.monotonic()
    touched: dict[Scope, None] = {}  # the scopes this run wrote to, in order

    async def on_batch(result: ScopeResult) -> None:
        nonlocal done, last_update
        done += result.episodes
        touched[result.scope] = None
        if time.monotonic() - last_update >= _PROGRESS_EVERY_S:
            last_update = time.monotonic()
            await aupdate_progress_artifact(
                progress_id,
                progress=min(100.0, 100.0 * done / max(total, 1)),
                description=f"{done} of {total} episode(s) consolidated",
            )

    summary = await run_consolidation(
        ConsolidationParams(
            scope=params.scope,
            max_scopes=params.max_scopes,
            max_episodes_per_scope=params.max_episodes_per_scope,
            max_batches_per_scope=params.max_batches_per_scope,
            decay_from=params.decay_from,
            level=params.level,
        ),
        window=window,
        on_batch=on_batch,
        summary_key=SUMMARY_KEY,
    )
    await aupdate_progress_artifact(
        progress_id,
        progress=min(100.0, 100.0 * done / total) if total else 100.0,
        description=f"{done} of {total} episode(s) consolidated"
        + (f"; {summary['failed']} scope(s) failed" if summary["failed"] else ""),
    )
    # history older than the decay allows is gone at the next decay: say so, never silently
    progress.note("counting faded facts")
    settings = get_settings()
    async with open_pool(settings, max_size=1, setup=False) as pool, pool.connection() as conn:
        faded = await count_faded(
            conn, list(touched), settings.memory.purge_threshold, decay_math.today()
        )
    backfilled = BackfillSummary(**summary, pending_before=total, facts_below_purge_threshold=faded)
    if faded:
        get_run_logger().warning(
            "%d fact(s) of the backfilled scopes are already below the purge threshold (%s) and "
            "go at the next decay%s",
            faded,
            settings.memory.purge_threshold,
            " (their decay clock started at the conversation: --decay-from conversation)"
            if params.decay_from == "conversation"
            else "",
        )
    return outcome(backfilled)
