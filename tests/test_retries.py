"""Retrying failed scopes: attempts counted, backoff between them, parking, explicit retry,
and a Prefect event for each failed scope."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from prefect.client.orchestration import get_client
from typer.testing import CliRunner

from agent_memory import MemoryManager, Scope
from agent_memory.db import failures as failure_repo
from agent_memory.errors import InvalidJobError
from agent_memory.settings import JobSettings, Settings, use_settings
from agent_memory_deployments.cli import app
from agent_memory_flows.consolidation import (
    FAILED_EVENT,
    PARKED_EVENT,
    ConsolidationParams,
    consolidation_flow,
)
from agent_memory_flows.outcome import run_for_summary
from agent_memory_flows.retry import RetryParams, retry_flow
from tests.fake_llm import FakeLLM, Reply
from tests.llm_faults import key_of
from tests.prefect_api import api

pytestmark = pytest.mark.usefixtures("prefect_harness")

GOOD = json.dumps([{"content": "User likes retries.", "importance": 0.6}])


@pytest.fixture
def retrying(llm_settings: Settings) -> Iterator[Settings]:
    """Three attempts, a minute's backoff doubling after each failure."""
    s = llm_settings.model_copy(
        update={"jobs": JobSettings(attempts=3, backoff_s=60, backoff_max_s=3600)}
    )
    use_settings(s)
    yield s
    use_settings(llm_settings)


def broken_for(user: str) -> Any:
    def handler(request: dict[str, Any]) -> Reply:
        if user in json.dumps(request["messages"]):
            return Reply("this is not JSON at all")  # permanent: no task retry
        return Reply(GOOD)

    return handler


async def record(settings: Settings, *users: str, said: str = "hi") -> None:
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        for user in users:
            message = {"role": "user", "content": f"{said} {user}"}
            await manager.record(Scope(user_id=user), [message])
    finally:
        await manager.close()


def streak(db: psycopg.Connection[Any], user: str) -> tuple[Any, ...] | None:
    return db.execute(
        "SELECT failures, parked, extract(epoch FROM next_attempt_at - last_failed_at)::int,"
        " last_job_id FROM agent_memory.scope_retries WHERE user_id = %s",
        (user,),
    ).fetchone()


def job_statuses(db: psycopg.Connection[Any], user: str) -> list[str]:
    rows = db.execute(
        "SELECT status FROM agent_memory.consolidation_jobs WHERE user_id = %s ORDER BY id",
        (user,),
    ).fetchall()
    return [r[0] for r in rows]


def make_due(db: psycopg.Connection[Any]) -> None:
    """As if the backoff had passed."""
    db.execute("UPDATE agent_memory.scope_retries SET next_attempt_at = now() - interval '1s'")


