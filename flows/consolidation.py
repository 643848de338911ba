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
from typing import Any, TypeVar, cast

from prefect import allow_failure, flow, get_run_logger, runtime
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.events import emit_event
from prefect.utilities.annotations import quote
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_memory.consolidation import ScopeClaims, ScopeResult, merge
from agent_memory.db.connection import resolve
from agent_memory.db.pool import open_pool
from agent_memory.db.retries import HeldBack
from agent_memory.decay import Reinforcement
from agent_memory.embedding import TextEmbedder, make_embedder, vectors_ready
from agent_memory.extraction import OfflineExtractor, build_extractor
from agent_memory.models import DecayFrom, Scope, Window
from agent_memory.redact import known_secrets, redact
from agent_memory.settings import Settings, get_settings
from flows.outcome import outcome
from flows.params import ScopeParam
from tasks.consolidation import (
    embed_facts,
    extract_facts,
    find_held_back,
    find_pending_scopes,
    load_scope_batch,
    record_failure,
    settle_abandoned_runs,
    write_scope,
)

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


async def _one_scope(
    pool: Any,
    claims: ScopeClaims,
    scope: Scope,
    extractor: Any,
    limit: asyncio.Semaphore,
    params: ConsolidationParams,
    secrets: list[str | None],
    reinforce: Reinforcement,
    token_budget: int,
    window: Window | None = None,
    on_batch: OnBatch | None = None,
    embedder: TextEmbedder | None = None,
) -> ScopeResult:
    done: list[ScopeResult] = []
    async with limit:
        try:
            claimed = await claims.claim(scope)
        except Exception as exc:  # the database is unreachable: the scope stays pending
            return ScopeResult(scope, "failed", error=redact(f"could not claim: {exc}", secrets))
        if not claimed:  # a live run is consolidating this scope right now
            return ScopeResult(scope, "busy")
        try:
            # a backlog goes in chronological batches, each committed on its own
            while len(done) < params.max_batches_per_scope:
                result = await _one_batch(
                    pool, scope, extractor, params, secrets, reinforce, token_budget, window
                )
                if result is None:
                    break
                done.append(result)
                if on_batch is not None:
                    try:
                        await on_batch(result)
                    except Exception as exc:  # progress reporting must not undo the work
                        logging.getLogger(__name__).warning("progress update failed: %s", exc)
                if result.outcome != "completed" or not result.more:
                    break
            if embedder is not None and any(r.outcome == "completed" for r in done):
                await _embed(pool, scope, embedder, done[-1], secrets)
        finally:
            with contextlib.suppress(Exception):  # a dead connection has dropped the lock anyway
                await claims.release(scope)
    return merge(scope, done) if done else ScopeResult(scope, "empty")


async def _embed(
    pool: Any, scope: Scope, embedder: TextEmbedder, result: ScopeResult, secrets: list[str | None]
) -> None:
    """Embed the scope's new facts. The facts are already written: a failure here leaves them
    without embeddings (the next run, or ``agent-memory embed``, catches up), not the scope
    failed."""
    try:
        done = await embed_facts(pool, scope, embedder, scope.label)
    except Exception as exc:
        note = redact(f"facts not embedded yet: {exc}", secrets)
        logging.getLogger(__name__).warning("%s: %s", scope.label, note)
        result.repairs.append(note)
        return
    if done.refused:  # each one is in the log, with the model's reason
        result.repairs.append(f"{done.refused} fact(s) refused by embedding model {embedder.model}")


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


async def _one_batch(
    pool: Any,
    scope: Scope,
    extractor: Any,
    params: ConsolidationParams,
    secrets: list[str | None],
    reinforce: Reinforcement,
    token_budget: int,
    window: Window | None = None,
) -> ScopeResult | None:
    """Load, extract and write the scope's next batch; None when nothing is pending."""
    label = scope.label
    batch = None
    # each step waits for the states of the steps before it: the UI's task graph draws
    # load -> extract -> write (the batch itself travels opaque, not walked by Prefect)
    upstream: list[Any] = []
    try:
        loaded = await _state(
            load_scope_batch(
                pool,
                scope,
                extractor,
                runtime.flow_run.id,
                params.max_episodes_per_scope,
                label,
                token_budget,
                window,
                params.decay_from,
                return_state=True,
            )
        )
        upstream.append(_link(loaded))
        batch = await loaded.aresult()
        if batch is None:
            return None
        extracted = await _state(
            extract_facts(
                pool, _opaque(batch), extractor, label, return_state=True, wait_for=upstream
            )
        )
        upstream.append(_link(extracted))
        extraction = await extracted.aresult()
        return await write_scope(
            pool, _opaque(batch), _opaque(extraction), label, reinforce, wait_for=upstream
        )
    except Exception as exc:
        job_id = batch.job_id if batch is not None else None
        try:
            # the task ends Failed (red in the UI) and gives the scope's result as its data
            recorded = await _state(
                record_failure(
                    pool,
                    scope,
                    job_id,
                    exc,
                    secrets,
                    label,
                    _opaque(batch) if batch else None,
                    return_state=True,
                    # a failed step is upstream too: allowed, or this task would not run
                    wait_for=[allow_failure(state) for state in upstream],
                )
            )
            result = await recorded.aresult(raise_on_failure=False)
            if isinstance(result, BaseException):
                raise result
            return cast(ScopeResult, result)
        except Exception as again:  # the database itself is gone: report, do not hide
            logging.getLogger(__name__).error("could not record failure of %s: %s", label, again)
            return ScopeResult(scope, "failed", job_id, error=redact(str(exc), secrets))


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
    scopes: list[Scope] = await find_pending_scopes(
        pool, only, params.max_scopes, window, include_waiting=retried
    )
    return scopes


async def consolidate_scopes(
    pool: AsyncConnectionPool,
    scopes: list[Scope],
    params: ConsolidationParams,
    window: Window | None = None,
    on_batch: OnBatch | None = None,
    extractor: Any = None,
) -> list[ScopeResult]:
    """Consolidate ``scopes`` concurrently in this process (LLM calls bounded by
    ``AGENT_MEMORY_LLM_MAX_CONCURRENCY``), each under this run's claim; one result per scope
    that had work. ``extractor``: the run's, else one built from the settings."""
    settings = get_settings()
    extractor = extractor or await _extractor(settings)
    secrets = _secrets(settings)
    limit = asyncio.Semaphore(settings.llm.max_concurrency)
    embedder = await asyncio.to_thread(_embedder, settings)
    claims = await ScopeClaims.open(resolve(settings.db))
    try:
        outcomes = await asyncio.gather(
            *(
                _one_scope(
                    pool,
                    claims,
                    s,
                    extractor,
                    limit,
                    params,
                    secrets,
                    Reinforcement.of(settings.memory),
                    settings.llm.batch_tokens,
                    window,
                    on_batch,
                    embedder,
                )
                for s in scopes
            ),
            # one scope's unexpected error must not close the pool under the others
            return_exceptions=True,
        )
    finally:
        with contextlib.suppress(Exception):
            await claims.close()
    results = [
        r
        if isinstance(r, ScopeResult)
        else ScopeResult(s, "failed", error=redact(f"{type(r).__name__}: {r}", secrets))
        for s, r in zip(scopes, outcomes, strict=True)
    ]
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
        await settle_abandoned_runs(pool)
        if scopes is None:
            scopes = await pending_scopes(pool, params, window)
            if params.scope is None and (runtime.flow_run.run_count or 1) <= 1:
                held = await find_held_back(pool)
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
