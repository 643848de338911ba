"""The body of a consolidation run, shared by the consolidation, backfill, retry and Dask flows:
set-up (extractor, embedder, pool, claims), the runner of ``agent_memory.consolidation`` with
each step as a Prefect task run per group (:class:`PrefectSteps`), then the reports."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any, TypeVar, cast

from prefect import Task, allow_failure, get_run_logger, runtime
from prefect.client.schemas.objects import State
from prefect.utilities.annotations import quote
from psycopg_pool import AsyncConnectionPool

from agent_memory import progress
from agent_memory.consolidation import RunSummary, ScopeClaims, ScopeResult
from agent_memory.consolidation.embed import Embedding, build_due_indexes
from agent_memory.consolidation.groups import BatchPlan, Limits, ScopeGroup, groups_in_flight, split
from agent_memory.consolidation.runner import OnBatch, RoundSteps, Run, StepEnd, consolidate_groups
from agent_memory.db.connection import resolve
from agent_memory.db.failures import HeldBack
from agent_memory.db.pool import open_pool
from agent_memory.db.scope_keys import namer_for
from agent_memory.decay import Reinforcement
from agent_memory.embedding import TextEmbedder, make_embedder, vectors_ready
from agent_memory.extraction import OfflineExtractor, build_extractor
from agent_memory.extraction.base import Extractor
from agent_memory.models import Scope, Window
from agent_memory.pseudonyms import Namer
from agent_memory.redact import known_secrets
from agent_memory.settings import Settings, TaskRetrySettings, get_settings
from agent_memory_flows.params import ConsolidationParams
from agent_memory_flows.reports import SUMMARY_KEY, publish
from agent_memory_tasks.consolidation import (
    embed_group,
    extract_group,
    find_held_back,
    find_pending_scopes,
    index_conversations,
    load_group,
    record_failures,
    settle_abandoned_runs,
    write_group,
)
from agent_memory_tasks.policy import configured

T = TypeVar("T")


async def _state(call: Any) -> Any:
    """The State of an async task called with ``return_state=True`` (Prefect's types say the
    call gives the State itself; for an async task it gives a coroutine of it)."""
    return await call


def _link(state: State[Any]) -> State[Any]:
    """``state`` without its result, to name as a later step's ``wait_for``: the UI draws the
    edge from the task run it names, and Prefect does not walk the result (a whole batch; and
    it matches results by ``id()``, so a walked batch links unrelated scopes' steps)."""
    # Prefect reads a wait_for state's result: a token of its own stands in for the batch
    return state.model_copy(update={"data": _Done()})


class _Done:
    """The result a linked step's state carries (a fresh object: nothing else has its id)."""


def _opaque(value: T) -> T:
    """``value`` as a task argument Prefect passes through without walking it.

    A batch carries every episode's messages; Prefect would otherwise visit all of them
    (looking for futures to wait on) at each task call, a large share of a task's cost.
    """
    return cast(T, quote(value))


async def _end(state: State[Any]) -> StepEnd:
    """How a step's task run ended: None when it completed, else its error."""
    if state.is_completed():
        return None
    error = await state.aresult(raise_on_failure=False)
    if isinstance(error, BaseException):
        return error
    return RuntimeError(f"the step's task ended {state.type.value}: {state.message}")


class PrefectSteps:
    """The steps as Prefect task runs, one per step and group, under the run's retry policy;
    each round's steps wait for the ones before them, so the UI draws load -> extract ->
    write (the group itself travels opaque, not walked by Prefect)."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        extractor: Extractor,
        plan: BatchPlan,
        limits: Limits,
        secrets: list[str | None],
        retry: TaskRetrySettings,
    ) -> None:
        self.pool, self.extractor, self.plan, self.limits = pool, extractor, plan, limits
        self.secrets = secrets
        self.load: Task[..., Any] = configured(load_group, retry)
        self.extract: Task[..., Any] = configured(extract_group, retry)
        self.write: Task[..., Any] = configured(write_group, retry)
        self.fail: Task[..., Any] = configured(record_failures, retry)
        self.embed_task: Task[..., Any] = configured(embed_group, retry)

    def round(self, group: ScopeGroup) -> RoundSteps:
        return _PrefectRound(self, group)

    async def embed(self, work: Embedding, embedder: TextEmbedder, label: str) -> StepEnd:
        call = self.embed_task(
            self.pool, _opaque(work), embedder, self.limits, label, return_state=True
        )
        return await _end(await _state(call))


class _PrefectRound:
    def __init__(self, steps: PrefectSteps, group: ScopeGroup) -> None:
        self.steps, self.label, self.group = steps, group.label, _opaque(group)
        self.upstream: list[Any] = []

    async def _run(self, call: Any) -> StepEnd:
        state = await _state(call(return_state=True, wait_for=list(self.upstream)))
        # a step that failed for some members still goes on for the others: allowed upstream
        self.upstream.append(allow_failure(_link(state)))
        return await _end(state)

    async def load(self) -> StepEnd:
        s = self.steps
        return await self._run(
            partial(s.load, s.pool, self.group, s.extractor, s.plan, s.limits, self.label)
        )

    async def extract(self) -> StepEnd:
        s = self.steps
        return await self._run(
            partial(s.extract, s.pool, self.group, s.extractor, s.limits, self.label)
        )

    async def write(self) -> StepEnd:
        s = self.steps
        return await self._run(partial(s.write, s.pool, self.group, s.plan, s.limits, self.label))

    async def fail(self) -> StepEnd:
        s = self.steps
        args = (s.pool, self.group, s.secrets, s.plan, s.limits, self.label)
        await _state(s.fail(*args, return_state=True, wait_for=self.upstream))
        return None  # the members still failing say that their failure was not recorded


def _embedder(settings: Settings) -> TextEmbedder | None:
    """The run's embedder, unless relevance by meaning is off or pgvector is missing (then a
    warning, and full-text relevance only)."""
    if settings.embedding.active_model is None:
        return None
    try:
        reason = vectors_ready(resolve(settings.db))
    except Exception as exc:  # not known now; the next run asks again
        reason = f"could not check for pgvector: {exc}"
    if reason is not None:
        logging.getLogger(__name__).warning(
            "relevance by meaning is on (%s), but embeddings cannot be stored (%s); "
            "relevance uses full-text search",
            settings.embedding.active_model,
            reason,
        )
        return None
    return make_embedder(settings.embedding)


async def _extractor(settings: Settings) -> Extractor:
    """The run's extractor, warmed in a thread: the first ``import litellm`` takes seconds (and
    more on a busy machine), which must not stall the event loop while scopes hold connections
    or transactions."""
    extractor = build_extractor(settings.llm)
    await asyncio.to_thread(extractor.warm)
    if extractor.name == OfflineExtractor.name:
        get_run_logger().warning(
            "no LLM configured (AGENT_MEMORY_LLM_MODEL); using the built-in offline rule-based "
            "extractor '%s'",
            extractor.name,
        )
    return extractor


def _secrets(settings: Settings) -> list[str | None]:
    return list(
        known_secrets(
            settings.llm.api_key.get_secret_value() if settings.llm.api_key else None,
            settings.db.url.get_secret_value() if settings.db.url else None,
        )
    )


def run_window(params: ConsolidationParams, window: Window | None = None) -> Window | None:
    """The window narrowed to the run's shard, if it has one."""
    if params.shard_count == 1:
        return window
    return dataclasses.replace(window or Window(), shard=params.shard, shards=params.shard_count)