async def test_attempts_backoff_parking_and_explicit_retry(
    retrying: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    fake_llm.reset(broken_for("flaky"))
    await record(retrying, "flaky", "fine")
    first = await run_for_summary(consolidation_flow, ConsolidationParams())
    assert (first["completed"], first["failed"]) == (1, 1)
    assert streak(db, "flaky")[:3] == (1, False, 60)  # type: ignore[index]

    # new work arrives, but the failed scope waits out its backoff; the others go on
    await record(retrying, "flaky", "fine", said="hello again")
    calls = fake_llm.calls
    second = await run_for_summary(consolidation_flow, ConsolidationParams())
    assert (second["completed"], second["failed"]) == (1, 0)
    assert fake_llm.calls == calls + 1
    assert (await run_for_summary(retry_flow, RetryParams()))["scopes"] == 0  # not due yet

    # once due, the retry flow tries again; the wait doubles
    make_due(db)
    assert (await run_for_summary(retry_flow, RetryParams()))["failed"] == 1
    assert streak(db, "flaky")[:3] == (2, False, 120)  # type: ignore[index]

    # the third failure parks it: the job is dead, with its error; nothing picks it up
    make_due(db)
    third = await run_for_summary(retry_flow, RetryParams())
    assert third["failed"] == 1 and third["results"][0]["error"]
    failures, parked, _wait, dead_job = streak(db, "flaky")  # type: ignore[misc]
    assert (failures, parked) == (3, True)
    assert job_statuses(db, "flaky") == ["failed", "failed", "dead"]
    make_due(db)
    assert (await run_for_summary(retry_flow, RetryParams()))["scopes"] == 0
    assert (await run_for_summary(consolidation_flow, ConsolidationParams()))["scopes"] == 0

    # an operator fixes the cause and retries it explicitly: done, streak forgotten
    fake_llm.reset(lambda _req: Reply(GOOD))
    fixed = await run_for_summary(retry_flow, RetryParams(job_ids=[dead_job]))
    assert (fixed["completed"], fixed["episodes"]) == (1, 2)
    assert streak(db, "flaky") is None
    assert job_statuses(db, "flaky")[-1] == "completed"


async def test_a_success_ends_the_streak_and_all_retries_every_failed_scope(
    retrying: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    fake_llm.reset(broken_for("hi "))  # every scope fails
    await record(retrying, "a", "b")
    assert (await run_for_summary(consolidation_flow, ConsolidationParams()))["failed"] == 2
    fake_llm.reset(lambda _req: Reply(GOOD))
    # --all does not wait for the backoff
    summary = await run_for_summary(retry_flow, RetryParams(all_failed=True))
    assert (summary["scopes"], summary["completed"]) == (2, 2)
    assert streak(db, "a") is None and streak(db, "b") is None


async def test_a_run_s_failed_scopes_are_retried_by_its_id_and_the_runs_link_each_other(
    retrying: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    from prefect.artifacts import Artifact

    fake_llm.reset(broken_for("hi broken"))
    await record(retrying, "broken", "fine")
    first = await run_for_summary(consolidation_flow, ConsolidationParams())
    assert (first["completed"], first["failed"]) == (1, 1)
    (old_run,) = db.execute(
        "SELECT DISTINCT flow_run_id FROM agent_memory.consolidation_jobs"
    ).fetchone()  # type: ignore[misc]
    await record(retrying, "later")  # pending, but not a failed scope of that run: left alone
    fake_llm.reset(lambda _req: Reply(GOOD))

    summary = await run_for_summary(retry_flow, RetryParams(from_run=old_run))

    assert (summary["scopes"], summary["completed"]) == (1, 1)
    assert job_statuses(db, "broken") == ["failed", "completed"]
    assert job_statuses(db, "later") == []
    (new_run,) = db.execute(
        "SELECT flow_run_id FROM agent_memory.consolidation_jobs WHERE status = 'completed'"
        " AND user_id = 'broken'"
    ).fetchone()  # type: ignore[misc]
    retry_of = await Artifact.aget("memory-retry-of")
    retried_by = await Artifact.aget("memory-retried-by")
    assert retry_of is not None and old_run in str(retry_of.data)
    assert retried_by is not None and new_run in str(retried_by.data)
    assert str(retried_by.flow_run_id) == old_run  # on the old run, where an operator looks
    # a run with nothing failed: nothing to retry, said so
    none = await run_for_summary(retry_flow, RetryParams(from_run=new_run))
    assert none["scopes"] == 0


def test_a_command_line_run_s_failures_name_the_retry_that_works_for_it(
    retrying: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run started by `agent-memory consolidate` has no deployment, so Prefect's Retry
    cannot run it again: its failures artifact, read from the Prefect server's API, says
    so and names `agent-memory jobs retry --run ID`, and that command retries the scope."""
    from prefect.settings import PREFECT_API_URL

    assert retrying.db.url is not None and retrying.llm.api_base is not None
    for name, value in {
        "DATABASE_URL": retrying.db.url.get_secret_value(),
        "AGENT_MEMORY_LLM_MODEL": "openai/test-model",
        "AGENT_MEMORY_LLM_API_BASE": retrying.llm.api_base,
        "AGENT_MEMORY_LLM_API_KEY": "sk-test",
    }.items():
        monkeypatch.setenv(name, value)
    fake_llm.reset(broken_for("hi broken"))
    asyncio.run(record(retrying, "broken", "fine"))
    runner = CliRunner()
    first = runner.invoke(app, ["consolidate"])
    assert first.exit_code == 1, first.output  # a scope failed
    (run_id,) = db.execute(
        "SELECT DISTINCT flow_run_id FROM agent_memory.consolidation_jobs"
    ).fetchone()  # type: ignore[misc]
    base = str(PREFECT_API_URL.value())
    run = api(base, f"/flow_runs/{run_id}")
    assert run["deployment_id"] is None and run["state_type"] == "FAILED"
    [artifact] = api(
        base,
        "/artifacts/filter",
        {
            "artifacts": {
                "key": {"any_": ["memory-consolidation-failures"]},
                "flow_run_id": {"any_": [run_id]},
            }
        },
    )
    text = artifact["data"]
    assert f"agent-memory jobs retry --run {run_id}" in text
    assert "Prefect's **Retry**" not in text and "This run has no deployment" in text

    fake_llm.reset(lambda _req: Reply(GOOD))
    again = runner.invoke(app, ["jobs", "retry", "--run", run_id])

    assert again.exit_code == 0, again.output
    assert job_statuses(db, "broken") == ["failed", "completed"]


async def test_only_failed_or_dead_jobs_can_be_retried(
    retrying: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    fake_llm.reset(lambda _req: Reply(GOOD))
    await record(retrying, "done")
    await run_for_summary(consolidation_flow, ConsolidationParams())
    (completed,) = db.execute("SELECT id FROM agent_memory.consolidation_jobs").fetchone()  # type: ignore[misc]
    async with await psycopg.AsyncConnection.connect(
        retrying.db.url.get_secret_value(),  # type: ignore[union-attr]
        autocommit=True,
    ) as conn:
        with pytest.raises(InvalidJobError, match=f"job {completed} is completed"):
            await failure_repo.retryable(conn, [completed])
        with pytest.raises(InvalidJobError, match="job 999999 does not exist"):
            await failure_repo.retryable(conn, [999999])


async def test_a_failed_scope_emits_an_event(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    fake_llm.reset(broken_for("evented"))
    await record(llm_settings, "evented")
    key = key_of(Scope(user_id="evented"))
    summary = await run_for_summary(consolidation_flow, ConsolidationParams())
    job_id = summary["results"][0]["job"]

    async def events() -> list[dict[str, Any]]:
        async with get_client() as client:
            response = await client.request(
                "POST",
                "/events/filter",
                json={"filter": {"event": {"name": [FAILED_EVENT, PARKED_EVENT]}}},
            )
        # the Prefect server is the session's: select this test's scope
        return [
            e
            for e in response.json()["events"]
            if e["resource"].get("prefect.resource.name") == key
        ]

    found: list[dict[str, Any]] = []
    for _ in range(120):  # the events worker delivers in the background
        found = await events()
        if found:
            break
        await asyncio.sleep(0.25)
    assert len(found) == 1, "no memory.consolidation.failed event reached the server"
    event = found[0]
    assert event["event"] == FAILED_EVENT
    # the scope by its key, the error by class, size and hash: no id, no words in Prefect
    assert event["resource"]["prefect.resource.id"] == f"agent-memory.scope.{key}"
    assert event["payload"]["job_id"] == job_id
    assert event["payload"]["failures"] == 1 and event["payload"]["scope_key"] == key
    assert event["payload"]["error"].startswith("ExtractionError (") and "evented" not in str(event)


def test_cli_lists_dead_jobs_and_refuses_a_bad_retry(
    llm_settings: Settings, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", llm_settings.db.url.get_secret_value())  # type: ignore[union-attr]
    monkeypatch.setattr(cli.console, "width", 250)
    runner = CliRunner()
    result = runner.invoke(cli.app, ["jobs", "retry"])
    assert result.exit_code == 2 and "give one of --job ID" in result.output
    result = runner.invoke(cli.app, ["jobs", "retry", "--job", "1", "--all"])
    assert result.exit_code == 2
    result = runner.invoke(cli.app, ["jobs", "retry", "--run", "last-tuesday"])
    assert result.exit_code == 2 and "--run 'last-tuesday' is not a flow run id" in result.output
    result = runner.invoke(cli.app, ["jobs", "retry", "--job", "424242"])
    assert result.exit_code == 2 and "job 424242 does not exist" in result.output
    result = runner.invoke(cli.app, ["jobs", "list", "--status", "dead"])
    assert result.exit_code == 0 and "0 job(s)" in result.output
    result = runner.invoke(cli.app, ["jobs", "--status", "zombie"])
    assert result.exit_code == 2 and "'zombie' is not one of" in result.output


async def test_the_documented_automation_is_accepted_by_prefect() -> None:
    """docs/operations.md's automation, run as written against the Prefect server."""
    import re
    import uuid
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.S)
    assert code is not None
    source = code.group(1).replace("<your notification block's id>", str(uuid.uuid4()))
    await asyncio.to_thread(exec, source, {})
    async with get_client() as client:
        found = await client.read_automations_by_name("agent-memory: a scope was parked")
    assert found and found[0].trigger.expect == {"memory.consolidation.parked"}  # type: ignore[union-attr]
