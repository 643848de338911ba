"""The re-filing steps as Prefect tasks (agent_memory.refile): one scope each, by its key."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from agent_memory import refile
from agent_memory.decay import Reinforcement
from agent_memory.models import Scope, Share
from agent_memory_tasks.policy import step


@step("db", "list-scopes-to-refile")
async def scopes_to_refile(pool: AsyncConnectionPool, users: list[str] | None) -> list[Scope]:
    """The scopes whose facts a level above may take (of ``users``)."""
    async with pool.connection() as conn:
        return await refile.scopes_to_refile(conn, users)


@step("db", "plan-refile", task_run_name="plan refile [{scope_label}]")
async def plan_scope(
    pool: AsyncConnectionPool,
    scope: Scope,
    share: Share,
    filed: refile.Filed,
    scope_label: str,
) -> refile.ScopeRefile:
    """What re-filing the scope would do, in a read-only transaction: nothing is written."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION READ ONLY")
        return await refile.plan_scope(conn, scope, share, filed)


@step("db", "refile-scope", task_run_name="refile [{scope_label}]")
async def refile_scope(
    pool: AsyncConnectionPool,
    scope: Scope,
    share: Share,
    reinforce: Reinforcement,
    scope_label: str,
) -> refile.ScopeRefile:
    """Re-file the scope's facts at their levels, in one transaction (a retry after a lost
    connection finds done what committed, and does the rest)."""
    return await refile.refile_scope(pool, scope, share, reinforce)
