"""The consolidation flow: turn every scope's pending episodes into facts.

Per scope: load (and checksum) -> extract (LLM or offline; skipped when the content was seen)
-> write (facts, episode marks and the job's status in one transaction). A failing scope gets a
``failed`` job row and keeps its episodes; the other scopes carry on. A table artifact sums up
the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar, cast

from prefect import Task, allow_failure, flow, get_run_logger, runtime
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.events import emit_event
from prefect.utilities.annotations import quote
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_memory.consolidation import ScopeClaims, ScopeResult
from agent_memory.db.connection import resolve
from agent_memory.db.pool import open_pool
from agent_memory.db.retries import HeldBack
from agent_memory.decay import Reinforcement
from agent_memory.embedding import TextEmbedder, make_embedder, vectors_ready
from agent_memory.extraction import OfflineExtractor, build_extractor
from agent_memory.extraction.base import Extractor
from agent_memory.groups import (
    BatchPlan,
    Limits,
    Member,
    ScopeGroup,
    Stage,
    groups_in_flight,
    split,
)
from agent_memory.models import DecayFrom, Scope, Window
from agent_memory.redact import known_secrets, redact
from agent_memory.settings import RetrySettings, Settings, get_settings
from agent_memory_flows.outcome import outcome
from agent_memory_flows.params import ScopeParam
from agent_memory_tasks.consolidation import (
    Embedding,
    embed_group,
    extract_group,
    find_held_back,
    find_pending_scopes,
    load_group,
    record_failures,
    settle_abandoned_runs,
    write_group,
)
from agent_memory_tasks.policy import configured

SUMMARY_KEY = "memory-consolidation-summary"

OnBatch = Callable[[ScopeResult], Awaitable[None]]

T = TypeVar("T")


async def _state(call: Any) -> Any:
    """The State of an async task called with ``return_state=True`` (Prefect's types say the
    call gives the State itself; for an async task it gives a coroutine of it)."""
    return await call


def _link(state: Any) -> Any:
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


class ConsolidationParams(BaseModel):
    """What one consolidation run covers."""

    model_config = ConfigDict(extra="forbid")

    scope: ScopeParam | None = Field(default=None, description="one scope; None: all of them")
    max_scopes: int = Field(default=10_000, ge=1, le=1_000_000)
    max_episodes_per_scope: int = Field(
        default=1_000, ge=1, le=100_000, description="episodes loaded per batch, at most"
    )
    max_batches_per_scope: int = Field(
        default=100, ge=1, le=100_000, description="batches per scope in one run, at most"
    )
    shard: int = Field(default=0, ge=0, description="this run's shard of the scopes")
    shard_count: int = Field(
        default=1, ge=1, le=1024, description="shards: runs for each shard share no scope"
    )
    decay_from: DecayFrom = Field(
        default="import",
        description="where facts' decay clock starts: when memory learned them (import) or "
        "when the conversation happened (conversation)",
    )

    @model_validator(mode="after")
    def _shard_in_range(self) -> ConsolidationParams:
        if self.shard >= self.shard_count:
            raise ValueError(f"shard {self.shard} is not below shard_count {self.shard_count}")
        return self


def _run_name() -> str:
    params = runtime.flow_run.parameters.get("params")
    scope = getattr(params, "scope", None)
    where = scope.to_scope().label if scope else "all scopes"
    if getattr(params, "shard_count", 1) > 1:
        where += f", shard {params.shard + 1}/{params.shard_count}"
    return f"consolidate [{where}]"


@dataclasses.dataclass
class _Run:
    """What every group of one run shares: its pool and claims, extractor and embedder, batch
    plan and limits, the secrets to redact, and its steps under the run's retry policy."""

    pool: AsyncConnectionPool
    claims: ScopeClaims
    extractor: Extractor
    plan: BatchPlan
    limits: Limits
    secrets: list[str | None]
    retry: RetrySettings
    on_batch: OnBatch | None = None
    embedder: TextEmbedder | None = None
    load: Task[..., Any] = dataclasses.field(init=False)
    extract: Task[..., Any] = dataclasses.field(init=False)
    write: Task[..., Any] = dataclasses.field(init=False)
    fail: Task[..., Any] = dataclasses.field(init=False)
    embed: Task[..., Any] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.load = configured(load_group, self.retry)
        self.extract = configured(extract_group, self.retry)
        self.write = configured(write_group, self.retry)
        self.fail = configured(record_failures, self.retry)
        self.embed = configured(embed_group, self.retry)


