"""deployments/prefect.yaml as a team deploys it: a real `prefect server start`, a process work
pool, `prefect deploy --all`, a worker; a triggered consolidation run completes with a task
run per step and scope and its summary artifact, all checked through the Prefect API."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from agent_memory import Scope
from agent_memory.consolidation.groups import ScopeGroup
from agent_memory.db import scope_keys
from agent_memory.private import TELEMETRY_OFF
from agent_memory.pseudonyms import namer
from agent_memory_deployments.schedules import CONSOLIDATION, SCHEDULES
from agent_memory_flows.prefect_server import PrefectServer, start_prefect_server
from tests.fake_llm import FakeLLM, Reply, facts_answer
from tests.prefect_api import api, wait_for
from tests.system_postgres import system_bindir, system_postgres

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent
PREFECT = str(Path(sys.executable).with_name("prefect"))
USERS = ("pool-a", "pool-b", "pool-c")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """One server for the module's tests on a worker (a loaded machine takes 15-20 s to start
    one): each test deploys anew and follows only the runs it creates, so none sees another's
    work."""
    with start_prefect_server(home=tmp_path_factory.mktemp("prefect")) as running:
        yield running


def prefect_env(server: PrefectServer, database_url: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_API_URL=server.api_url,
        PREFECT_HOME=str(tmp_path / "prefect"),
        **TELEMETRY_OFF,
        PREFECT_WORKER_QUERY_SECONDS="1",
        DATABASE_URL=database_url,
    )
    return env


def prefect(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def deploy(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Create the work pool and deploy prefect.yaml as its instructions say; the deployments."""
    # --overwrite: the module's server keeps the pool an earlier test created
    prefect(env, "work-pool", "create", "agent-memory", "--type", "process", "--overwrite")
    prefect(env, "--no-prompt", "deploy", "--all", "--prefect-file", "deployments/prefect.yaml")
    deployments = {d["name"]: d for d in api(env["PREFECT_API_URL"], "/deployments/filter", {})}
    # only the runs a test creates may run: the schedules' own (the hourly consolidation at
    # minute 0) would race them whenever a test runs across the hour, taking their scopes
    for deployment in deployments.values():
        api(env["PREFECT_API_URL"], f"/deployments/{deployment['id']}/pause_deployment", {})
    return deployments


