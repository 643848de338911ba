"""The re-filing flow: move facts written before levels of memory to the level consolidation
would file them at today (agent_memory.refile), a scope at a time, each in one transaction;
with ``dry_run``, only count what would move or merge.

The orchestrator is told scopes by their pseudonymous keys (run names, task run names, the
report's artifact), never their ids; the run's parameters name the users it was limited to,
which erasing a user rewrites (agent_memory_flows.erasure).
"""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import flow, runtime
from prefect.artifacts import acreate_table_artifact
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_memory.db.pool import open_pool
from agent_memory.db.scope_keys import namer_for
from agent_memory.decay import Reinforcement
from agent_memory.models import Scope
from agent_memory.refile import Filed, ScopeRefile, check_users
from agent_memory.settings import get_settings
from agent_memory_tasks.policy import configured
from agent_memory_tasks.refile import plan_scope, refile_scope, scopes_to_refile

REPORT_KEY = "memory-refile-report"


class RefileParams(BaseModel):
    """What one re-filing run covers."""

    model_config = ConfigDict(extra="forbid")

    users: list[str] | None = Field(
        default=None,
        min_length=1,
        description="only these user ids' scopes; None: every user's",
    )
    dry_run: bool = Field(default=False, description="count what would move; write nothing")

    @field_validator("users")
    @classmethod
    def _users(cls, users: list[str] | None) -> list[str] | None:
        return check_users(users)  # a bad id fails the submission, named


def _run_name() -> str:
    params = runtime.flow_run.parameters.get("params")
    users = getattr(params, "users", None)
    mode = "dry run" if getattr(params, "dry_run", False) else "refile"
    if not users:
        return f"{mode} [all users]"
    name = namer_for(get_settings().db)
    return f"{mode} [{', '.join(name(Scope(u)) for u in users)}]"


@flow(name="memory-refile", flow_run_name=_run_name, persist_result=False)
async def refile_flow(
    params: RefileParams = RefileParams(),  # noqa: B008 - immutable in practice
) -> dict[str, Any]:
    """Re-file facts at their levels under AGENT_MEMORY_SHARE (or count, with ``dry_run``);
    the report: per scope (by key) how many facts moved, merged or were kept, and the totals."""
    settings = get_settings()
    share = settings.memory.share
    reinforce = Reinforcement.of(settings.memory)
    name = await asyncio.to_thread(namer_for, settings.db)
    retry = settings.task_retries
    done: list[ScopeRefile] = []
    async with open_pool(settings, max_size=2) as pool:
        scopes = await configured(scopes_to_refile, retry)(pool, params.users)
        filed: Filed = frozenset()
        for scope in scopes:
            if params.dry_run:
                plan = configured(plan_scope, retry)
                report = await plan(pool, scope, share, filed, name(scope))
                filed = report.filed
            else:
                refile = configured(refile_scope, retry)
                report = await refile(pool, scope, share, reinforce, name(scope))
            done.append(report)
    rows = [r.row(name(r.scope)) for r in done if r.moved or r.merged or r.kept]
    summary = {
        "dry_run": params.dry_run,
        "share": share,
        "scopes": len(done),
        "moved": sum(r.moved for r in done),
        "merged": sum(r.merged for r in done),
        "kept": sum(r.kept for r in done),
    }
    verb = "would move" if params.dry_run else "moved"
    await acreate_table_artifact(
        table=rows or [{"scope": "-", "moved": 0, "merged": 0, "kept": 0}],
        key=REPORT_KEY,
        description=f"Re-filing under share={share}: {summary['moved']} fact(s) {verb}, "
        f"{summary['merged']} merged, {summary['kept']} kept (shown by Store items)",
    )
    # the caller's report names scopes by their ids (it stays in this process; the artifact
    # above is what Prefect keeps)
    return {**summary, "results": [r.row(r.scope.label) for r in done]}
