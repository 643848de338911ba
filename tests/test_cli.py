"""The command line: the demo as a user runs it, and the operator commands."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from agent_memory.db.migrations import load_migrations
from agent_memory_deployments.cli import app
from agent_memory_flows.prefect_server import free_port
from tests.processes import run_interpreter

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)  # tables are not wrapped at 80 columns
    return database_url


@pytest.mark.slow
def test_demo_passes_every_step_on_the_embedded_default(tmp_path: Path) -> None:
    """As a user runs it: no DATABASE_URL (embedded PostgreSQL), no PREFECT_API_URL (a local
    server started in the background)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PREFECT_API", "DATABASE_URL", "AGENT_MEMORY_"))
    }
    env.update(
        AGENT_MEMORY_DB_DATA_DIR=str(tmp_path / "pgdata"),
        PREFECT_HOME=str(tmp_path / "prefect"),
        # a port of its own: a server already on the default one would be reused instead
        AGENT_MEMORY_PREFECT_PORT=str(free_port()),
    )
    result = run_interpreter(["-m", "agent_memory_deployments.cli", "demo"], env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("✓ OK") == 8
    assert "FAIL" not in result.stdout
    assert "Injected facts: 0 (first turn, empty)" in result.stdout
    # turn 2 shows the three tiers
    assert "In-context: 2 earlier messages of the thread, from the checkpointer" in result.stdout
    assert "Semantic: 4 facts from turn 1, ranked by relevance to the question" in result.stdout
    assert "Episodic: 1 earlier conversation(s)" in result.stdout
    assert 'User said "I\'m a Python developer working on SAP integrations."' in result.stdout
    assert "Traceback" not in result.stderr
    assert "database: embedded PostgreSQL" in result.stdout
    assert (tmp_path / "pgdata" / "PG_VERSION").exists()
    # the demo started a Prefect server in the background; the next command reuses it
    from agent_memory_deployments import local_server

    home = tmp_path / "prefect"
    try:
        server = local_server.read_state(home)
        assert server is not None and local_server.healthy(server.api_url)
        again = run_interpreter(
            ["-m", "agent_memory_deployments.cli", "consolidate"], env, timeout=300
        )
        assert again.returncode == 0, again.stdout + again.stderr
        assert local_server.read_state(home) == server  # reused: the same keeper
    finally:
        stopped = local_server.stop(home)
    # stopped on request: the keeper it named is gone, and so is its state
    assert stopped == server
    assert not local_server.healthy(server.api_url)
    assert local_server.read_state(home) is None and not (home / local_server.STATE).exists()


def test_migrate_is_idempotent(cli_env: str) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["migrate"])
    assert result.exit_code == 0, result.output
    assert "nothing (up to date)" in result.output
    assert f"schema version: {len(load_migrations())}" in result.output


@pytest.mark.usefixtures("prefect_harness")
def test_consolidate_decay_and_stats(cli_env: str, db: psycopg.Connection[Any]) -> None:
    db.execute(
        "INSERT INTO agent_memory.episodes (user_id, messages, message_count) VALUES "
        '(\'cli\', \'[{"role": "user", "content": "I prefer green tea."}]\', 1)'
    )
    runner = CliRunner()
    result = runner.invoke(app, ["consolidate"])
    assert result.exit_code == 0, result.output
    assert "1 completed" in result.output and "1 new fact(s)" in result.output
    result = runner.invoke(app, ["stats"])
    assert result.exit_code == 0, result.output
    assert "0 pending, 1 consolidated" in result.output and "1 completed" in result.output
    result = runner.invoke(app, ["decay", "--user", "cli", "--as-of", "2999-01-01"])
    assert result.exit_code == 0, result.output
    assert "purged 1" in result.output
    assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (0,)


def test_bad_input_is_a_clear_error_not_a_traceback(cli_env: str) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["stats", "--user", "x" * 300])
    assert result.exit_code == 2
    assert "user_id is 300 characters long" in result.output
    result = runner.invoke(app, ["decay", "--user", "", "--as-of", "2999-01-01"])
    assert result.exit_code == 2  # an empty id is an error, not "all scopes"
    assert "user_id is an empty string" in result.output
    result = runner.invoke(app, ["decay", "--as-of", "yesterday"])
    assert result.exit_code == 2
    assert "yesterday" in result.output


