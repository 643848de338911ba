"""A fault matrix for the LLM extractor, through the real consolidation flow.

litellm talks over real HTTP to the loopback server of ``tests.fake_llm``. Every case records
episodes for three scopes; only one of them (the *marked* scope) has the marker in its text, and
the server applies the fault only to requests that carry it, so the other two scopes show that
one scope's trouble does not spill over. Every case also checks that nothing is half-written: no
job left 'running', facts only for completed scopes, the episodes of failed scopes still pending.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.causes import origin
from agent_memory.extraction.prompt import SYSTEM_PROMPT
from agent_memory.settings import Settings
from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
from agent_memory_flows.outcome import run_for_summary
from tests.fake_llm import FakeLLM, Reply
from tests.llm_faults import (
    CALM_ANSWER,
    INJECTION,
    LLM_ATTEMPTS,
    MARK,
    MARKED_ANSWER,
    MARKED_FACTS,
    FaultHandler,
    Trio,
    assert_nothing_half_written,
    consolidate,
    dead_port,
    extract_attempts,
    facts_of,
    failures_artifact,
    group_label,
    is_marked,
    job_rows,
    key_of,
    marked_requests,
    record_trio,
    with_llm,
)

pytestmark = pytest.mark.usefixtures("prefect_harness")


# ---- transient faults: retried with backoff, then the answer is used ---------------------------


@dataclass(frozen=True)
class Transient:
    fault: Callable[[int], Reply | None]
    attempts: int  # the marked scope's calls: failed attempts + the good one
    timeout: float | None = None


TRANSIENT = {
    "429-retry-after-0": Transient(
        lambda n: Reply("slow down", status=429, headers={"Retry-After": "0"}) if n <= 2 else None,
        attempts=3,
    ),
    "500": Transient(lambda n: Reply("upstream exploded", status=500) if n <= 1 else None, 2),
    "503": Transient(lambda n: Reply("unavailable", status=503) if n <= 2 else None, 3),
    # the server answers the first attempt only after the client gave up (delay > timeout)
    "read-timeout": Transient(
        lambda n: Reply(MARKED_ANSWER, delay_s=3.0) if n == 1 else None, 2, timeout=1
    ),
}


@pytest.mark.parametrize("case", TRANSIENT.values(), ids=TRANSIENT.keys())
async def test_transient_fault_is_retried_then_succeeds(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    case: Transient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="prefect.task_runs")  # the engine's retry records
    settings = with_llm(llm_settings, timeout=case.timeout) if case.timeout else llm_settings
    handler = FaultHandler(case.fault)
    fake_llm.reset(handler)
    trio = Trio.new()

    summary = await consolidate(settings, trio)

    assert (summary["scopes"], summary["completed"], summary["failed"]) == (3, 3, 0)
    assert handler.attempts == len(marked_requests(fake_llm)) == case.attempts
    # the group's extract task ran again for each failed attempt, and each time called the
    # model only for the scope that had no answer: the calm scopes, one call each
    assert extract_attempts(caplog) == {f"extract [{group_label(trio.users)}]": case.attempts - 1}
    assert fake_llm.calls == case.attempts + 2
    jobs = job_rows(db)
    assert jobs[trio.marked_user]["facts"] == len(MARKED_FACTS)
    assert facts_of(db, trio.marked_user) == MARKED_FACTS
    for user in trio.calm:
        assert facts_of(db, user) == [("User keeps a calm scope.", 0.6)]
    assert_nothing_half_written(db, completed=trio.users, failed=[])


# ---- connection refused: every scope fails after its retries, cleanly --------------------------


async def test_connection_refused_fails_every_scope_after_retries(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="prefect.task_runs")  # the engine's retry records
    settings = with_llm(llm_settings, api_base=f"http://127.0.0.1:{dead_port()}/v1")
    trio = Trio.new()

    summary = await consolidate(settings, trio)

    assert (summary["scopes"], summary["completed"], summary["failed"]) == (3, 0, 3)
    assert fake_llm.calls == 0
    jobs = job_rows(db)
    for user in trio.users:
        error = jobs[user]["error"]
        # the cause first, naming where the call went; then the call and the client's classes
        assert error.startswith(
            f"TransientExtractionError: connection refused to {origin(settings.llm.api_base)} "
            "(LLM call to openai/test-model failed: "
        ), error
        assert any(
            needle in error
            for needle in ("APIConnectionError", "InternalServerError", "Connection", "connect")
        ), error
    assert_nothing_half_written(db, completed=[], failed=trio.users)
    assert db.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone() == (0,)
    # the group's extract task ran the first time and then retried: all attempts spent
    assert extract_attempts(caplog) == {f"extract [{group_label(trio.users)}]": LLM_ATTEMPTS}
    artifact = await failures_artifact()
    assert all(key_of(Scope(user_id=u)) in artifact for u in trio.users)


# ---- permanent faults: an unusable answer fails the scope at once ------------------------------

PERMANENT = {
    "truncated-json": ('[{"content": "User is', "not valid JSON"),
    "object-without-list-or-content": (
        '{"unexpected": 1, "note": "no facts"}',
        "expected an array",
    ),
    "wrong-item-keys": ('[{"fact_text": "User likes tea.", "importance": 0.5}]', "no 'content'"),
    "importance-very": ('[{"content": "User likes tea.", "importance": "very"}]', "not a number"),
}


@pytest.mark.parametrize(("answer", "needle"), PERMANENT.values(), ids=PERMANENT.keys())
async def test_permanent_fault_fails_only_the_marked_scope_without_retry(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    answer: str,
    needle: str,
) -> None:
    handler = FaultHandler(lambda _n: Reply(answer))
    fake_llm.reset(handler)
    trio = Trio.new()

    summary = await consolidate(llm_settings, trio)

    assert (summary["scopes"], summary["completed"], summary["failed"]) == (3, 2, 1)
    assert handler.attempts == len(marked_requests(fake_llm)) == 1  # no retry of a bad answer
    error = job_rows(db)[trio.marked_user]["error"]
    assert error.startswith("ExtractionError: ") and needle in error, error
    assert_nothing_half_written(db, completed=trio.calm, failed=[trio.marked_user])
    [failed_row] = [r for r in summary["results"] if r["outcome"] == "failed"]
    assert failed_row["scope"] == trio.marked.label and needle in failed_row["error"]
    artifact = await failures_artifact()
    # Prefect is told the scope's key and the error's class, size and hash, not its words
    assert key_of(trio.marked) in artifact and needle not in artifact
    assert trio.marked_user not in artifact
    job = job_rows(db)[trio.marked_user]
    # a run started from Python has no deployment: no Prefect Retry is offered, the command is
    assert "Prefect's **Retry**" not in artifact
    assert f"agent-memory jobs retry --run {job['flow_run_id']}" in artifact
    assert f"agent-memory jobs retry --job {job['id']}" in artifact
    assert not any(key_of(s) in artifact for s in (trio.calm_a, trio.calm_b))
    # the failed content was not cached: the next run asks the model again, and now succeeds
    fake_llm.reset(lambda r: Reply(MARKED_ANSWER if is_marked(r) else CALM_ANSWER))
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    try:
        again = await manager.consolidate()
    finally:
        await manager.close()
    assert (again["scopes"], again["completed"]) == (1, 1)
    assert facts_of(db, trio.marked_user) == MARKED_FACTS


# ---- repairable answers: repaired without guessing, then stored --------------------------------


def _facts(*items: tuple[Any, Any]) -> str:
    return json.dumps([{"content": c, "importance": i} for c, i in items])


TEA = [("User likes tea.", 0.6)]
MANY = [
    {"content": f"User fact number {i:05d}.", "importance": i / 10_000} for i in range(1, 10_001)
]
TOP_200 = sorted(
    ((f["content"], f["importance"]) for f in MANY[-200:]), key=lambda f: (-f[1], f[0])
)

REPAIRABLE: dict[str, tuple[str, list[tuple[str, float]]]] = {
    "prose-around-json": (
        f"Sure! Here are the facts I found:\n{_facts(*TEA)}\nLet me know if you need more.",
        TEA,
    ),
    "fenced-json": (f"```json\n{_facts(*TEA)}\n```", TEA),
    "object-instead-of-array": (json.dumps({"facts": json.loads(_facts(*TEA))}), TEA),
    "importance-high": (_facts(("User likes tea.", "high")), [("User likes tea.", 0.8)]),
    "importance-1.7-clamped": (_facts(("User likes tea.", 1.7)), [("User likes tea.", 1.0)]),
    "importance-negative-dropped": (_facts(("User hates noise.", -1), *TEA), TEA),
    "10000-facts-top-200-kept": (json.dumps(MANY), TOP_200),
    "empty-content-dropped": (_facts(("", 0.9), ("  \n\t  ", 0.9), *TEA), TEA),
    "control-characters-removed": (
        _facts(("User\x00 likes\x07 green\x1b tea.\x7f", 0.6)),
        [("User likes green tea.", 0.6)],
    ),
}


@pytest.mark.parametrize(("answer", "expected"), REPAIRABLE.values(), ids=REPAIRABLE.keys())
async def test_repairable_answer_is_repaired_and_stored(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    answer: str,
    expected: list[tuple[str, float]],
) -> None:
    handler = FaultHandler(lambda _n: None, good=answer)
    fake_llm.reset(handler)
    trio = Trio.new()

    summary = await consolidate(llm_settings, trio)

    assert (summary["scopes"], summary["completed"], summary["failed"]) == (3, 3, 0)
    assert handler.attempts == len(marked_requests(fake_llm)) == 1
    stored = facts_of(db, trio.marked_user)
    assert [c for c, _ in stored] == [c for c, _ in expected]
    assert [i for _, i in stored] == pytest.approx([i for _, i in expected])
    assert job_rows(db)[trio.marked_user]["facts"] == len(expected)
    assert_nothing_half_written(db, completed=trio.users, failed=[])


# ---- prompt injection: conversations are data, never instructions -----------------------------


async def test_injection_stays_in_the_user_message_and_the_system_prompt_is_unchanged(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    handler = FaultHandler(lambda _n: None)  # a model that does not fall for it
    fake_llm.reset(handler)
    trio = Trio.new()

    summary = await consolidate(llm_settings, trio, marked_text=f"{MARK} {INJECTION}")

    assert (summary["scopes"], summary["completed"], summary["failed"]) == (3, 3, 0)
    assert fake_llm.calls == 3
    for request in fake_llm.requests:  # every request, marked or not, has the fixed prompt
        messages = request["messages"]
        assert [m["role"] for m in messages] == ["system", "user"]
        assert messages[0]["content"] == SYSTEM_PROMPT
    [request] = marked_requests(fake_llm)
    system, user = request["messages"]
    assert INJECTION not in system["content"] and "administrator" not in system["content"]
    # the conversation is quoted as data, inside the conversations block
    head, _, conversations = user["content"].partition("Conversations:\n\n")
    assert f"USER: {MARK} {INJECTION}" in conversations and INJECTION not in head
    assert sum(INJECTION in json.dumps(r) for r in fake_llm.requests) == 1
    assert facts_of(db, trio.marked_user) == MARKED_FACTS
    assert_nothing_half_written(db, completed=trio.users, failed=[])


async def test_injection_stores_nothing_with_the_offline_extractor(
    manager: MemoryManager, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    trio = Trio.new()
    await record_trio(
        manager, trio, marked_text=f"I'm a data engineer. {INJECTION}. Ticket {MARK}."
    )

    summary = await run_for_summary(consolidation_flow, ConsolidationParams())

    assert summary["extractor"] == "offline-rules"
    assert (summary["scopes"], summary["completed"], summary["failed"]) == (3, 3, 0)
    assert fake_llm.calls == 0
    assert (
        db.execute(
            "SELECT content FROM agent_memory.memory_items WHERE content ILIKE '%administrator%'"
        ).fetchall()
        == []
    )
    assert facts_of(db, trio.marked_user) == [("User is a data engineer.", 0.9)]
    for user in trio.calm:
        assert facts_of(db, user)
    assert_nothing_half_written(db, completed=trio.users, failed=[])
