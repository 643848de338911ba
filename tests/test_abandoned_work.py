"""Work a crash or a failure leaves behind is found and taken on request: jobs a killed run left
'running' are retried by `jobs retry`, the killed run reads Crashed in Prefect, a run that
leaves scopes for later says which and why, and the embedded PostgreSQL a killed process used
still stops when its last user exits."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.db import claims as claim_repo
from agent_memory.db import failures as failure_repo
from agent_memory.db import jobs as job_repo
from agent_memory.errors import InvalidJobError
from agent_memory.settings import Settings
from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
from agent_memory_flows.outcome import run_for_summary
from agent_memory_flows.retry import RetryParams, retry_flow
from tests import faults
from tests.fake_llm import FakeLLM, facts_answer
from tests.prefect_api import wait_for
from tests.processes import run_interpreter, run_python

pytestmark = pytest.mark.usefixtures("prefect_harness")

RUN_FLOW = (
    "import asyncio\n"
    "from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow\n"
    "asyncio.run(consolidation_flow(ConsolidationParams()))\n"
)


async def record(settings: Settings, *users: str) -> None:
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        for user in users:
            await manager.record(Scope(user_id=user), [{"role": "user", "content": f"I am {user}"}])
    finally:
        await manager.close()


async def flow_run_state(run_id: str) -> str:
    from prefect import get_client

    async with get_client() as client:
        run = await client.read_flow_run(UUID(run_id))
    assert run.state is not None
    return run.state.type.value


@pytest.mark.slow
async def test_jobs_a_killed_run_left_running_are_retried_and_the_run_reads_crashed(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    fake_llm.reset(facts_answer)
    await record(llm_settings, "kim")
    killed = run_python(RUN_FLOW, llm_settings, **{faults.KILL_AT: "after_load"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (job_id, run_id) = db.execute(
        "SELECT id, flow_run_id FROM agent_memory.consolidation_jobs WHERE status = 'running'"
    ).fetchone()  # type: ignore[misc]
    assert await flow_run_state(str(run_id)) == "RUNNING"  # Prefect cannot know it died

    summary = await run_for_summary(retry_flow, RetryParams(all_failed=True))

    assert (summary["scopes"], summary["completed"]) == (1, 1)
    assert db.execute(
        "SELECT status, left(error, 10) FROM agent_memory.consolidation_jobs WHERE id = %s",
        (job_id,),
    ).fetchone() == ("failed", "abandoned:")
    assert db.execute(
        "SELECT count(*) FROM agent_memory.consolidation_jobs WHERE status = 'running'"
    ).fetchone() == (0,)
    assert db.execute(
        "SELECT count(*) FROM agent_memory.episodes WHERE NOT consolidated"
    ).fetchone() == (0,)
    assert await flow_run_state(str(run_id)) == "CRASHED"


async def test_a_running_job_is_retryable_only_once_no_live_run_holds_its_scope(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    await record(settings, "lee")
    (job_id,) = db.execute(
        """INSERT INTO agent_memory.consolidation_jobs (user_id, status, extractor)
           VALUES ('lee', 'running', 'offline-rules') RETURNING id"""
    ).fetchone()  # type: ignore[misc]
    assert settings.db.url is not None
    async with await psycopg.AsyncConnection.connect(
        settings.db.url.get_secret_value(), autocommit=True
    ) as conn:
        with psycopg.connect(settings.db.url.get_secret_value(), autocommit=True) as live_run:
            # a live run holds the scope's claim row in an open transaction
            live_run.execute(claim_repo.ENSURE, (["lee"], [None], [None]))
            live_run.execute("BEGIN")
            assert live_run.execute(claim_repo.CLAIM, (["lee"], [None], [None])).fetchall() == [
                (True,)
            ]
            assert await job_repo.abandoned(conn) == []
            with pytest.raises(InvalidJobError, match=f"job {job_id} is running: a live run"):
                await failure_repo.retryable(conn, [job_id])
            session = live_run.info.backend_pid
        # the run's session ended (its process died): once its backend is gone, and its lock
        # with it (the server ends a session a moment after its client leaves), the job is
        # abandoned, and retryable
        wait_for(
            "the closed session's backend to exit",
            lambda: (
                db.execute(
                    "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = %s)", (session,)
                ).fetchone()
                == (True,)
            ),
            60,
        )
        [orphan] = await job_repo.abandoned(conn)
        assert (orphan.id, orphan.scope) == (job_id, Scope(user_id="lee"))
        assert await failure_repo.retryable(conn, [job_id]) == [Scope(user_id="lee")]
    summary = await run_for_summary(retry_flow, RetryParams(job_ids=[job_id]))
    assert (summary["scopes"], summary["completed"]) == (1, 1)
    assert db.execute(
        "SELECT status FROM agent_memory.consolidation_jobs WHERE id = %s", (job_id,)
    ).fetchone() == ("failed",)


async def test_a_run_says_which_scopes_it_leaves_for_later_and_how_to_take_them_now(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    await record(settings, "waiting-1", "waiting-2", "parked", "due")
    for user, next_at, parked in [
        ("waiting-1", "2999-01-01 10:00+00", False),
        ("waiting-2", "2999-01-02 10:00+00", False),
        ("parked", "2000-01-01 00:00+00", True),
    ]:
        db.execute(
            """WITH job AS (
                   INSERT INTO agent_memory.consolidation_jobs (user_id, status, extractor, error)
                   VALUES (%(user)s, 'failed', 'offline-rules', 'x') RETURNING id)
               INSERT INTO agent_memory.scope_retries
                   (scope_key, user_id, failures, last_job_id, last_error, next_attempt_at,
                    parked)
               SELECT agent_memory.scope_key(%(user)s, NULL, NULL), %(user)s, 1, job.id, 'x',
                      %(next_at)s, %(parked)s
               FROM job""",
            {"user": user, "next_at": next_at, "parked": parked},
        )

    summary = await run_for_summary(consolidation_flow, ConsolidationParams())

    assert (summary["scopes"], summary["completed"]) == (1, 1)  # only the scope that is due
    assert summary["held_back"] == (
        "2 scope(s) with pending episodes wait out their retry backoff (the first due "
        "2999-01-01 10:00:00 UTC); 1 scope(s) are parked after failing too often: "
        "`agent-memory jobs retry --all` consolidates them now"
    )
    retried = await run_for_summary(retry_flow, RetryParams(all_failed=True))
    assert (retried["scopes"], retried["completed"]) == (3, 3)
    again = await run_for_summary(consolidation_flow, ConsolidationParams())
    assert (again["scopes"], again["held_back"]) == (0, None)


def test_the_embedded_server_a_killed_process_used_stops_when_its_last_user_exits(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "pgdata"
    start = (
        "from pathlib import Path\n"
        "from agent_memory.db.connection import resolve\n"
        "from agent_memory.settings import DatabaseSettings\n"
        f"resolve(DatabaseSettings(url=None, data_dir=Path({str(data_dir)!r})))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}

    def python(code: str) -> subprocess.CompletedProcess[str]:
        return run_interpreter(["-c", code], env)

    try:
        killed = python(start + "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        assert (data_dir / "postmaster.pid").exists()  # the server outlives its killed user
        last = python(start)  # a later user, on the same data directory, exits normally
        assert last.returncode == 0, last.stderr[-2000:]
        assert not (data_dir / "postmaster.pid").exists()  # ...and the server stopped with it
    finally:
        pid_file = data_dir / "postmaster.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
