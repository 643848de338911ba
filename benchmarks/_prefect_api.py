"""What the consolidation benchmark (benchmarks/consolidation.py) asks of its Prefect server:
its REST API (task runs of a flow run, waiting until it has recorded them), the trouble its log
reports, and running a measurement once the server is quiet."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
SERVER_TROUBLE = ("Subscription queue is full", "503", "Service Unavailable", "database is locked")


def api(api_url: str, path: str, body: dict[str, Any], timeout: float = 60) -> Any:
    """POST ``body`` as JSON to ``path`` of the server's API; the JSON it answers."""
    request = urllib.request.Request(
        f"{api_url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def task_runs_of(api_url: str, run_id: str) -> list[dict[str, Any]]:
    """Every task run the server recorded for the flow run (it answers 200 at a time)."""
    runs: list[dict[str, Any]] = []
    while True:
        page = api(
            api_url,
            "/task_runs/filter",
            {"flow_runs": {"id": {"any_": [run_id]}}, "limit": 200, "offset": len(runs)},
        )
        runs += page
        if len(page) < 200:
            return runs


def server_trouble(log: str) -> dict[str, int]:
    """How often the server's log says it dropped events or turned requests away."""
    return {needle: log.count(needle) for needle in SERVER_TROUBLE}


def wait_until_quiet(api_url: str, timeout_s: float = 300) -> None:
    """Wait until Prefect's server has recorded the last section's task runs (their count stops
    growing): a server still digesting thousands of events answers 503."""
    last, deadline = -1, time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            count = int(api(api_url, "/task_runs/count", {}, timeout=30))
        except OSError:
            count = -2
        if count == last:
            return
        last = count
        time.sleep(3)


def section(result: dict[str, Any], name: str, measure: Any, api_url: str) -> None:
    """Run one measurement once the server is quiet; a failure is reported in its place
    instead of losing the other figures. Prefect's server on SQLite answers 503 while it is
    still writing the last section's events, past the client's own retries: such a
    measurement is run once more when the server is quiet again, and says so ("attempts")."""
    for attempt in (1, 2):
        wait_until_quiet(api_url)
        try:
            figures = measure()
        except Exception as exc:  # reported in the output, not hidden
            error = f"{type(exc).__name__}: {exc}"[:500]
            if attempt == 1 and "503 Service Unavailable" in error:
                continue
            result[name] = {"error": error, "attempts": attempt}
            return
        result[name] = {**figures, "attempts": attempt} if attempt > 1 else figures
        return
