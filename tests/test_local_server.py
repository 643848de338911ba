"""The local Prefect server the command line starts in the background when no PREFECT_API_URL
is set: stopped when idle, and a start that fails is one line saying what to do. Started once,
reused by the next command and stopped on request is the demo's test (tests/test_cli.py), which
starts it as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_memory.errors import PrefectServerError
from agent_memory.settings import PrefectSettings
from agent_memory_deployments import local_server
from agent_memory_flows.prefect_server import free_port
from tests.prefect_api import wait_for
from tests.processes import ROOT, run_interpreter

pytestmark = pytest.mark.system


@pytest.mark.slow
def test_an_idle_server_stops_by_itself(tmp_path: Path) -> None:
    home = tmp_path / "prefect"
    home.mkdir()
    keeper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_memory_deployments.local_server",
            "keep",
            "--port",
            str(free_port()),
            "--idle",
            "1",
            "--timeout",
            "180",
        ],
        cwd=ROOT,
        env={**os.environ, "PREFECT_HOME": str(home)},
    )
    try:
        server = wait_for("the server started", lambda: local_server.read_state(home), 120, keeper)
        keeper.wait(timeout=120)  # nobody touched it: idle, it stops
        assert keeper.returncode == 0
        assert not local_server.healthy(server.api_url)
    finally:
        if keeper.poll() is None:
            keeper.kill()


def test_a_server_that_cannot_start_is_one_line_saying_what_to_do(
    tmp_path: Path, database_url: str
) -> None:
    with pytest.raises(PrefectServerError, match="could not start a local Prefect server"):
        local_server.ensure(PrefectSettings(port=free_port(), start_timeout_s=0.05), tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(
        DATABASE_URL=database_url,
        PREFECT_HOME=str(tmp_path / "cli"),
        AGENT_MEMORY_PREFECT_START_TIMEOUT_S="0.05",
        AGENT_MEMORY_PREFECT_PORT=str(free_port()),
    )
    result = run_interpreter(["-m", "agent_memory_deployments.cli", "consolidate"], env)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = [x for x in result.stderr.splitlines() if x.strip()]
    assert line.startswith("error: could not start a local Prefect server on port ")
    assert "set PREFECT_API_URL=" in line and "AGENT_MEMORY_PREFECT_START_TIMEOUT_S" in line
    assert local_server.read_state(tmp_path / "cli") is None  # nothing left running


def _server_status(env_update: dict[str, str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "AGENT_"))}
    env.update(PREFECT_HOME=str(home), **env_update)
    return run_interpreter(["-m", "agent_memory_deployments.cli", "server", "status"], env)


@pytest.mark.usefixtures("prefect_harness")
def test_server_status_reports_the_server_prefect_api_url_names(tmp_path: Path) -> None:
    """With PREFECT_API_URL set the commands start no server: status reports that one (a real
    Prefect server here), whether it answers, and its UI, instead of "no server runs"."""
    from prefect.settings import PREFECT_API_URL

    api_url = str(PREFECT_API_URL.value()).rstrip("/")
    result = _server_status({"PREFECT_API_URL": api_url}, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    ui = api_url.removesuffix("/api")
    assert result.stdout.strip() == (
        f"Prefect server (PREFECT_API_URL): {api_url}, UI {ui} (answers)"
    )
    # one that does not answer is named as such, and the command says so by its exit code
    dead = f"http://127.0.0.1:{free_port()}/api"
    result = _server_status({"PREFECT_API_URL": dead}, tmp_path)
    assert result.returncode == 1
    assert result.stdout.strip() == (
        f"Prefect server (PREFECT_API_URL): {dead}, UI {dead.removesuffix('/api')} (not answering)"
    )
    # none configured and none in the background: as before
    result = _server_status({}, tmp_path)
    assert result.returncode == 1 and "no background Prefect server runs" in result.stdout
