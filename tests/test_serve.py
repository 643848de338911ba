"""`agent-memory serve` against a real Prefect server: both deployments registered with their
schedules and limits, and a triggered consolidation run completes through the served runner."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from deployments.schedules import SCHEDULES

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api(base: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One Prefect API call; a busy server's 503 (its SQLite is locked) is retried."""
    request = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    for attempt in range(30):
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or attempt == 29:
                raise
            time.sleep(1)


def wait_for(what: str, check: Any, timeout: float, proc: subprocess.Popen[str]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited ({proc.returncode}) while waiting for {what}")
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        DATABASE_URL=database_url,
        PREFECT_HOME=str(tmp_path / "prefect"),
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_memory.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield f"http://127.0.0.1:{port}/api", proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_serve_registers_schedules_and_runs_a_triggered_consolidation(
    served: tuple[str, subprocess.Popen[str]], db: psycopg.Connection[Any]
) -> None:
    base, proc = served
    db.execute(
        "INSERT INTO agent_memory.episodes (user_id, messages, message_count) VALUES "
        '(\'served\', \'[{"role": "user", "content": "I prefer short answers."}]\', 1)'
    )

    def deployments() -> dict[str, Any] | None:
        found = {d["name"]: d for d in api(base, "/deployments/filter", {})}
        return found if len(found) >= len(SCHEDULES) else None

    by_name = wait_for("deployments", deployments, 240, proc)
    for schedule in SCHEDULES:
        d = by_name[schedule.name]
        assert [s["schedule"]["cron"] for s in d["schedules"]] == [schedule.cron]
        assert d["parameters"] == schedule.parameters
        assert d["global_concurrency_limit"]["limit"] == 1

    consolidation = by_name["memory-consolidation-hourly"]
    run = api(base, f"/deployments/{consolidation['id']}/create_flow_run", {})

    def finished() -> dict[str, Any] | None:
        state = api(base, f"/flow_runs/{run['id']}")["state"]
        return state if state and state["type"] in ("COMPLETED", "FAILED", "CRASHED") else None

    state = wait_for("the flow run", finished, 240, proc)
    assert state["type"] == "COMPLETED", state
    job = db.execute(
        "SELECT status, flow_run_id, episodes_processed FROM agent_memory.consolidation_jobs"
    ).fetchone()
    assert job == ("completed", run["id"], 1)
    wanted = {"load [user=served]", "extract [user=served]", "write [user=served]"}

    def named() -> bool:  # the server records task runs from events, a moment after they ran
        runs = api(base, "/task_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})
        return wanted <= {t["name"] for t in runs}

    wait_for("task runs named by scope", named, 60, proc)
