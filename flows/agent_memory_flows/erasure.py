"""Erasure reaches the orchestrator: what Prefect's database still holds of an erased scope.

The pipeline tells Prefect a scope's pseudonymous key, never its ids, and no conversation text
(:mod:`agent_memory.pseudonyms`); the key means nothing once the scope is erased (nothing is
left to reveal it as). What can still name the person is a run's parameters: a run for one
scope (``agent-memory consolidate --user A``, ``decay``, ``backfill``) has its ids there, and
runs from before keys, their names too. :func:`forget_in_prefect` deletes, through Prefect's
API, the flow runs whose subject was only the erased scopes (with their task runs, states,
logs and artifacts), rewrites the erased user ids out of the parameters of runs that name
others too (a backfill of several users), and deletes task runs still named by a scope's label
(written before keys). Called by ``MemoryManager.erase`` after the database's transaction.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from uuid import UUID

from prefect import get_client
from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    LogFilter,
    LogFilterFlowRunId,
    TaskRunFilter,
    TaskRunFilterName,
)
from prefect.client.schemas.objects import FlowRun
from prefect.settings import PREFECT_API_URL, PREFECT_HOME

from agent_memory.db.scope_keys import namer_for
from agent_memory.models import Scope
from agent_memory.settings import Settings
from agent_memory_flows.api_server import reporting_server

PAGE = 200
# Prefect deletes a run's logs after the run, in the background: how long to wait for it
LOGS_GONE_S = 60.0


async def forget_in_prefect(scopes: list[Scope], settings: Settings) -> dict[str, int]:
    """Delete from Prefect what names ``scopes`` (see the module); how much of each went. No
    Prefect server configured and no local Prefect database: nothing to do."""
    if not scopes or not _prefect_in_use():
        return {}
    name = await asyncio.to_thread(namer_for, settings.db)
    keys = {name(s) for s in scopes}
    users = {s.user_id for s in scopes if s.user_id is not None}
    doomed: list[FlowRun] = []
    rewritten = 0
    # the same server a run from Python reports to: with none configured, the background
    # one or a quiet one of this process's own, never Prefect's noisy temporary server
    async with reporting_server(settings.prefect), get_client() as client:
        async for run in _flow_runs(client):
            subjects = _subjects(run.parameters)
            if subjects and subjects <= set(scopes) | {Scope(u) for u in users}:
                doomed.append(run)
            elif _named(run.parameters, users):
                parameters = _without(run.parameters, users, name)
                await client.update_flow_run(run.id, parameters=parameters)
                rewritten += 1
            elif any(k in run.name for k in keys) or any(_labelled(run.name, s) for s in scopes):
                doomed.append(run)
        artifacts = 0
        for run in doomed:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
            )
            for artifact in found:
                await client.delete_artifact(artifact.id)
            artifacts += len(found)
            await client.delete_flow_run(run.id)
        await _logs_gone(client, [run.id for run in doomed])
        task_runs = 0
        for scope in scopes:  # named before keys: a grouped task run of a run over all scopes
            named = await client.read_task_runs(
                task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_=scope.label))
            )
            for task_run in named:
                if _labelled(task_run.name, scope):
                    await client.delete_task_run(task_run.id)
                    task_runs += 1
    return {
        "prefect_flow_runs": len(doomed),
        "prefect_artifacts": artifacts,
        "prefect_task_runs": task_runs,
        "prefect_parameters_rewritten": rewritten,
    }


def _prefect_in_use() -> bool:
    """A Prefect server is configured, or runs went to the local (ephemeral) database."""
    return bool(PREFECT_API_URL.value()) or (PREFECT_HOME.value() / "prefect.db").exists()


async def _flow_runs(client: PrefectClient) -> Any:
    offset = 0
    while True:
        page = await client.read_flow_runs(limit=PAGE, offset=offset)
        for run in page:
            yield run
        if len(page) < PAGE:
            return
        offset += PAGE


def _subjects(parameters: dict[str, Any]) -> set[Scope]:
    """The scopes a run was for, from its parameters (empty: a run over all scopes)."""
    params = parameters.get("params")
    if not isinstance(params, dict):
        return set()
    scope = params.get("scope")
    if isinstance(scope, dict):
        return {Scope.from_mapping(scope)}
    users = params.get("users")
    if isinstance(users, list) and users and not params.get("scope"):
        return {Scope(str(u)) for u in users}
    return set()


def _named(value: Any, ids: set[str]) -> bool:
    """Whether any of ``ids`` is a value somewhere in ``value``."""
    if isinstance(value, str):
        return value in ids
    if isinstance(value, dict):
        return any(_named(v, ids) for v in value.values())
    if isinstance(value, list):
        return any(_named(v, ids) for v in value)
    return False


def _without(value: Any, ids: set[str], name: Any) -> Any:
    """``value`` with each of ``ids`` replaced by its user's key (what an erased id becomes)."""
    if isinstance(value, str):
        return name(Scope(value)) if value in ids else value
    if isinstance(value, dict):
        return {k: _without(v, ids, name) for k, v in value.items()}
    if isinstance(value, list):
        return [_without(v, ids, name) for v in value]
    return value


def _labelled(name: str, scope: Scope) -> bool:
    """Whether a run name (``load [user=a]``, ``load [3 scopes: user=a … user=c]``) names
    ``scope`` by its label, as names did before keys."""
    label = re.escape(scope.label)
    return re.search(rf"(?:\[|: |\u2026 ){label}(?:\]|,| \u2026)", name) is not None


async def _logs_gone(client: PrefectClient, run_ids: list[UUID]) -> None:
    """Wait until Prefect has deleted the logs of the deleted runs (it does so in the
    background, after answering)."""
    if not run_ids:
        return
    log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=run_ids))
    deadline = asyncio.get_running_loop().time() + LOGS_GONE_S
    while await client.read_logs(log_filter=log_filter, limit=1):
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"Prefect kept the deleted runs' logs past {LOGS_GONE_S}s")
        await asyncio.sleep(0.5)