def test_unreachable_database_names_it_without_the_password(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(
        "DATABASE_URL", f"postgresql://user:hunter2-secret@/nodb?host={tmp_path}&connect_timeout=2"
    )
    result = CliRunner().invoke(app, ["migrate"])
    assert result.exit_code == 2
    assert "cannot reach the database" in result.output
    assert "hunter2-secret" not in result.output


@pytest.mark.usefixtures("prefect_harness")
def test_jobs_and_facts_explain(cli_env: str, db: psycopg.Connection[Any]) -> None:
    db.execute(
        "INSERT INTO agent_memory.episodes (user_id, messages, message_count) VALUES "
        '(\'why\', \'[{"role": "user", "content": "I prefer green tea."}]\', 1)'
    )
    runner = CliRunner()
    assert runner.invoke(app, ["consolidate"]).exit_code == 0
    result = runner.invoke(app, ["jobs", "--status", "completed"])
    assert result.exit_code == 0, result.output
    assert "user=why" in result.output and "offline-rules" in result.output
    assert "1 job(s); 0 LLM call(s)" in result.output
    (fact_id,) = db.execute("SELECT id FROM agent_memory.memory_items").fetchone()  # type: ignore[misc]
    result = runner.invoke(app, ["facts", "explain", str(fact_id)])
    assert result.exit_code == 0, result.output
    assert "User prefers green tea." in result.output
    assert "kind preference, half-life 180 days (1 mention(s)); true since" in result.output
    assert "from 1 episode(s)" in result.output and "user: I prefer green tea." in result.output
    assert runner.invoke(app, ["facts", "explain", "999999"]).exit_code == 2
    bad = runner.invoke(app, ["jobs", "--status", "weird"])
    assert bad.exit_code == 2 and "'weird'" in bad.output


@pytest.mark.usefixtures("prefect_harness")
def test_backfill_import_and_run(cli_env: str, db: psycopg.Connection[Any], tmp_path: Path) -> None:
    runner = CliRunner()
    sample = str(ROOT / "examples" / "history.jsonl")
    result = runner.invoke(app, ["backfill", "import", sample])
    assert result.exit_code == 0, result.output
    assert "3 conversation(s) read: 3 imported, 0 already there, 0 bad" in result.output
    result = runner.invoke(app, ["backfill", "import", sample])
    assert "0 imported, 3 already there" in result.output
    result = runner.invoke(
        app, ["backfill", "run", "--since", "2026-01-01", "--until", "2026-05-01"]
    )
    assert result.exit_code == 0, result.output
    # alice in March and bob in April; alice's May conversation is outside the window
    assert "2 pending episode(s) in the window; 2 consolidated over 2 scope(s)" in result.output
    assert "below the purge threshold" not in result.output  # the clock starts at the import
    assert db.execute(
        "SELECT count(*) FROM agent_memory.episodes WHERE NOT consolidated"
    ).fetchone() == (1,)
    # alice's May conversation, its clock at the conversation: who she is lasts years, so
    # nothing of hers has faded
    result = runner.invoke(app, ["backfill", "run", "--decay-from", "conversation"])
    assert result.exit_code == 0, result.output
    assert "1 consolidated over 1 scope(s)" in result.output
    assert "below the purge threshold" not in result.output
    # a plan from March has: the run says how many facts the next decay takes
    plans = tmp_path / "plans.jsonl"
    plans.write_text(
        json.dumps(
            {
                "user_id": "carol",
                "occurred_at": "2026-03-02T09:15:00+00:00",
                "messages": [
                    {"role": "user", "content": "My dentist appointment is on Friday."},
                    {"role": "user", "content": "I'm a vegetarian."},
                ],
            }
        )
        + "\n",
        encoding="utf-8",
    )
    assert runner.invoke(app, ["backfill", "import", str(plans)]).exit_code == 0
    result = runner.invoke(app, ["backfill", "run", "--decay-from", "conversation"])
    assert result.exit_code == 0, result.output
    assert "1 fact(s) already below the purge threshold go at the next decay" in result.output


def test_backfill_bad_file_and_bad_window_are_named(cli_env: str, tmp_path: Path) -> None:
    runner = CliRunner()
    bad = tmp_path / "bad.jsonl"
    good = (ROOT / "examples" / "history.jsonl").read_text().splitlines()[0]
    bad.write_text(good + "\n{oops\n")
    result = runner.invoke(app, ["backfill", "import", str(bad)])
    assert result.exit_code == 2
    assert "line 2: not valid JSON" in result.output and "nothing was imported" in result.output
    result = runner.invoke(app, ["backfill", "import", str(bad), "--on-error", "skip"])
    assert result.exit_code == 1  # imported the good line, reported the bad one
    assert "1 imported" in result.output and "1 bad line(s) skipped" in result.output
    result = runner.invoke(app, ["backfill", "import", str(bad), "--on-error", "maybe"])
    assert result.exit_code == 2 and "maybe" in result.output
    result = runner.invoke(
        app, ["backfill", "run", "--since", "2026-05-01", "--until", "2026-01-01"]
    )
    assert result.exit_code == 2
    assert "is not before until" in result.output
    result = runner.invoke(app, ["backfill", "run", "--decay-from", "yesterday"])
    assert result.exit_code == 2 and "'yesterday'" in result.output


def test_backfill_checkpoints_from_a_langgraph_saver(
    cli_env: str, db: psycopg.Connection[Any]
) -> None:
    from tests.test_backfill_checkpoints import chat, say

    graph, conn = chat(cli_env)
    try:
        say(graph, "carol", "I prefer green tea.")
    finally:
        conn.close()
    runner = CliRunner()
    result = runner.invoke(app, ["backfill", "checkpoints", "--from", cli_env])
    assert result.exit_code == 0, result.output
    assert "1 thread(s) read: 1 imported, 0 with nothing new" in result.output
    result = runner.invoke(
        app, ["backfill", "checkpoints", "--from", cli_env, "--thread-pattern", "(?P<x>.+)"]
    )
    assert result.exit_code == 2 and "must name groups among user_id" in result.output
    assert db.execute("SELECT user_id FROM agent_memory.episodes").fetchall() == [("carol",)]


@pytest.mark.system
@pytest.mark.usefixtures("prefect_harness")
async def test_a_quiet_terminal_still_sends_the_runs_logs_to_the_ui(settings: Any) -> None:
    from prefect import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterName,
        LogFilter,
        LogFilterFlowRunId,
    )

    from tests.processes import run_python

    done = run_python(
        "import sys\nfrom agent_memory_deployments.cli import main\n"
        "sys.argv = ['agent-memory', 'jobs', 'retry', '--all']\nmain()\n",
        settings,
        unset=("PREFECT_LOGGING_LEVEL",),  # as a user has it: Prefect's default, INFO
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failed scope(s) to retry" not in done.stderr  # the terminal stays quiet...
    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=["retry [all failed]"]))
        )
        logs = await client.read_logs(
            LogFilter(flow_run_id=LogFilterFlowRunId(any_=[r.id for r in runs]))
        )
    # ...while the UI gets the run's INFO records too
    assert any("0 failed scope(s) to retry" in log.message for log in logs), [
        log.message for log in logs
    ]
