"""The consolidation flow, run by Prefect, against a real PostgreSQL and a real HTTP LLM."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.decay import today
from agent_memory.settings import LLMSettings, Settings, get_settings, use_settings
from agent_memory_flows.consolidation import SUMMARY_KEY, ConsolidationParams, consolidation_flow
from agent_memory_flows.outcome import run_for_summary
from tests.fake_llm import FakeLLM, Reply
from tests.llm_faults import key_of

pytestmark = pytest.mark.usefixtures("prefect_harness")

TALK = [
    {
        "role": "user",
        "content": "Hi! I'm a Python developer working on SAP integrations. I prefer async code.",
    },
    {"role": "assistant", "content": "Noted."},
]


def jobs(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        """SELECT user_id, status, episodes_processed, facts_created, content_checksum IS NOT NULL,
                  extractor, error
           FROM agent_memory.consolidation_jobs ORDER BY id"""
    ).fetchall()


def pending(db: psycopg.Connection[Any]) -> list[str | None]:
    return [
        r[0]
        for r in db.execute(
            "SELECT user_id FROM agent_memory.episodes WHERE NOT consolidated ORDER BY id"
        ).fetchall()
    ]


async def test_offline_consolidation_end_to_end(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    alice = Scope(user_id="alice")
    await manager.record(alice, TALK)
    await manager.record(alice, [{"role": "user", "content": "We use PostgreSQL for everything."}])
    summary = await run_for_summary(consolidation_flow, ConsolidationParams())
    assert summary["extractor"] == "offline-rules"
    assert (summary["scopes"], summary["completed"], summary["failed"]) == (1, 1, 0)
    assert jobs(db) == [("alice", "completed", 2, 3, True, "offline-rules", None)]
    assert pending(db) == []
    frame = await manager.inject(alice)
    assert set(frame.injected_facts) == {
        "User is a Python developer working on SAP integrations.",
        "User prefers async code.",
        "User uses PostgreSQL for everything.",
    }
    # nothing pending: a second run does no work and writes no job
    again = await run_for_summary(consolidation_flow, ConsolidationParams())
    assert again["scopes"] == 0
    assert len(jobs(db)) == 1


async def test_summary_artifact_lists_each_scope(manager: MemoryManager) -> None:
    from prefect.artifacts import Artifact

    await manager.record(Scope(user_id="art-1"), TALK)
    await manager.record(Scope(user_id="art-2", agent_id="bot"), TALK)
    await run_for_summary(consolidation_flow, ConsolidationParams())
    artifact = await Artifact.aget(SUMMARY_KEY)
    assert artifact is not None
    rows = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    # scopes by their pseudonymous keys: Prefect is never told user ids
    keys = [key_of(Scope(user_id="art-1")), key_of(Scope(user_id="art-2", agent_id="bot"))]
    assert sorted(r["scope"] for r in rows) == sorted(keys)
    assert {r["outcome"] for r in rows} == {"completed"}
    # narrow: what an operator reads first; every figure is in the details artifact
    assert all(list(r) == ["scope", "outcome", "facts", "cost_usd", "error"] for r in rows)
    details = await Artifact.aget(f"{SUMMARY_KEY}-details")
    assert details is not None
    full = json.loads(details.data) if isinstance(details.data, str) else details.data
    assert {"batches", "tokens_in", "tokens_out", "llm_calls", "extractor"} <= set(full[0])


async def record_and_consolidate(settings: Settings, scope: Scope) -> dict[str, Any]:
    """Record TALK for ``scope`` and consolidate with ``settings``: the run's summary."""
    use_settings(settings)
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await manager.record(scope, TALK)
        return dict(await manager.consolidate())
    finally:
        await manager.close()


