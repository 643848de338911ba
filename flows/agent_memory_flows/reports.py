"""What a consolidation run tells operators: its summary as table artifacts (a narrow one to
read first, every figure in a second), a failures artifact saying how to retry, and a Prefect
event per failed scope for automations."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.events import emit_event

from agent_memory.consolidation import RunSummary, ScopeResult, run_summary
from agent_memory.db.failures import HeldBack

SUMMARY_KEY = "memory-consolidation-summary"

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


async def publish(
    results: list[ScopeResult],
    extractor_name: str,
    summary_key: str = SUMMARY_KEY,
    held: HeldBack | None = None,
) -> RunSummary:
    """The run's summary: its table artifact, a failures artifact and an event per failed
    scope. ``held``: the scopes with pending episodes the run left for later."""
    logger = get_run_logger()
    summary = run_summary(results, extractor_name, held.note() if held is not None else None)
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
