"""What a consolidation run tells operators: its summary as table artifacts (a narrow one to
read first, every figure in a second), a failures artifact saying how to retry, and a Prefect
event per failed scope for automations.

Prefect keeps all of it in its own database, which erasing a scope does not reach: a scope is
named by its pseudonymous key and an error by its class, size and hash
(:mod:`agent_memory.pseudonyms`); the whole error is in the job row (``agent-memory jobs
list``), and ``agent-memory scopes reveal KEY`` says whose a key is."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, runtime
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.events import emit_event

from agent_memory.consolidation import RunSummary, ScopeResult, run_summary
from agent_memory.db.failures import HeldBack
from agent_memory.pseudonyms import Namer, by_label, summarise

SUMMARY_KEY = "memory-consolidation-summary"
FAILURES_KEY = "memory-consolidation-failures"

_SHORT_ERROR = 80  # characters of the error in the narrow summary table


def _told(result: ScopeResult, name: Namer) -> dict[str, Any]:
    """A scope's summary row as Prefect is told it: the scope by ``name``, the error
    summarised."""
    return {
        **result.row(),
        "scope": name(result.scope),
        "error": summarise(result.error) if result.error else "",
    }


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


async def publish(
    results: list[ScopeResult],
    extractor_name: str,
    summary_key: str = SUMMARY_KEY,
    held: HeldBack | None = None,
    name: Namer = by_label,
) -> RunSummary:
    """The run's summary (returned whole, to the caller in this process) and what Prefect is
    told of it: its table artifact, a failures artifact and an event per failed scope, each
    scope called by ``name``. ``held``: the scopes with pending episodes the run left for
    later."""
    logger = get_run_logger()
    summary = run_summary(results, extractor_name, held.note() if held is not None else None)
    rows = [_told(r, name) for r in results]
    cost = summary["cost_usd"]
    spent = f", ${cost:.4f}" if cost is not None else ""
    await acreate_table_artifact(
        # narrow enough to read without scrolling; every column is in the details artifact
        table=[_narrow(r) for r in rows] or [{"scope": "-", "outcome": "nothing pending"}],
        key=summary_key,
        description=(
            f"{summary['scopes']} scope(s): {summary['completed']} completed, "
            f"{summary['skipped']} skipped, {summary['failed']} failed, {summary['busy']} busy; "
            f"{summary['facts_created']} new fact(s), extractor {extractor_name}; "
            f"{summary['llm_calls']} LLM call(s){spent}"
            + (f". {summary['held_back']}" if summary["held_back"] else "")
        ),
    )
    if rows:
        await acreate_table_artifact(
            table=rows,
            key=f"{summary_key}-details",
            description="every figure of each scope: batches, facts by kind of change, "
            "tokens, cost and the error (said by class, size and hash: the whole error is in "
            "the job row, `agent-memory jobs list`)",
        )
    if summary["failed"]:
        await acreate_markdown_artifact(
            markdown=failures_markdown(
                rows, str(runtime.flow_run.id), runtime.deployment.id is not None
            ),
            key=FAILURES_KEY,
        )
        logger.error(
            "%d scope(s) failed; see the job rows and the run's artifacts", summary["failed"]
        )
    for result in results:
        if result.outcome == "failed":
            emit_failure(result, name)
    return summary


def failures_markdown(rows: list[dict[str, Any]], run_id: str, from_deployment: bool) -> str:
    """The failures artifact: the failed scopes, and the ways to retry them that work for this
    run. Prefect's Retry reruns a run only through its deployment (a worker or ``serve`` picks
    it up again); a run started from the command line or from Python has none, and Prefect's
    Retry (the UI offers none; ``prefect flow-run retry`` leaves it Scheduled, then Late) does
    not run it: ``agent-memory jobs retry --run ID`` does."""
    failed = [r for r in rows if r["outcome"] == "failed"]
    listed = "\n".join(f"- `{r['scope']}` (job {r['job']}): {r['error']}" for r in failed)
    jobs = " ".join(f"--job {r['job']}" for r in failed if r["job"] is not None)
    if from_deployment:
        how = (
            "Prefect's **Retry** on this run (or `prefect flow-run retry " + run_id + "`) "
            "redoes only its failed scopes, at once, when the deployment's worker or "
            "`agent-memory serve` is running; or, from a shell with the same settings:"
        )
    else:
        how = (
            "This run has no deployment (it was started from the command line or from "
            "Python), so Prefect's Retry cannot run it again. From a shell with the same "
            "settings, this redoes only its failed scopes, in a new run linked to this one:"
        )
    return (
        "## Failed scopes\n\nTheir episodes stay pending for the next run.\n\n"
        + listed
        + "\n\n## To retry them now\n\n"
        + how
        + f"\n\n```\nagent-memory jobs retry --run {run_id}\n```\n\n"
        + (f"or, by their jobs: `agent-memory jobs retry {jobs}`. " if jobs else "")
        + "A scope that fails again waits a doubling backoff, and after "
        + "`AGENT_MEMORY_JOB_ATTEMPTS` failures in a row is parked until retried so."
    )


FAILED_EVENT = "memory.consolidation.failed"
PARKED_EVENT = "memory.consolidation.parked"


def emit_failure(result: ScopeResult, name: Namer = by_label) -> None:
    """A Prefect event for a failed scope (``.parked`` once it has failed too often), for
    automations to react to; see docs/operations.md. The resource is the scope's key
    (``agent-memory.scope.scope-1f2e...``); the error is said by class, size and hash."""
    key = name(result.scope)
    emit_event(
        event=PARKED_EVENT if result.parked else FAILED_EVENT,
        resource={
            "prefect.resource.id": f"agent-memory.scope.{key.replace(' ', ',')}",
            "prefect.resource.name": key,
        },
        payload={
            "job_id": result.job_id,
            "error": summarise(result.error) if result.error else None,
            "failures": result.failures,
            "parked": result.parked,
            "scope_key": key,
        },
    )
