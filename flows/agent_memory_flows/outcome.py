"""How a consolidation-type run ends: Completed with its summary, or Failed when a scope
failed, so that the Prefect UI shows it red and, for a deployment's run, its Retry (or `prefect
flow-run retry`) runs it again (a run without a deployment: `agent-memory jobs retry --run ID`);
and how callers in Python get the summary either way."""

from __future__ import annotations

from typing import Any, cast

from prefect.states import Failed
from pydantic import BaseModel

from agent_memory.consolidation import RunSummary
from agent_memory.errors import ScopesFailedError


def outcome(summary: RunSummary) -> Any:
    """The flow's return value: the summary, or a Failed state carrying it."""
    if not summary["failed"]:
        return summary
    message = (
        f"{summary['failed']} of {summary['scopes']} scope(s) failed; their episodes stay "
        "pending (see the run's artifacts and `agent-memory jobs list --status failed`)"
    )
    return Failed(message=message, data=ScopesFailedError(message, summary))


async def run_for_summary(flow: Any, params: BaseModel) -> RunSummary:
    """Run ``flow(params)`` in this process and return its summary, whether or not some
    scopes failed; any other failure is raised."""
    state = await flow(params, return_state=True)
    result = await state.result(raise_on_failure=False)
    if isinstance(result, ScopesFailedError):
        return cast(RunSummary, result.summary)
    if isinstance(result, BaseException):
        raise result
    return cast(RunSummary, result)