async def test_the_summary_says_what_the_run_cost_in_dollars(
    llm_settings: Settings, fake_llm: FakeLLM
) -> None:
    from prefect.artifacts import Artifact

    priced = llm_settings.model_copy(
        update={"llm": llm_settings.llm.model_copy(update={"model": "openai/gpt-4o-mini"})}
    )
    summary = await record_and_consolidate(priced, Scope(user_id="priced"))
    assert summary["cost_usd"] and summary["cost_usd"] > 0  # litellm's price for the model
    artifact = await Artifact.aget(SUMMARY_KEY)
    assert artifact is not None and f"${summary['cost_usd']:.4f}" in str(artifact.description)


async def test_a_model_litellm_has_no_price_for_costs_unknown_and_prints_nothing(
    llm_settings: Settings, fake_llm: FakeLLM, capfd: pytest.CaptureFixture[str]
) -> None:
    # the loopback server answers as "test-model", a name litellm knows no provider for
    summary = await record_and_consolidate(llm_settings, Scope(user_id="unpriced"))
    assert summary["completed"] == 1 and summary["cost_usd"] is None
    out, _ = capfd.readouterr()
    assert "Provider List" not in out, out  # litellm's banner, printed on a failed look-up


async def test_two_managers_consolidate_each_with_its_own_settings(
    settings: Settings, fake_llm: FakeLLM
) -> None:
    """Two managers in one process, one extracting with the loopback LLM and one with the
    offline rules, consolidating at the same time: each run reads its own manager's settings,
    and the process's settings (the fixture's) are the same object afterwards."""
    by_llm = settings.model_copy(
        update={
            "llm": LLMSettings(
                model="openai/test-model", api_base=fake_llm.api_base, api_key="sk-t", timeout=5
            )
        }
    )
    offline = settings.model_copy(update={"llm": LLMSettings(model=None)})
    alice, bob = Scope(user_id="alice"), Scope(user_id="bob")
    llm_manager = await MemoryManager.create(settings=by_llm, migrate=False)
    offline_manager = await MemoryManager.create(settings=offline, migrate=False)
    try:
        await llm_manager.record(alice, TALK)
        await offline_manager.record(bob, TALK)
        by_model, by_rules = await asyncio.gather(
            llm_manager.consolidate(alice), offline_manager.consolidate(bob)
        )
        assert get_settings() is settings
        assert by_model["extractor"] != "offline-rules" and by_rules["extractor"] == "offline-rules"
        assert (by_model["completed"], by_rules["completed"]) == (1, 1)
        assert fake_llm.calls == 1  # alice's scope, by the model; bob's asked nobody
        assert {f.content for f in await llm_manager.facts(alice)} == {
            "User is a Python developer.",  # the loopback server's canned answer
            "User prefers async code.",
        }
        assert {f.content for f in await offline_manager.facts(bob)} == {
            "User is a Python developer working on SAP integrations.",
            "User prefers async code.",
        }
        # the next run of each, one after the other, still its own
        await llm_manager.record(alice, TALK[:1])
        assert (await llm_manager.consolidate(alice))["extractor"] == by_model["extractor"]
        assert get_settings() is settings
    finally:
        await llm_manager.close()
        await offline_manager.close()