async def _one_group(run: _Run, group: ScopeGroup) -> None:
    """Consolidate the group's scopes under this run's claims, each step once for all of
    them (a backlog in rounds: a batch per scope each); the outcomes stay on the members."""
    claimed: list[Member] = []
    plan, secrets = run.plan, run.secrets
    try:
        owned = await run.claims.claim_each([m.scope for m in group.members])
    except Exception as exc:  # the database is unreachable: the scopes stay pending
        error = redact(f"could not claim: {exc}", secrets)
        for member in group.members:
            member.finish_batch(ScopeResult(member.scope, "failed", error=error), 1)
        return
    for member, ours in zip(group.members, owned, strict=True):
        if ours:
            claimed.append(member)
        else:  # a live run is consolidating this scope right now
            member.finish_batch(ScopeResult(member.scope, "busy"), plan.max_batches)
    try:
        while group.at("claimed"):
            await _one_round(run, group)
        done = [m for m in claimed if any(r.outcome == "completed" for r in m.results)]
        if run.embedder is not None and done:
            await _embed(run, group.label, done, run.embedder)
    finally:
        with contextlib.suppress(Exception):  # a dead connection has dropped the locks anyway
            await run.claims.release_each([m.scope for m in claimed])


async def _embed(run: _Run, label: str, members: list[Member], embedder: TextEmbedder) -> None:
    """Embed the members' new facts. The facts are already written: a failure here leaves
    them without embeddings (the next run, or ``agent-memory embed``, catches up), not the
    scope failed."""
    work = Embedding([m.scope for m in members])
    state = await _state(
        run.embed(run.pool, _opaque(work), embedder, run.limits, label, return_state=True)
    )
    if not state.is_completed():  # a scope that did not get its turn has the task's error
        error = await state.aresult(raise_on_failure=False)
        for scope in work.scopes:
            if scope not in work.done and scope not in work.errors:
                work.errors[scope] = error
    for member in members:
        scope, result = member.scope, member.results[-1]
        if scope in work.errors:
            note = redact(f"facts not embedded yet: {work.errors[scope]}", run.secrets)
            logging.getLogger(__name__).warning("%s: %s", scope.label, note)
            result.repairs.append(note)
        elif work.done[scope].refused:  # each one is in the log, with the model's reason
            refused = work.done[scope].refused
            result.repairs.append(f"{refused} fact(s) refused by embedding model {embedder.model}")


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


async def _settle(members: list[Member], stage: Stage, state: Any) -> None:
    """After a step's task: a member it left at ``stage`` without an error of its own did
    not get its turn (the task itself broke), and takes the task's error."""
    if state.is_completed():
        return
    error = await state.aresult(raise_on_failure=False)
    if not isinstance(error, Exception):
        error = RuntimeError(f"the step's task ended {state.type.value}: {state.message}")
    for member in members:
        if member.stage == stage and member.error is None:
            member.error = error


async def _one_round(run: _Run, group: ScopeGroup) -> None:
    """Load, extract and write the next batch of each of the group's scopes that has one,
    then record the failures: one task run per step for the whole group."""
    label = group.label
    before = {id(m): len(m.results) for m in group.members}
    # each step waits for the states of the steps before it: the UI's task graph draws
    # load -> extract -> write (the group itself travels opaque, not walked by Prefect)
    upstream: list[Any] = []

    async def step(stage: Stage, call: Callable[..., Any]) -> None:
        members = group.at(stage)
        if not members:
            return
        state = await _state(call(return_state=True, wait_for=list(upstream)))
        await _settle(members, stage, state)
        # a step that failed for some members still goes on for the others: allowed upstream
        upstream.append(allow_failure(_link(state)))

    pool, plan, limits, secrets = run.pool, run.plan, run.limits, run.secrets
    opaque = _opaque(group)
    await step("claimed", partial(run.load, pool, opaque, run.extractor, plan, limits, label))
    await step("loaded", partial(run.extract, pool, opaque, run.extractor, limits, label))
    await step("extracted", partial(run.write, pool, opaque, plan, limits, label))
    if group.failing():
        await _state(
            run.fail(
                pool, opaque, secrets, plan, limits, label, return_state=True, wait_for=upstream
            )
        )
        for member in group.failing():  # the database itself is gone: report, do not hide
            error = redact(f"{type(member.error).__name__}: {member.error}", secrets)
            logging.getLogger(__name__).error(
                "could not record failure of %s: %s", member.scope.label, error
            )
            job_id = member.batch.job_id if member.batch is not None else None
            member.finish_batch(ScopeResult(member.scope, "failed", job_id, error=error), 1)
    if run.on_batch is None:
        return
    for member in group.members:
        for result in member.results[before[id(member)] :]:
            try:
                await run.on_batch(result)
            except Exception as exc:  # progress reporting must not undo the work
                logging.getLogger(__name__).warning("progress update failed: %s", exc)


