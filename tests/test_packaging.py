"""The wheel as a user installs it: built from this checkout, installed into a fresh virtual
environment, and run from a project holding a ``tasks.py``, a ``flows/`` and a ``deployments/``
of its own (invoke's, Celery's and Prefect's own conventions), which must not shadow ours."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_memory.private import TELEMETRY_OFF
from agent_memory_deployments.schedules import CONSOLIDATION, SCHEDULES
from agent_memory_flows.prefect_server import PrefectServer, start_prefect_server
from tests.prefect_api import api
from tests.processes import ROOT
from tests.test_work_pool import record, wait_final

pytestmark = [pytest.mark.system, pytest.mark.slow]

PACKAGES = {"agent_memory", "agent_memory_flows", "agent_memory_tasks", "agent_memory_deployments"}
SHADOW = "raise RuntimeError('the project\\'s own {name} was imported')\n"


def run(args: list[Any], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=300, **kwargs
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    run([*pip, "--wheel-dir", out, ROOT])
    (built,) = out.glob("agent_memory-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with the wheel installed; the dependencies are this
    environment's (installing them from the registry takes minutes), the package only the
    wheel's."""
    venv = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", wheel])
    (site,) = venv.glob("lib/python*/site-packages")
    # after the install, so that pip saw an empty environment; a plain path in a .pth file
    # does not run that folder's own .pth files (this checkout's editable install)
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project whose own modules crash when imported."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "tasks.py").write_text(SHADOW.format(name="tasks.py"))
    for folder in ("flows", "deployments"):
        (project / folder).mkdir()
        (project / folder / "__init__.py").write_text(SHADOW.format(name=f"{folder}/"))
    (project / "flows" / "consolidation.py").write_text(SHADOW.format(name="flows/"))
    return project


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrefectServer]:
    with start_prefect_server(home=tmp_path / "prefect") as running:
        yield running


def test_the_wheel_holds_only_agent_memory_names_and_its_types_and_license(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops - {n for n in tops if n.endswith(".dist-info")} == PACKAGES
    assert {f"{package}/py.typed" for package in PACKAGES} <= set(names)
    assert "agent_memory/sql/0001_init.sql" in names
    assert "agent_memory_deployments/prefect.yaml" in names
    assert any(name.endswith("licenses/LICENSE") for name in names)


def test_consolidate_and_a_deployment_run_from_a_project_with_its_own_tasks_and_flows(
    venv: Path,
    project: Path,
    server: PrefectServer,
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AGENT_MEMORY"))}
    env.update(
        # the project's folder on the path, as `python -m`, notebooks and workers' runs have it
        PYTHONPATH=str(project),
        PREFECT_API_URL=server.api_url,
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        **TELEMETRY_OFF,
        PREFECT_WORKER_QUERY_SECONDS="1",
        DATABASE_URL=database_url,
    )
    python = venv / "bin" / "python"
    where = run(
        [python, "-c", "import agent_memory_flows.consolidation as m; print(m.__file__)"],
        cwd=project,
        env=env,
    )
    assert where.stdout.strip().startswith(str(venv))  # the wheel's, not this checkout's

    record(db, ("wheel-a",))
    done = run([venv / "bin" / "agent-memory", "consolidate"], cwd=project, env=env)
    assert "1 scope(s)" in done.stdout + done.stderr
    jobs = db.execute("SELECT user_id, status FROM agent_memory.consolidation_jobs").fetchall()
    assert jobs == [("wheel-a", "completed")]

    # the shipped prefect.yaml, deployed from the project and run by a worker there
    (site,) = venv.glob("lib/python*/site-packages")
    prefect = [python, "-m", "prefect"]
    run([*prefect, "work-pool", "create", "agent-memory", "--type", "process"], env=env)
    yaml_file = site / "agent_memory_deployments" / "prefect.yaml"
    deploy = [*prefect, "--no-prompt", "deploy", "--all", "--prefect-file", yaml_file]
    run(deploy, cwd=project, env=env)
    deployments = {d["name"]: d for d in api(server.api_url, "/deployments/filter", {})}
    assert set(deployments) == {s.name for s in SCHEDULES}
    for deployment in deployments.values():  # only the run created below may run
        api(server.api_url, f"/deployments/{deployment['id']}/pause_deployment", {})
    consolidation = deployments[CONSOLIDATION.name]
    assert consolidation["entrypoint"] == CONSOLIDATION.entrypoint
    assert not consolidation["pull_steps"]  # nothing to fetch: the package is installed

    record(db, ("wheel-b",))
    flow_run = api(server.api_url, f"/deployments/{consolidation['id']}/create_flow_run", {})
    worker = subprocess.Popen(
        [str(a) for a in (*prefect, "worker", "start", "--pool", "agent-memory")],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        state = wait_final(server.api_url, flow_run["id"], worker)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert state["type"] == "COMPLETED", state
    jobs = db.execute(
        "SELECT user_id, status, flow_run_id FROM agent_memory.consolidation_jobs"
        " WHERE user_id = 'wheel-b'"
    ).fetchall()
    assert jobs == [("wheel-b", "completed", flow_run["id"])]
