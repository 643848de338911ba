"""An LLM failure leads with its cause in words, naming where the call went ("connection refused
to http://127.0.0.1:PORT", "401 from the provider at ...", "no answer within N s from ..."),
then the call and the client's classes; what the orchestrator is told, and the tables an
operator reads, show that cause first. Real HTTP on loopback: a closed port, the fake
OpenAI-compatible server answering 401, and a server that takes the request and never answers."""

from __future__ import annotations

import json
import os
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.causes import cause_first, leading_cause, origin
from agent_memory.errors import ExtractorSetupError, TransientExtractionError
from agent_memory.extraction.llm import LLMExtractor
from agent_memory.pseudonyms import summarise
from agent_memory.settings import LLMSettings, Settings
from tests.fake_llm import FakeLLM, Reply
from tests.llm_faults import dead_port, silent_server, with_llm
from tests.processes import run_interpreter

KEY = "sk-test-SECRET-key-123"
ASK = [{"role": "user", "content": "What do you remember?"}]


def llm(api_base: str, timeout: float = 5) -> LLMSettings:
    return LLMSettings(model="openai/cause-test", api_base=api_base, api_key=KEY, timeout=timeout)


async def failure_of(settings: LLMSettings) -> Exception:
    with pytest.raises(Exception) as failed:
        await LLMExtractor(settings).complete(ASK)
    assert KEY not in str(failed.value)
    return failed.value


def unauthorized(_request: dict[str, Any]) -> Reply:
    body = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
    return Reply(status=401, body=json.dumps(body))


async def test_a_refused_connection_says_so_and_names_the_address() -> None:
    port = dead_port()
    error = await failure_of(llm(f"http://127.0.0.1:{port}/v1"))
    assert isinstance(error, TransientExtractionError)
    cause = f"connection refused to http://127.0.0.1:{port}"
    assert str(error).startswith(f"{cause} (LLM call to openai/cause-test failed: ")
    assert "InternalServerError" in str(error)  # the client's classes follow the cause
    assert leading_cause(str(error)) == cause
    assert summarise(error).startswith(f"{cause}: TransientExtractionError ")


async def test_a_rejected_key_leads_with_the_status_and_the_server(fake_llm: FakeLLM) -> None:
    fake_llm.reset(unauthorized)
    error = await failure_of(llm(fake_llm.api_base))
    assert isinstance(error, ExtractorSetupError)
    cause = f"401 from the provider at {origin(fake_llm.api_base)}"
    assert str(error).startswith(f"{cause}: it rejected the credentials. Check ")
    assert "(LLM call to openai/cause-test failed: AuthenticationError: " in str(error)
    assert summarise(error).startswith(f"{cause}: ExtractorSetupError <- ")


async def test_a_server_that_never_answers_is_cut_at_the_deadline_naming_it() -> None:
    with silent_server() as api_base:
        error = await failure_of(llm(api_base, timeout=0.5))
    assert isinstance(error, TransientExtractionError)
    cause = f"no answer within 0.5 s from {origin(api_base)}"
    assert str(error) == (
        f"{cause} (AGENT_MEMORY_LLM_TIMEOUT=0.5; LLM call to openai/cause-test failed)"
    )
    assert summarise(error).startswith(f"{cause}: TransientExtractionError ")


def test_an_address_is_said_by_scheme_host_and_port_only() -> None:
    assert origin("https://user:pw@llm.example.com:8443/v1?key=abc") == (
        "https://llm.example.com:8443"
    )
    assert origin("http://[::1]:8000/v1") == "http://[::1]:8000"
    assert origin(None) == origin("not a url") == "the provider"
    # a table column shows the cause, then the class
    row = "TransientExtractionError: connection refused to http://127.0.0.1:9 (LLM call to x)"
    assert (
        cause_first(row, 80)
        == ("connection refused to http://127.0.0.1:9 (LLM call to x) [TransientExtractionError]")[
            :79
        ]
        + "\u2026"
    )
    # the project's phrases only: a message that merely mentions one leads with nothing
    assert leading_cause("fact 0: 'connection refused to http://x' is not a fact") is None