_SHORT_ERROR = 80  # characters of the error in the narrow summary table


def _narrow(row: dict[str, Any]) -> dict[str, Any]:
    """A summary row for the table operators read first: scope, outcome, facts, cost, error."""
    error = str(row.get("error") or "")
    return {
        "scope": row["scope"],
        "outcome": row["outcome"],
        "facts": row["facts_created"],
        "cost_usd": row["cost_usd"],
        "error": error if len(error) <= _SHORT_ERROR else error[: _SHORT_ERROR - 1] + "\u2026",
    }


def summarize(results: list[ScopeResult], extractor: str) -> dict[str, Any]:
    outcomes = ("completed", "skipped", "failed", "busy")
    counts = {o: sum(r.outcome == o for r in results) for o in outcomes}
    return {
        "extractor": extractor,
        "scopes": len(results),
        **counts,
        "episodes": sum(r.episodes for r in results),
        "facts_created": sum(r.facts_created for r in results),
        "facts_reinforced": sum(r.facts_reinforced for r in results),
        "llm_calls": sum(r.llm_calls for r in results),
        "prompt_tokens": sum(r.prompt_tokens for r in results),
        "completion_tokens": sum(r.completion_tokens for r in results),
        "cost_usd": sum(r.cost_usd for r in results if r.cost_usd is not None)
        if any(r.cost_usd is not None for r in results)
        else None,
        "results": [r.row() for r in results],
    }


async def _extractor(settings: Settings) -> Any:
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
    find = configured(find_pending_scopes, get_settings().retry)
    scopes: list[Scope] = await find(pool, only, params.max_scopes, window, include_waiting=retried)
    return scopes


async def consolidate_scopes(
    pool: AsyncConnectionPool,
    scopes: list[Scope],
    params: ConsolidationParams,
    window: Window | None = None,
    on_batch: OnBatch | None = None,
    extractor: Any = None,
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
        reinforce=Reinforcement.of(settings.memory),
        failures=settings.jobs,
    )
    size = settings.consolidation.group_size
    groups = split(scopes, size)
    in_flight = asyncio.Semaphore(groups_in_flight(size, settings.llm.max_concurrency))
    embedder = await asyncio.to_thread(_embedder, settings)
    claims = await ScopeClaims.open(resolve(settings.db))
    run = _Run(pool, claims, extractor, plan, limits, secrets, settings.retry, on_batch, embedder)

    async def one(group: ScopeGroup) -> None:
        async with in_flight:
            await _one_group(run, group)

    try:
        # one group's unexpected error must not close the pool under the others
        errors = await asyncio.gather(*(one(g) for g in groups), return_exceptions=True)
    finally:
        with contextlib.suppress(Exception):
            await run.claims.close()
    results: list[ScopeResult] = []
    for group, error in zip(groups, errors, strict=True):
        for member in group.members:
            if isinstance(error, BaseException) and member.stage != "done":
                text = redact(f"{type(error).__name__}: {error}", secrets)
                member.finish_batch(ScopeResult(member.scope, "failed", error=text), 1)
            results.append(member.outcome())
    return [r for r in results if r.outcome != "empty"]


