"""Exactly once under crashes (SIGKILL at each step boundary) and under concurrent runs."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.settings import DatabaseSettings, Settings, use_settings
from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
from agent_memory_flows.outcome import run_for_summary
from tests import faults
from tests.fake_llm import FakeLLM, Reply, facts_answer
from tests.processes import run_python

pytestmark = pytest.mark.usefixtures("prefect_harness")
ROOT = Path(__file__).resolve().parent.parent

RUN_FLOW = (
    "import asyncio\n"
    "from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow\n"
    "asyncio.run(consolidation_flow(ConsolidationParams()))\n"
)


def run_killed_flow(settings: Settings, point: str) -> subprocess.CompletedProcess[str]:
    return run_python(RUN_FLOW, settings, **{faults.KILL_AT: point})


def check_exactly_once(db: psycopg.Connection[Any], episodes: int) -> None:
    assert db.execute(
        "SELECT count(*) FROM agent_memory.episodes WHERE NOT consolidated"
    ).fetchone() == (0,)
    # each episode was consolidated by exactly one completed job, counted once
    assert db.execute(
        """SELECT count(*) FROM agent_memory.episodes e
           JOIN agent_memory.consolidation_jobs j ON j.id = e.consolidation_job_id
           WHERE j.status = 'completed'"""
    ).fetchone() == (episodes,)
    assert db.execute(
        "SELECT sum(episodes_processed) FROM agent_memory.consolidation_jobs "
        "WHERE status = 'completed'"
    ).fetchone() == (episodes,)
    assert db.execute(
        "SELECT count(*) FROM agent_memory.consolidation_jobs WHERE status = 'running'"
    ).fetchone() == (0,)
    facts = db.execute("SELECT content FROM agent_memory.memory_items ORDER BY content").fetchall()
    assert [f[0] for f in facts] == sorted(f"User said episode {i}" for i in range(episodes))
    assert db.execute(
        """SELECT count(*) FROM agent_memory.fact_sources s
           JOIN agent_memory.memory_items m ON m.id = s.fact_id
           JOIN agent_memory.episodes e ON e.id = s.episode_id
           WHERE m.content = 'User said ' || (e.messages -> 0 ->> 'content')"""
    ).fetchone() == (episodes,)  # each fact cites the one episode it came from, and only it
    assert db.execute("SELECT count(*) FROM agent_memory.fact_sources").fetchone() == (episodes,)


@pytest.mark.slow
@pytest.mark.parametrize("point", faults.POINTS)
async def test_sigkill_at_each_step_then_rerun_is_exactly_once(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any], point: str
) -> None:
    fake_llm.reset(facts_answer)
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        for i in range(3):
            await manager.record(
                Scope(user_id="crash"), [{"role": "user", "content": f"episode {i}"}]
            )
    finally:
        await manager.close()

    killed = run_killed_flow(llm_settings, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    status = db.execute("SELECT status FROM agent_memory.consolidation_jobs").fetchall()
    assert status == ([("completed",)] if point == "after_commit" else [("running",)])

    rerun = await run_for_summary(consolidation_flow, ConsolidationParams())
    check_exactly_once(db, episodes=3)
    assert fake_llm.calls == 1  # the answer cached before the crash is reused, never re-asked
    if point == "after_commit":
        assert rerun["scopes"] == 0
    else:
        (abandoned,) = db.execute(
            "SELECT error FROM agent_memory.consolidation_jobs WHERE status = 'failed'"
        ).fetchone()  # type: ignore[misc]
        assert abandoned.startswith("abandoned")


@pytest.mark.slow
async def test_eight_concurrent_runs_over_200_scopes(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    fake_llm.reset(facts_answer)
    db.execute(
        """INSERT INTO agent_memory.episodes (user_id, agent_id, messages, message_count)
           SELECT 'user-' || s, CASE WHEN s % 2 = 0 THEN 'agent' END,
                  jsonb_build_array(jsonb_build_object('role', 'user',
                                                       'content', 'episode ' || s)), 1
           FROM generate_series(0, 199) AS s"""
    )
    # small pools: 8 runs must not exhaust the server's connections
    small = llm_settings.model_copy(
        update={"db": DatabaseSettings(url=llm_settings.db.url, pool_min_size=1, pool_max_size=3)}
    )
    use_settings(small)
    runs = await asyncio.wait_for(
        asyncio.gather(
            *(run_for_summary(consolidation_flow, ConsolidationParams()) for _ in range(8))
        ),
        300,
    )
    assert sum(r["completed"] for r in runs) == 200
    assert sum(r["failed"] for r in runs) == 0
    assert fake_llm.calls == 200  # no scope was extracted twice
    assert db.execute(
        "SELECT count(*), count(DISTINCT consolidation_job_id) FROM "
        "agent_memory.episodes WHERE consolidated"
    ).fetchone() == (200, 200)
    assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (200,)
    assert db.execute("SELECT count(*) FROM agent_memory.consolidation_jobs").fetchone() == (200,)


async def test_retries_of_the_write_step_never_call_the_llm_again(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_llm.reset(facts_answer)
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        await manager.record(Scope(user_id="w"), [{"role": "user", "content": "episode 0"}])
        with pytest.MonkeyPatch.context() as broken:
            faults.install("in_write", "raise", broken.setattr)  # every write attempt breaks
            failed = await manager.consolidate()
        assert failed["failed"] == 1
        assert fake_llm.calls == 1  # the write was retried (2 retries in tests), the LLM was not
        assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (0,)
        done = await manager.consolidate()
    finally:
        await manager.close()
    assert done["completed"] == 1
    assert fake_llm.calls == 1  # the rerun used the cached answer
    check_exactly_once(db, episodes=1)


async def test_llm_concurrency_is_bounded_across_scopes(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    import threading

    lock = threading.Lock()
    in_flight = [0, 0]  # now, most

    def slow(request: dict[str, Any]) -> Reply:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        reply = facts_answer(request)
        reply.delay_s = 0.2
        return reply

    def done_one(_: Any) -> None:
        with lock:
            in_flight[0] -= 1

    fake_llm.reset(slow)
    fake_llm.after_reply = done_one
    settings = llm_settings.model_copy(
        update={"llm": llm_settings.llm.model_copy(update={"max_concurrency": 3})}
    )
    use_settings(settings)
    db.execute(
        """INSERT INTO agent_memory.episodes (user_id, messages, message_count)
           SELECT 'u' || s, jsonb_build_array(jsonb_build_object(
                      'role', 'user', 'content', 'episode ' || s)), 1
           FROM generate_series(1, 10) AS s"""
    )
    summary = await run_for_summary(consolidation_flow, ConsolidationParams())
    assert summary["completed"] == 10 and fake_llm.calls == 10
    assert in_flight[1] <= 3


async def test_write_retried_after_its_own_commit_reports_completed(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The commit lands but its acknowledgement is lost: the retry must not call it an overlap."""
    fake_llm.reset(facts_answer)
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        await manager.record(Scope(user_id="ack"), [{"role": "user", "content": "episode 0"}])
        faults.install("after_commit", "raise", monkeypatch.setattr)
        summary = await manager.consolidate()
    finally:
        await manager.close()
    assert summary["completed"] == 1
    assert db.execute(
        "SELECT status, episodes_processed, facts_created, content_checksum "
        "IS NOT NULL FROM agent_memory.consolidation_jobs"
    ).fetchall() == [("completed", 1, 1, True)]
    check_exactly_once(db, episodes=1)