async def test_only_the_requested_scope_is_consolidated(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await manager.record(Scope(user_id="one"), TALK)
    await manager.record(Scope(user_id="two"), TALK)
    await manager.consolidate(Scope(user_id="two"))
    assert pending(db) == ["one"]


async def test_checksum_skip_does_not_call_the_llm(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        scope = Scope(user_id="repeat")
        await manager.record(scope, TALK)
        first = await manager.consolidate()
        assert (first["completed"], fake_llm.calls) == (1, 1)
        # the same conversation recorded again (e.g. a retried graph): same checksum
        await manager.record(scope, TALK)
        second = await manager.consolidate()
        assert fake_llm.calls == 1
        assert (second["completed"], second["llm_calls"]) == (1, 0)
        assert pending(db) == []
        assert [j[1] for j in jobs(db)] == ["completed", "completed"]
        assert len(await manager.facts(scope)) == 2
        # the facts fade away; the user says the same again: relearned, still no LLM call
        await manager.decay(as_of=today() + timedelta(days=400))
        assert await manager.facts(scope, on=today() + timedelta(days=400)) == []
        await manager.record(scope, TALK, occurred_at=datetime.now(UTC))
        await manager.consolidate()
        assert fake_llm.calls == 1
        assert len(await manager.facts(scope)) == 2
    finally:
        await manager.close()


async def test_llm_failure_leaves_failed_job_and_pending_episodes_while_others_complete(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    def handler(request: dict[str, Any]) -> Reply:
        text = json.dumps(request["messages"])
        if "doomed" in text:
            return Reply("upstream exploded", status=500)
        return Reply(json.dumps([{"content": "User is fine.", "importance": 0.6}]))

    fake_llm.reset(handler)
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        await manager.record(Scope(user_id="ok-1"), TALK)
        await manager.record(Scope(user_id="bad"), [{"role": "user", "content": "doomed talk"}])
        await manager.record(Scope(user_id="ok-2"), TALK)
        summary = await manager.consolidate()
    finally:
        await manager.close()
    assert (summary["completed"], summary["failed"]) == (2, 1)
    rows = {r[0]: r for r in jobs(db)}
    assert rows["bad"][1] == "failed"
    assert "InternalServerError" in rows["bad"][6] or "500" in rows["bad"][6]
    assert rows["ok-1"][1] == rows["ok-2"][1] == "completed"
    assert pending(db) == ["bad"]
    # transient: the first try and 2 retries (AGENT_MEMORY_RETRY_LLM_ATTEMPTS=2 in tests)
    doomed_calls = [r for r in fake_llm.requests if "doomed" in json.dumps(r["messages"])]
    assert len(doomed_calls) == 3
    assert db.execute(
        "SELECT count(*) FROM agent_memory.memory_items WHERE user_id = 'bad'"
    ).fetchone() == (0,)


@pytest.mark.parametrize("attempts", [0, 3])
async def test_a_managers_retry_settings_reach_the_tasks(
    llm_settings: Settings, fake_llm: FakeLLM, attempts: int
) -> None:
    """The retry policy is the run's settings (here a manager's, not the environment's)."""
    fake_llm.reset(lambda request: Reply("unavailable", status=503))
    retry = llm_settings.task_retries.model_copy(update={"llm_attempts": attempts})
    settings = llm_settings.model_copy(update={"task_retries": retry})
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await manager.record(Scope(user_id="retried"), TALK)
        summary = await manager.consolidate()
    finally:
        await manager.close()
    assert summary["failed"] == 1
    assert fake_llm.calls == 1 + attempts


async def test_transient_fault_is_retried_then_succeeds(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    fake_llm.reply_with(
        Reply("slow down", status=429, headers={"Retry-After": "0"}),
        Reply("unavailable", status=503),
        Reply(json.dumps([{"content": "User is persistent.", "importance": 0.8}])),
    )
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        await manager.record(Scope(user_id="retry"), TALK)
        summary = await manager.consolidate()
        assert summary["completed"] == 1
        assert fake_llm.calls == 3
        assert (await manager.inject(Scope(user_id="retry"))).injected_facts == [
            "User is persistent."
        ]
        # every attempt is counted in the job's cost, not just the one that succeeded
        assert db.execute(
            "SELECT llm_calls, prompt_tokens, completion_tokens, model FROM "
            "agent_memory.consolidation_jobs"
        ).fetchone() == (3, 100, 20, "openai/test-model")
        assert (summary["llm_calls"], summary["prompt_tokens"]) == (3, 100)
    finally:
        await manager.close()


@pytest.mark.parametrize(
    ("answer", "needle"),
    [
        ('[{"content": "User is', "not valid JSON"),
        ('{"unexpected": 1}', "expected an array"),
        ('[{"text_of_fact": "x", "importance": 0.5}]', "no 'content'"),
        ('[{"content": "User likes tea.", "importance": "very"}]', "not a number"),
    ],
)
async def test_unusable_answer_fails_the_job_without_retry(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any], answer: str, needle: str
) -> None:
    fake_llm.reply_with(Reply(answer))
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        await manager.record(Scope(user_id="garbage"), TALK)
        summary = await manager.consolidate()
    finally:
        await manager.close()
    assert summary["failed"] == 1
    assert fake_llm.calls == 1  # a bad answer is permanent: no retry
    assert db.execute(
        "SELECT llm_calls, prompt_tokens, completion_tokens FROM agent_memory.consolidation_jobs"
    ).fetchone() == (1, 100, 20)  # an unusable answer is still paid for
    job = jobs(db)[0]
    assert job[1] == "failed" and needle in job[6]
    assert pending(db) == ["garbage"]


async def test_secrets_stay_out_of_job_rows_and_logs(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = llm_settings.llm.api_key.get_secret_value()  # type: ignore[union-attr]
    fake_llm.reply_with(Reply(f"Incorrect API key provided: {secret}", status=401))
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        await manager.record(Scope(user_id="leak"), TALK)
        summary = await manager.consolidate()
    finally:
        await manager.close()
    assert summary["failed"] == 1
    error = jobs(db)[0][6]
    assert "AuthenticationError" in error and secret not in error
    out, err = capfd.readouterr()
    assert secret not in out + err + caplog.text
    assert fake_llm.requests[0]["_authorization"] == f"Bearer {secret}"  # it was really sent


async def test_dsn_password_and_api_key_stay_out_of_rows_logs_and_artifacts(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from prefect.artifacts import Artifact

    from agent_memory.settings import DatabaseSettings, use_settings

    # the embedded server trusts local connections, so a password in the DSN is accepted
    password = "dsn-PASSWORD-77"
    url = llm_settings.db.url.get_secret_value()  # type: ignore[union-attr]
    with_password = url.replace("user=postgres", f"user=postgres password={password}")
    assert password in with_password
    settings = llm_settings.model_copy(update={"db": DatabaseSettings(url=with_password)})
    use_settings(settings)
    fake_llm.reply_with(Reply(f"bad request from {with_password}", status=400))
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await manager.record(Scope(user_id="pw"), TALK)
        summary = await manager.consolidate()
    finally:
        await manager.close()
    assert summary["failed"] == 1
    error = jobs(db)[0][6]
    assert "BadRequestError" in error and password not in error
    artifact = await Artifact.aget("memory-consolidation-failures")
    assert artifact is not None and "BadRequestError" in str(artifact.data)
    assert password not in str(artifact.data) + json.dumps(summary)
    out, err = capfd.readouterr()
    assert password not in out + err + caplog.text


async def test_429_waits_for_retry_after_before_the_retry(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    import time

    stamps: list[float] = []

    def handler(_request: dict[str, Any]) -> Reply:
        stamps.append(time.monotonic())
        if len(stamps) == 1:
            return Reply("slow down", status=429, headers={"Retry-After": "1"})
        return Reply(json.dumps([{"content": "User is patient.", "importance": 0.5}]))

    fake_llm.reset(handler)
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        await manager.record(Scope(user_id="patient"), TALK)
        summary = await manager.consolidate()
    finally:
        await manager.close()
    assert summary["completed"] == 1 and len(stamps) == 2
    assert stamps[1] - stamps[0] >= 1.0  # the provider's Retry-After was honoured


async def test_shards_split_the_scopes_without_overlap(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        for i in range(20):
            await manager.record(Scope(user_id=f"shard-{i}"), TALK)
    finally:
        await manager.close()
    done: list[set[str]] = []
    for shard in range(3):
        summary = await run_for_summary(
            consolidation_flow, ConsolidationParams(shard=shard, shard_count=3)
        )
        done.append({r["scope"] for r in summary["results"] if r["outcome"] == "completed"})
    assert all(done), done  # every shard had work (20 scopes over 3 shards)
    assert set.union(*done) == {f"user=shard-{i}" for i in range(20)}
    assert sum(map(len, done)) == 20  # disjoint
    with pytest.raises(ValueError, match="shard 3 is not below shard_count 3"):
        ConsolidationParams(shard=3, shard_count=3)