async def _consolidate(settings: Settings, scope: Scope, talks: int) -> Any:
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        for n in range(talks):
            await manager.record(scope, [{"role": "user", "content": f"I run Airflow, take {n}."}])
        return await manager.consolidate(scope)
    finally:
        await manager.close()


async def _summary_errors() -> list[str]:
    from prefect.artifacts import Artifact

    from agent_memory_flows.reports import SUMMARY_KEY

    artifact = await Artifact.aget(SUMMARY_KEY)
    assert artifact is not None
    rows = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    return [str(r["error"]) for r in rows]


@pytest.mark.usefixtures("prefect_harness")
async def test_tables_show_each_failures_cause_and_the_episodes_it_held(
    llm_settings: Settings,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
) -> None:
    port = dead_port()
    refused = f"connection refused to http://127.0.0.1:{port}"
    rejected = f"401 from the provider at {origin(fake_llm.api_base)}"
    dead_llm = with_llm(llm_settings, api_base=f"http://127.0.0.1:{port}/v1")
    one = await _consolidate(dead_llm, Scope(user_id="cause-refused"), talks=2)
    assert one["failed"] == 1
    # the summary artifact's short error column: the cause first, then the classes
    assert [e[: len(refused)] for e in await _summary_errors()] == [refused]
    fake_llm.reset(unauthorized)
    two = await _consolidate(with_llm(llm_settings), Scope(user_id="cause-rejected"), talks=1)
    assert two["failed"] == 1
    assert [e[: len(rejected)] for e in await _summary_errors()] == [rejected]

    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    env["DATABASE_URL"] = llm_settings.db.url.get_secret_value()  # type: ignore[union-attr]
    result = run_interpreter(["-m", "agent_memory_deployments.cli", "jobs", "list"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {
        cells[2]: cells
        for line in result.stdout.splitlines()
        if (cells := [c.strip() for c in line.split("│")])[2:3] != [""] and len(cells) > 12
    }
    # each row says its own cause, and the episodes the failed attempt held
    assert rows["user=cause-refused"][3:5] == ["failed", "2"]
    assert rows["user=cause-refused"][-2].startswith(refused)
    assert rows["user=cause-rejected"][3:5] == ["failed", "1"]
    assert rows["user=cause-rejected"][-2].startswith(rejected)


# ---- the embedding model's failures lead with their cause too --------------------------------


def embedding(api_base: str, timeout: float = 120) -> Any:
    """An embedder of the loopback ``api_base``; a long deadline but where a test means to
    pass it: a refused or rejected call ends at once, and a loaded machine's first call (the
    client's set-up included) must not meet the deadline first."""
    from agent_memory.embedding import make_embedder
    from agent_memory.settings import EmbeddingSettings

    return make_embedder(
        EmbeddingSettings(
            model="openai/embed-cause", api_base=api_base, api_key=KEY, timeout=timeout
        )
    )


async def test_an_embedding_call_refused_or_rejected_or_unanswered_leads_with_why(
    fake_llm: FakeLLM,
) -> None:
    from agent_memory.errors import EmbeddingError, TransientEmbeddingError

    port = dead_port()
    with pytest.raises(TransientEmbeddingError) as refused:
        await embedding(f"http://127.0.0.1:{port}/v1").embed(["a text"])
    cause = f"connection refused to http://127.0.0.1:{port}"
    assert str(refused.value).startswith(f"{cause} (embedding call to openai/embed-cause failed: ")
    assert leading_cause(str(refused.value)) == cause and KEY not in str(refused.value)

    fake_llm.embedding_status = 401
    try:
        with pytest.raises(EmbeddingError) as rejected:
            await embedding(fake_llm.api_base).embed(["a text"])
    finally:
        fake_llm.embedding_status = 200
    assert str(rejected.value).startswith(f"401 from the provider at {origin(fake_llm.api_base)} (")
    assert KEY not in str(rejected.value)

    with silent_server() as api_base, pytest.raises(TransientEmbeddingError) as silent:
        await embedding(api_base, timeout=0.5).embed(["a text"])
    assert str(silent.value).startswith(f"no answer within 0.5 s from {origin(api_base)} (")