@contextlib.contextmanager
def workers(env: dict[str, str], cwd: Path, count: int = 1) -> Iterator[list[Any]]:
    """``prefect worker start`` processes on the pool, stopped on leaving."""
    started = [
        subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", "agent-memory"],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield started
    finally:
        for worker in started:
            worker.terminate()
            worker.wait(timeout=60)


def record(db: psycopg.Connection[Any], users: tuple[str, ...]) -> None:
    for user in users:
        db.execute(
            "INSERT INTO agent_memory.episodes (user_id, messages, message_count)"
            " VALUES (%s, %s, 1)",
            (user, Jsonb([{"role": "user", "content": f"I prefer tools made by {user}."}])),
        )


def wait_final(base: str, run_id: str, worker: subprocess.Popen[bytes]) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        state = api(base, f"/flow_runs/{run_id}")["state"]
        final = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
        return state if state and state["type"] in final else None

    state: dict[str, Any] = wait_for("the flow run on the worker", finished, 300, worker)
    return state


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_prefect_yaml_deployments_run_on_a_process_work_pool(
    server: PrefectServer, database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # the UI served on this port reads from this port's API (Prefect's default is 4200)
    with urllib.request.urlopen(f"{server.url}/ui-settings") as response:
        assert json.load(response)["api_url"] == server.api_url
    env = prefect_env(server, database_url, tmp_path)
    deployments = deploy(env)
    assert set(deployments) == {s.name for s in SCHEDULES}
    assert deployments[CONSOLIDATION.name]["work_pool_name"] == "agent-memory"
    record(db, USERS)
    base = server.api_url
    with workers(env, tmp_path) as (worker,):
        run = api(base, f"/deployments/{deployments[CONSOLIDATION.name]['id']}/create_flow_run", {})
        state = wait_final(base, run["id"], worker)
        assert state["type"] == "COMPLETED", state

    jobs = db.execute(
        "SELECT user_id, status, flow_run_id FROM agent_memory.consolidation_jobs ORDER BY user_id"
    ).fetchall()
    assert jobs == [(u, "completed", run["id"]) for u in USERS]
    # the three scopes are one group: a task run per step for the three
    # (named by the scopes' keys: Prefect is never told user ids)
    key = namer(scope_keys.secret(db))
    group = ScopeGroup.of([Scope(user_id=u) for u in USERS], key).label
    wanted = {f"{step} [{group}]" for step in ("load", "extract", "write")}

    def task_runs() -> set[str] | None:  # recorded from events, a moment after they ran
        names = {
            t["name"]
            for t in api(base, "/task_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})
        }
        return names if wanted <= names else None

    wait_for("a task run per step and group", task_runs, 60)
    artifacts = api(
        base,
        "/artifacts/filter",
        {
            "artifacts": {"key": {"any_": ["memory-consolidation-summary"]}},
            "flow_runs": {"id": {"any_": [run["id"]]}},
        },
    )
    assert len(artifacts) == 1 and artifacts[0]["type"] == "table"
    rows = artifacts[0]["data"]
    rows = rows if isinstance(rows, list) else json.loads(rows)
    assert sorted(r["scope"] for r in rows) == sorted(key(Scope(user_id=u)) for u in USERS)
    assert {r["outcome"] for r in rows} == {"completed"}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_failed_run_retried_from_prefect_completes_without_duplicates(
    server: PrefectServer,
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    fake_llm: FakeLLM,
) -> None:
    broken = {"pool-b"}

    def handler(request: dict[str, Any]) -> Reply:
        if any(user in json.dumps(request["messages"]) for user in broken):
            return Reply("no JSON here")  # a permanent failure: the scope fails
        return facts_answer(request)

    fake_llm.reset(handler)
    env = prefect_env(server, database_url, tmp_path)
    env.update(
        AGENT_MEMORY_LLM_MODEL="openai/test-model",
        AGENT_MEMORY_LLM_API_BASE=fake_llm.api_base,
        AGENT_MEMORY_LLM_API_KEY="sk-test",
        AGENT_MEMORY_JOB_BACKOFF_S="3600",  # a scheduled run would leave the failed scope be
    )
    deployments = deploy(env)
    record(db, USERS)
    base = server.api_url
    with workers(env, tmp_path) as (worker,):
        run = api(base, f"/deployments/{deployments[CONSOLIDATION.name]['id']}/create_flow_run", {})
        state = wait_final(base, run["id"], worker)
        assert state["type"] == "FAILED", state  # red in the UI: a scope failed
        assert "1 of 3 scope(s) failed" in state["message"]
        # a deployment's run: its failures artifact offers Prefect's Retry, which works here
        [failures] = api(
            base,
            "/artifacts/filter",
            {
                "artifacts": {
                    "key": {"any_": ["memory-consolidation-failures"]},
                    "flow_run_id": {"any_": [run["id"]]},
                }
            },
        )
        assert "Prefect's **Retry** on this run" in failures["data"]
        calls_before = fake_llm.calls
        broken.clear()  # the operator fixes the cause, then presses Retry
        prefect(env, "flow-run", "retry", run["id"])
        state = wait_final(base, run["id"], worker)
        assert state["type"] == "COMPLETED", state

    # the retry did only the failed scope's work, within its backoff (an explicit retry)
    assert fake_llm.calls == calls_before + 1
    jobs = db.execute(
        "SELECT user_id, status FROM agent_memory.consolidation_jobs ORDER BY id"
    ).fetchall()
    assert sorted(j for j in jobs if j[1] == "completed") == [(u, "completed") for u in USERS]
    assert [j for j in jobs if j[1] != "completed"] == [("pool-b", "failed")]
    facts = db.execute(
        "SELECT user_id, content FROM agent_memory.memory_items ORDER BY user_id"
    ).fetchall()
    assert facts == [(u, f"User said I prefer tools made by {u}.") for u in USERS]
    assert db.execute(
        "SELECT count(*) FROM agent_memory.episodes WHERE NOT consolidated"
    ).fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM agent_memory.scope_retries").fetchone() == (0,)


def run_two_shards_on_two_workers(
    server: PrefectServer, database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> list[str]:
    """Shard 1/2 and 2/2 of the consolidation deployment on two workers: every scope is
    consolidated once, by one run or the other. The flow runs' ids."""
    env = prefect_env(server, database_url, tmp_path)
    deployments = deploy(env)
    users = tuple(f"shard-user-{i}" for i in range(12))
    record(db, users)
    base = server.api_url
    consolidation = deployments[CONSOLIDATION.name]
    with workers(env, tmp_path, 2) as pair:
        runs = [
            api(
                base,
                f"/deployments/{consolidation['id']}/create_flow_run",
                {
                    "parameters": {
                        "params": {
                            **consolidation["parameters"]["params"],
                            "shard": shard,
                            "shard_count": 2,
                        }
                    }
                },
            )
            for shard in range(2)
        ]
        states = [wait_final(base, run["id"], pair[0]) for run in runs]
        assert [s["type"] for s in states] == ["COMPLETED", "COMPLETED"], states
    jobs = db.execute(
        "SELECT user_id, status, flow_run_id FROM agent_memory.consolidation_jobs"
    ).fetchall()
    # every scope once, by one of the two runs; each run had its own share
    assert sorted(j[0] for j in jobs) == sorted(users)
    assert {j[1] for j in jobs} == {"completed"}
    by_run = {run["id"]: {j[0] for j in jobs if j[2] == run["id"]} for run in runs}
    assert all(by_run.values()) and sum(map(len, by_run.values())) == len(users)
    names = {api(base, f"/flow_runs/{run['id']}")["name"] for run in runs}
    assert names == {"consolidate [all scopes, shard 1/2]", "consolidate [all scopes, shard 2/2]"}
    return [run["id"] for run in runs]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_workers_run_sharded_consolidations_without_duplicate_work(
    server: PrefectServer, database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    run_two_shards_on_two_workers(server, database_url, db, tmp_path)


@pytest.fixture
def prefect_database() -> Iterator[str]:
    """A database for Prefect's own state on the system's PostgreSQL (it needs pg_trgm)."""
    bindir = system_bindir()
    if bindir is None:
        pytest.skip(
            "Prefect's server on PostgreSQL needs a PostgreSQL with pg_trgm, which the embedded"
            " one lacks: install Debian's postgresql package (.ci/run does)"
        )
    with system_postgres(bindir) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE prefect")
        yield url.rsplit("/", 1)[0] + "/prefect"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_prefect_server_on_postgresql_serves_sharded_workers(
    prefect_database: str, database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    home = tmp_path / "prefect"
    with (
        start_prefect_server(home=home, database_url=prefect_database) as server,
        psycopg.connect(prefect_database, autocommit=True) as prefect_db,
    ):
        run_ids = run_two_shards_on_two_workers(server, database_url, db, tmp_path)
        # the runs and their task runs live in PostgreSQL, not in a SQLite file
        rows = prefect_db.execute(
            "SELECT id::text, state_type::text FROM flow_run WHERE id = ANY(%s::uuid[])",
            (run_ids,),
        ).fetchall()
        assert sorted(rows) == sorted((run_id, "COMPLETED") for run_id in run_ids)

        def task_runs() -> int | None:  # recorded from events, a moment after they ran
            row = prefect_db.execute(
                "SELECT count(*) FROM task_run WHERE flow_run_id = ANY(%s::uuid[])"
                " AND name ~ '^(load|extract|write) \\['",
                (run_ids,),
            ).fetchone()
            return row[0] if row and row[0] >= 2 * 3 else None  # each shard: one per step

        wait_for("the task runs in Prefect's PostgreSQL", task_runs, 60)
    assert not list(home.glob("*.db"))
