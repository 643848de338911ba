"""`agent-memory serve` against a real Prefect server: both deployments registered with their
schedules and limits, and a triggered consolidation run completes through the served runner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_memory import Scope
from agent_memory.db import scope_keys
from agent_memory.errors import PrefectServerError
from agent_memory.private import TELEMETRY_OFF
from agent_memory.pseudonyms import scope_key
from agent_memory_deployments.schedules import SCHEDULES
from agent_memory_flows.prefect_server import free_port, prefect_database_url
from tests.prefect_api import api, wait_for

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        DATABASE_URL=database_url,
        PREFECT_HOME=str(tmp_path / "prefect"),
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        **TELEMETRY_OFF,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_memory_deployments.cli", "serve", "--port", str(port)],
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
    # the scope by its pseudonymous key: Prefect is never told user ids
    key = scope_key(scope_keys.secret(db), Scope(user_id="served"))
    wanted = {f"load [{key}]", f"extract [{key}]", f"write [{key}]"}

    def named() -> bool:  # the server records task runs from events, a moment after they ran
        runs = api(base, "/task_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})
        return wanted <= {t["name"] for t in runs}

    wait_for("task runs named by scope", named, 60, proc)


def test_a_prefect_server_that_cannot_start_is_named(tmp_path: Path) -> None:
    from agent_memory.errors import PrefectServerError
    from agent_memory_flows.prefect_server import start_prefect_server

    with pytest.raises(PrefectServerError, match=r"256\.0\.0\.1:\d+ exited with \d+; see .*\.log"):
        start_prefect_server("256.0.0.1", free_port(), home=tmp_path / "prefect", timeout=120)


def test_prefect_server_database_must_be_postgresql() -> None:
    assert prefect_database_url("postgres://u@h:5/prefect") == "postgresql+asyncpg://u@h:5/prefect"
    assert prefect_database_url("postgresql+asyncpg://h/p") == "postgresql+asyncpg://h/p"
    with pytest.raises(PrefectServerError, match="'sqlite'"):
        prefect_database_url("sqlite:///prefect.db")
    with pytest.raises(PrefectServerError, match=r"'prefect\.db'"):
        prefect_database_url("prefect.db")
