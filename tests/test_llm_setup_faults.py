"""The LLM fault matrix, continued: deadlines, faults a setting causes (failing at once, naming
it), the first import of litellm, and what the UI draws (see tests/test_llm_faults.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from agent_memory.causes import origin
from agent_memory.settings import Settings
from tests.fake_llm import FakeLLM, Reply
from tests.llm_faults import (
    CALM_ANSWER,
    LLM_ATTEMPTS,
    MARKED_ANSWER,
    FaultHandler,
    Trio,
    assert_nothing_half_written,
    consolidate,
    extract_attempts,
    group_label,
    job_rows,
    key_of,
    with_llm,
)

pytestmark = pytest.mark.usefixtures("prefect_harness")


# ---- deadlines: AGENT_MEMORY_LLM_TIMEOUT bounds the whole call, not each read -------------------


@pytest.mark.parametrize(
    "reply",
    [
        # a whole answer, a byte every 0.2 s: each read is in time, the call would take minutes
        Reply(MARKED_ANSWER, drip_s=0.2),
        Reply(endless=True, drip_s=0.2),  # an answer that never ends
    ],
    ids=["drips-its-answer", "never-stops-sending"],
)
async def test_a_call_that_outlasts_the_timeout_is_cut_at_it_and_retried(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any], reply: Reply
) -> None:
    settings = with_llm(llm_settings, timeout=1)
    handler = FaultHandler(lambda _n: reply)
    fake_llm.reset(handler)
    trio = Trio.new()

    summary = await consolidate(settings, trio)

    assert (summary["scopes"], summary["completed"], summary["failed"]) == (3, 2, 1)
    assert handler.attempts == LLM_ATTEMPTS  # a deadline is an outage: retried, then failed
    error = job_rows(db)[trio.marked_user]["error"]
    # the cause first, with the server it waited on, then the setting and the call
    assert error == (
        f"TransientExtractionError: no answer within 1 s from {origin(fake_llm.api_base)} "
        "(AGENT_MEMORY_LLM_TIMEOUT=1; LLM call to openai/test-model failed)"
    )
    assert_nothing_half_written(db, completed=trio.calm, failed=[trio.marked_user])


# ---- a setting is the cause: fail at once, naming it --------------------------------------------


def error_body(status: int, message: str, code: str | None = None) -> Reply:
    return Reply(
        status=status,
        body=json.dumps(
            {"error": {"message": message, "type": "invalid_request_error", "code": code}}
        ),
    )


SETUP = {
    "key-rejected-401": (
        error_body(401, "Incorrect API key provided: sk-te***123.", "invalid_api_key"),
        "401 from the provider at {where}: it rejected the credentials. Check "
        "AGENT_MEMORY_LLM_API_KEY",
    ),
    "key-forbidden-403": (
        error_body(403, "Project does not have access to model test-model"),
        "403 from the provider at {where}: it rejected the credentials. Check "
        "AGENT_MEMORY_LLM_API_KEY",
    ),
    "unknown-model-404": (
        error_body(404, "The model `test-model` does not exist.", "model_not_found"),
        "404 from the provider at {where}: it does not know this model (or the endpoint). "
        "Check AGENT_MEMORY_LLM_MODEL",
    ),
    "no-credit-402": (
        error_body(402, "You exceeded your current quota."),
        "402 from the provider at {where}: the account behind AGENT_MEMORY_LLM_API_KEY is out "
        "of credit",
    ),
}


@pytest.mark.parametrize(("reply", "needle"), SETUP.values(), ids=SETUP.keys())
async def test_a_setting_the_provider_refuses_fails_every_scope_at_once_naming_it(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
    reply: Reply,
    needle: str,
) -> None:
    caplog.set_level(logging.INFO, logger="prefect.task_runs")
    fake_llm.reset(lambda _r: reply)
    trio = Trio.new()

    summary = await consolidate(llm_settings, trio)

    assert (summary["scopes"], summary["completed"], summary["failed"]) == (3, 0, 3)
    assert extract_attempts(caplog) == {}  # no task retried
    # at most one call per scope (they start together); once one has failed on the setting,
    # the run's later calls are not sent
    assert 1 <= fake_llm.calls <= 3
    jobs = job_rows(db)
    for user in trio.users:
        # the cause leads, naming the server; the call and the client's classes follow
        lead = "ExtractorSetupError: " + needle.format(where=origin(fake_llm.api_base))
        assert jobs[user]["error"].startswith(lead), jobs[user]["error"]
        assert "(LLM call to openai/test-model failed: " in jobs[user]["error"]
        assert "sk-test-SECRET-key-123" not in jobs[user]["error"]
    assert_nothing_half_written(db, completed=[], failed=trio.users)


async def test_no_api_key_fails_at_once_naming_the_setting_and_sends_nothing(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger="prefect.task_runs")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = with_llm(llm_settings, api_key=None)
    trio = Trio.new()

    summary = await consolidate(settings, trio)

    assert (summary["scopes"], summary["completed"], summary["failed"]) == (3, 0, 3)
    assert fake_llm.calls == 0 and summary["llm_calls"] == 0  # nothing left the process
    assert extract_attempts(caplog) == {}
    for user, job in job_rows(db).items():
        assert job["error"].startswith(
            "ExtractorSetupError: no API key was given, so nothing was sent. Set "
            "AGENT_MEMORY_LLM_API_KEY (or OPENAI_API_KEY)."
        ), job["error"]
        assert "(LLM call to openai/test-model failed: " in job["error"]
        assert job["llm_calls"] == 0, user
    assert_nothing_half_written(db, completed=[], failed=trio.users)


async def test_a_batch_over_the_context_window_fails_its_scope_at_once_naming_the_setting(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    too_long = error_body(
        400,
        "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 9000 tokens. Please reduce the length of the messages.",
        "context_length_exceeded",
    )
    handler = FaultHandler(lambda _n: too_long)
    fake_llm.reset(handler)
    trio = Trio.new()

    summary = await consolidate(llm_settings, trio)

    # only that scope's batch is too long: the others are consolidated
    assert (summary["scopes"], summary["completed"], summary["failed"]) == (3, 2, 1)
    assert handler.attempts == 1
    error = job_rows(db)[trio.marked_user]["error"]
    assert "Lower AGENT_MEMORY_LLM_BATCH_TOKENS (now 8000)" in error, error
    assert_nothing_half_written(db, completed=trio.calm, failed=[trio.marked_user])


@pytest.mark.parametrize(
    ("reply", "needle", "attempts"),
    [
        (Reply(body=""), "is not JSON (an empty or cut-short body)", 3),
        (Reply(body='{"id": "x", "object": "chat.completion", "choices": []}'), "no choices", 1),
    ],
    ids=["empty-200-body", "no-choices"],
)
async def test_an_answer_with_nothing_in_it_says_what_happened(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    reply: Reply,
    needle: str,
    attempts: int,
) -> None:
    handler = FaultHandler(lambda _n: reply)
    fake_llm.reset(handler)
    trio = Trio.new()

    summary = await consolidate(llm_settings, trio)

    assert (summary["completed"], summary["failed"]) == (2, 1)
    assert handler.attempts == attempts  # a cut body may be a glitch: retried; no choices: not
    error = job_rows(db)[trio.marked_user]["error"]
    assert needle in error and "Expecting value" not in error.split("(")[0], error
    assert_nothing_half_written(db, completed=trio.calm, failed=[trio.marked_user])


# ---- the first import of litellm: before the run opens connections, off the event loop ----------


async def test_litellm_is_imported_before_the_run_opens_connections_and_off_the_event_loop(
    llm_settings: Settings, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent_memory_flows.run as consolidation_flows
    from agent_memory.extraction import llm as llm_module

    events: list[Any] = []
    real_litellm, real_pool = llm_module._litellm, consolidation_flows.open_run_pool

    def slow_first_import() -> Any:
        if not any(isinstance(e, tuple) for e in events):
            try:
                asyncio.get_running_loop()
                on_loop = True
            except RuntimeError:
                on_loop = False
            events.append(("import", on_loop))  # where a 15 s import would have stalled
        return real_litellm()

    def recorded_pool(settings: Settings) -> Any:
        events.append("pool")
        return real_pool(settings)

    monkeypatch.setattr(llm_module, "_litellm", slow_first_import)
    monkeypatch.setattr(consolidation_flows, "open_run_pool", recorded_pool)
    fake_llm.reset(lambda _r: Reply(CALM_ANSWER))

    summary = await consolidate(llm_settings, Trio.new())

    assert summary["completed"] == 3
    assert events[:2] == [("import", False), "pool"]


# ---- what the UI draws: load -> extract -> write, and a failure in red ------------------------


async def test_the_task_graph_links_the_steps_and_a_failed_scope_s_task_reads_failed(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    fake_llm.reset(FaultHandler(lambda _n: Reply('[{"content": "User is')))  # not JSON
    trio = Trio.new()
    await consolidate(llm_settings, trio)
    run_id = job_rows(db)[trio.marked_user]["flow_run_id"]

    async def task_runs() -> dict[str, Any]:
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
            )
        return {r.name: r for r in runs}

    group = group_label(trio.users)
    steps = [f"{step} [{group}]" for step in ("load", "extract", "write", "fail")]

    def settled(runs: dict[str, Any]) -> bool:  # the server has every step's final state
        return set(steps) <= set(runs) and all(
            r.state and r.state.is_final() for r in runs.values()
        )

    runs: dict[str, Any] = {}
    for _ in range(240):  # task run states reach the server as events, a little later
        runs = await task_runs()
        if settled(runs):
            break
        await asyncio.sleep(0.5)
    else:
        raise AssertionError(f"the run's task runs never all reached a final state: {runs}")
    load, extract, write, fail = (runs[name] for name in steps)

    def upstream(run: Any) -> set[Any]:
        return {i.id for i in run.task_inputs.get("wait_for", [])}

    # one task run per step for the group's three scopes, each waiting for the ones before
    assert upstream(extract) == {load.id}
    assert upstream(write) == {load.id, extract.id}
    assert upstream(fail) == {load.id, extract.id, write.id}
    assert fail.state.type.value == "FAILED"
    assert f"1 scope(s) failed; episodes stay pending ({key_of(trio.marked)}: " in str(
        fail.state.message
    )
    assert write.state.type.value == "COMPLETED"


@pytest.mark.parametrize("quiet", [True, False], ids=["the-command", "an-application"])
def test_litellm_s_banner_is_printed_only_where_the_process_is_not_the_library_s(
    fake_llm: FakeLLM, quiet: bool
) -> None:
    # a process of its own, as the command's is (whose main() asks for quiet)
    fake_llm.reset(
        lambda _req: error_body(400, "maximum context length", "context_length_exceeded")
    )
    code = f"""
import asyncio
from agent_memory.extraction import build_extractor
from agent_memory.extraction.llm import quiet_litellm
from agent_memory.settings import LLMSettings
if {quiet}:
    quiet_litellm()
extractor = build_extractor(LLMSettings(
    model="openai/test-model", api_base={fake_llm.api_base!r}, api_key="sk-test", timeout=30))
extractor.warm()
try:
    asyncio.run(extractor.complete([{{"role": "user", "content": "hello"}}]))
except Exception as exc:
    print("raised", type(exc).__name__)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    # the error is raised either way; litellm's "Give Feedback" banner only where not quiet
    assert done.stdout.splitlines()[-1] == "raised ExtractionError", done.stdout
    assert ("Give Feedback" in done.stdout) is not quiet, done.stdout
    assert fake_llm.calls == 1