async def test_invalid_scope_rows_written_around_the_library_are_skipped(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    db.execute("ALTER TABLE agent_memory.episodes DROP CONSTRAINT episodes_scope_parts_check")
    db.execute(
        "INSERT INTO agent_memory.episodes (user_id, messages, message_count) "
        'VALUES (\'\', \'[{"role": "user", "content": "I like tea."}]\', 1)'
    )
    await manager.record(Scope(user_id="fine"), [{"role": "user", "content": "I like coffee."}])
    summary = await manager.consolidate()
    assert (summary["completed"], summary["failed"]) == (1, 0)
    assert db.execute(
        "SELECT count(*) FROM agent_memory.episodes WHERE NOT consolidated"
    ).fetchone() == (1,)


async def test_rebase_and_a_concurrent_write_do_not_interleave(
    manager: MemoryManager, db: psycopg.Connection[Any], database_url: str
) -> None:
    """A write that starts while the factor is being changed waits, then ranks with the new
    factor (without the wait, its fact would be ranked with the old one and mis-purged)."""
    import time

    from agent_memory.consolidation.extract import extract_batch
    from agent_memory.consolidation.load import load_batch
    from agent_memory.consolidation.write import write_batch
    from agent_memory.db import decay as decay_repo
    from agent_memory.decay import today
    from agent_memory.extraction import OfflineExtractor

    scope = Scope(user_id="race")
    await manager.record(scope, [{"role": "user", "content": "I like tea."}])
    pool = await manager.backend.apool()
    extractor = OfflineExtractor()
    batch = await load_batch(pool, scope, extractor, None, 10)
    assert batch is not None
    extraction = await extract_batch(pool, batch, extractor)
    waiting = (
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND datname = current_database() AND query LIKE '%decay_policy%FOR SHARE%'"
    )
    with psycopg.connect(database_url) as rebaser:  # a transaction, as rebase() holds
        rebaser.execute("SELECT factor FROM agent_memory.decay_policy FOR UPDATE")
        rebaser.execute("UPDATE agent_memory.decay_policy SET factor = 0.5")
        write = asyncio.ensure_future(write_batch(pool, batch, extraction))
        try:
            deadline = time.monotonic() + 60
            while not db.execute(waiting).fetchone()[0]:  # type: ignore[index]
                assert not write.done(), "the write did not wait for the rebase"
                assert time.monotonic() < deadline, "the write never reached the policy lock"
                await asyncio.sleep(0.05)
            rebaser.commit()
            result = await write
        finally:
            if not write.done():
                rebaser.rollback()
                await write
    assert result.outcome == "completed"
    (fact,) = await manager.facts(scope)
    assert fact.importance == pytest.approx(0.8)  # ranked with the committed factor
    async with pool.connection() as conn:
        assert await decay_repo.purge(conn, 0.05, today()) == 0