async def pending_scopes(
    pool: AsyncConnectionPool, params: ConsolidationParams, window: Window | None
) -> list[Scope]:
    """The scopes this run takes (a task). A run retried from Prefect (its Retry button,
    `prefect flow-run retry`) is an operator's explicit request: failed scopes need not wait
    out their backoff."""
    only = params.scope.to_scope() if params.scope else None
    retried = (runtime.flow_run.run_count or 1) > 1
    find = configured(find_pending_scopes, get_settings().task_retries)
    scopes: list[Scope] = await find(pool, only, params.max_scopes, window, include_waiting=retried)
    return scopes


async def consolidate_scopes(
    pool: AsyncConnectionPool,
    scopes: list[Scope],
    params: ConsolidationParams,
    window: Window | None = None,
    on_batch: OnBatch | None = None,
    extractor: Extractor | None = None,
) -> list[ScopeResult]:
    """Consolidate ``scopes`` concurrently in this process, in groups of
    ``AGENT_MEMORY_CONSOLIDATION_GROUP_SIZE`` (a task run per step and group; LLM calls
    bounded by ``AGENT_MEMORY_LLM_MAX_CONCURRENCY``), each scope under this run's claim; one
    result per scope that had work. ``extractor``: the run's, else one built from the
    settings."""
    settings = get_settings()
    extractor = extractor or await _extractor(settings)
    secrets = _secrets(settings)
    # leave a connection for the steps' short statements outside the limit (cache lookups)
    limits = Limits.of(settings.llm.max_concurrency, max(1, pool.max_size - 1))
    plan = BatchPlan(
        flow_run_id=runtime.flow_run.id,
        max_episodes=params.max_episodes_per_scope,
        max_batches=params.max_batches_per_scope,
        token_budget=settings.llm.batch_tokens,
        window=window,
        decay_from=params.decay_from,
        share=settings.memory.share,
        level=params.level,
        reinforce=Reinforcement.of(settings.memory),
        failures=settings.jobs,
    )
    size = settings.consolidation.group_size
    embedder = await asyncio.to_thread(_embedder, settings)
    steps = PrefectSteps(pool, extractor, plan, limits, secrets, settings.task_retries)
    name = await asyncio.to_thread(namer_for, settings.db)  # scopes by key, in Prefect
    claims = await ScopeClaims.open(resolve(settings.db))
    try:
        run = Run(claims, steps, plan, secrets, on_batch, embedder)
        in_flight = groups_in_flight(size, settings.llm.max_concurrency)
        results = await consolidate_groups(run, split(scopes, size, name), in_flight)
    finally:
        with contextlib.suppress(Exception):
            await claims.close()
    if embedder is not None:  # only now: an index built under the claims waits for them
        await _indexes(pool, [r.scope for r in results], embedder, name)
    return results


