"""The decay steps as Prefect tasks."""

from __future__ import annotations

from datetime import date

from prefect import get_run_logger
from psycopg_pool import AsyncConnectionPool

from agent_memory import analytics, progress
from agent_memory.db import decay as decay_repo
from agent_memory.db import term_counts
from agent_memory.db.migrations import policy_params
from agent_memory.decay import DecayPolicy
from agent_memory.models import Scope
from agent_memory.pseudonyms import Namer, by_label
from agent_memory_tasks.policy import step


@step("db", "sync-decay-policy")
async def sync_decay_policy(pool: AsyncConnectionPool, policy: DecayPolicy, as_of: date) -> int:
    """Apply changed half-lives or a changed purge threshold (rescaling the facts they concern
    once); returns rows rewritten."""
    async with pool.connection() as conn:
        stored = await decay_repo.policy(conn)
        if stored == policy:
            return 0
        rewritten = await decay_repo.sync_policy(conn, policy, as_of)
    if rewritten:
        get_run_logger().warning(
            "decay policy changed from %s to %s: rescaled %d fact(s)", stored, policy, rewritten
        )
    return rewritten


@step("db", "purge-faded-facts", task_run_name="purge [{scope_label}]")
async def purge_faded_facts(
    pool: AsyncConnectionPool,
    purge_below: float,
    as_of: date,
    scope: Scope | None,
    batch: int,
    scope_label: str,
) -> int:
    """Delete what has faded below the threshold on ``as_of`` (idempotent for a given day)."""
    async with pool.connection() as conn:
        purged = await decay_repo.purge(
            conn, purge_below, as_of, scope, batch, lambda n: progress.advance("purged", n)
        )
        # the full-text statistics' changes, the purge's and the day's writes', folded
        await term_counts.compact(conn, scope)
    get_run_logger().info("purged %d fact(s) below %s as of %s", purged, purge_below, as_of)
    return purged


@step("db", "decay-analytics", task_run_name="analytics [{scope_label}]")
async def decay_analytics(
    pool: AsyncConnectionPool,
    as_of: date,
    scope: Scope | None,
    purge_below: float,
    purged: int,
    scope_label: str,
    name: Namer = by_label,
) -> analytics.DecayReport:
    async with pool.connection() as conn:
        frame = await analytics.load_frame(conn, scope, purge_below)
    return analytics.report(frame, as_of=as_of, purge_below=purge_below, purged=purged, name=name)


@step("db", "record-decay-run")
async def record_decay_run(
    pool: AsyncConnectionPool,
    report: analytics.DecayReport,
    scope: Scope | None,
    policy: DecayPolicy,
) -> None:
    async with pool.connection() as conn:
        await decay_repo.record_decay_run(
            conn,
            report.as_of,
            scope,
            policy_params(policy)["factor"],
            report.purge_below,
            report.purged,
        )