def open_run_pool(settings: Settings) -> Any:
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
) -> dict[str, Any]:
    """The body of a consolidation run (inside a flow): every scope with pending episodes in
    the window (or just ``scopes``), batch by batch, ``on_batch`` told of each finished batch;
    then the artifacts, and an event per failed scope."""
    window = run_window(params, window)
    settings = get_settings()
    extractor = await _extractor(settings)  # before any connection is open
    held: HeldBack | None = None
    async with open_run_pool(settings) as pool:
        await configured(settle_abandoned_runs, settings.retry)(pool)
        if scopes is None:
            scopes = await pending_scopes(pool, params, window)
            if params.scope is None and (runtime.flow_run.run_count or 1) <= 1:
                held = await configured(find_held_back, settings.retry)(pool)
        results = await consolidate_scopes(pool, scopes, params, window, on_batch, extractor)
    return await publish(results, extractor.name, summary_key, held)


async def publish(
    results: list[ScopeResult],
    extractor_name: str,
    summary_key: str = SUMMARY_KEY,
    held: HeldBack | None = None,
) -> dict[str, Any]:
    """The run's summary: its table artifact, a failures artifact and an event per failed
    scope. ``held``: the scopes with pending episodes the run left for later."""
    logger = get_run_logger()
    summary = summarize(results, extractor_name)
    summary["held_back"] = held.note() if held is not None else None
    cost = summary["cost_usd"]
    spent = f", ${cost:.4f}" if cost is not None else ""
    await acreate_table_artifact(
        # narrow enough to read without scrolling; every column is in the details artifact
        table=[_narrow(r) for r in summary["results"]]
        or [{"scope": "-", "outcome": "nothing pending"}],
        key=summary_key,
        description=(
            f"{summary['scopes']} scope(s): {summary['completed']} completed, "
            f"{summary['skipped']} skipped, {summary['failed']} failed, {summary['busy']} busy; "
            f"{summary['facts_created']} new fact(s), extractor {extractor_name}; "
            f"{summary['llm_calls']} LLM call(s){spent}"
            + (f". {summary['held_back']}" if summary["held_back"] else "")
        ),
    )
    if summary["results"]:
        await acreate_table_artifact(
            table=summary["results"],
            key=f"{summary_key}-details",
            description="every figure of each scope: batches, facts by kind of change, "
            "tokens, cost and the whole error",
        )
    if summary["failed"]:
        failed = "\n".join(
            f"- `{r['scope']}` (job {r['job']}): {r['error']}"
            for r in summary["results"]
            if r["outcome"] == "failed"
        )
        jobs = " ".join(
            f"--job {r['job']}"
            for r in summary["results"]
            if r["outcome"] == "failed" and r["job"] is not None
        )
        await acreate_markdown_artifact(
            markdown="## Failed scopes\n\nTheir episodes stay pending for the next run.\n\n"
            + failed
            + "\n\n## To retry them now\n\n"
            + "Prefect's **Retry** on this run redoes only its failed scopes, at once; or, "
            + "from a shell with the same settings:\n\n"
            + f"```\nagent-memory jobs retry {jobs or '--all'}\n```\n\n"
            + "A scope that fails again waits a doubling backoff, and after "
            + "`AGENT_MEMORY_JOB_ATTEMPTS` failures in a row is parked until retried so.",
            key="memory-consolidation-failures",
        )
        logger.error(
            "%d scope(s) failed; see the job rows and the run's artifacts", summary["failed"]
        )
    for result in results:
        if result.outcome == "failed":
            emit_failure(result)
    return summary


FAILED_EVENT = "memory.consolidation.failed"
PARKED_EVENT = "memory.consolidation.parked"


def emit_failure(result: ScopeResult) -> None:
    """A Prefect event for a failed scope (``.parked`` once it has failed too often), for
    automations to react to; see docs/operations.md."""
    label = result.scope.label
    emit_event(
        event=PARKED_EVENT if result.parked else FAILED_EVENT,
        resource={
            "prefect.resource.id": f"agent-memory.scope.{label.replace(' ', ',')}",
            "prefect.resource.name": label,
        },
        payload={
            "job_id": result.job_id,
            "error": result.error,
            "failures": result.failures,
            "parked": result.parked,
            **result.scope.as_dict(),
        },
    )


@flow(name="memory-consolidation", flow_run_name=_run_name, persist_result=False)
async def consolidation_flow(
    params: ConsolidationParams = ConsolidationParams(),  # noqa: B008 - immutable in practice
) -> Any:
    """Consolidate pending episodes into facts, scope by scope (Failed if a scope failed)."""
    return outcome(await run_consolidation(params))