async def _indexes(
    pool: AsyncConnectionPool, scopes: list[Scope], embedder: TextEmbedder, name: Namer
) -> None:
    """The run's scopes' nearest-neighbour indexes that are due, built once its claims are
    gone; one that fails is said in the log and built by a later run (the facts and their
    vectors are written either way)."""
    log = get_run_logger()
    try:
        await build_due_indexes(pool, scopes, embedder, log, name)
    except Exception as exc:
        log.warning("nearest-neighbour indexes not built now (a later run will): %s", exc)


def open_run_pool(settings: Settings) -> AbstractAsyncContextManager[AsyncConnectionPool]:
    """The connection pool of a run: one connection per concurrent LLM call, and one more."""
    return open_pool(
        settings, max_size=min(settings.db.pool_max_size, settings.llm.max_concurrency + 1)
    )


async def run_consolidation(
    params: ConsolidationParams,
    *,
    window: Window | None = None,
    on_batch: OnBatch | None = None,
    summary_key: str = SUMMARY_KEY,
    scopes: list[Scope] | None = None,
) -> RunSummary:
    """The body of a consolidation run (inside a flow): every scope with pending episodes in
    the window (or just ``scopes``), batch by batch, ``on_batch`` told of each finished batch
    (and the watcher of :mod:`agent_memory.progress`, if any, of the scopes and episodes done);
    then the artifacts, and an event per failed scope."""
    window = run_window(params, window)
    settings = get_settings()
    extractor = await _extractor(settings)  # before any connection is open
    held: HeldBack | None = None
    async with open_run_pool(settings) as pool:
        await configured(settle_abandoned_runs, settings.task_retries)(pool)
        # a run over every scope indexes every scope's waiting conversations, others their own
        everything = scopes is None and params.scope is None and window is None
        if scopes is None:
            progress.note("finding scopes with pending episodes")
            scopes = await pending_scopes(pool, params, window)
            if params.scope is None and (runtime.flow_run.run_count or 1) <= 1:
                held = await configured(find_held_back, settings.task_retries)(pool)
        progress.plan("scopes", len(scopes))
        progress.note("indexing conversations")
        await configured(index_conversations, settings.task_retries)(
            pool, None if everything else _opaque(scopes)
        )
        progress.note("consolidating")
        results = await consolidate_scopes(pool, scopes, params, window, on_batch, extractor)
    name = await asyncio.to_thread(namer_for, settings.db)
    return await publish(results, extractor.name, summary_key, held, name)
