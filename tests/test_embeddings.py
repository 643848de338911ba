"""Relevance by meaning: embeddings computed in the consolidation flow (through litellm, over
real HTTP to the loopback server's /v1/embeddings), stored with pgvector, used by inject; the
re-embedding flow after a change of model; and the fallbacks to full-text relevance."""

from __future__ import annotations

import logging
import math
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from agent_memory import MemoryManager
from agent_memory.errors import EmbeddingError
from agent_memory.settings import Settings
from benchmarks.retrieval import load_facts
from tests.embedded import DANA, DATA, with_embeddings
from tests.fake_llm import FakeLLM


@pytest.mark.usefixtures("prefect_harness")
async def test_consolidation_embeds_new_facts_and_inject_ranks_by_meaning(
    embedded: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    manager = await MemoryManager.create(settings=embedded, migrate=False)
    try:
        await manager.record(DANA, [HumanMessage("Let me tell you about myself.")])
        summary = await manager.consolidate(DANA)
        assert summary["completed"] == 1 and summary["facts_created"] == len(DATA["facts"])
        rows = db.execute(
            "SELECT model, vector_dims(embedding) FROM agent_memory.fact_embeddings"
        ).fetchall()
        assert rows == [("openai/embed-a", 256)] * len(DATA["facts"])
        # one batch of 25 facts and one of the conversation's messages, off the hot path
        assert [r["input"] for r in fake_llm.embedding_requests][1] == [
            "Let me tell you about myself."
        ]
        assert len(fake_llm.embedding_requests) == 2

        frame = await manager.inject(DANA, query="Any tips for my daughter's violin practice?")
        assert frame.ranking == "vector"
        assert frame.injected_facts[0] == "User's daughter plays the violin."
        assert len(fake_llm.embedding_requests) == 3  # inject embedded just the question
        assert fake_llm.embedding_requests[-1]["input"] == [
            "Any tips for my daughter's violin practice?"
        ]
        hits = [
            q["needs"] in (await manager.inject(DANA, query=q["question"])).injected_facts
            for q in DATA["questions"]
        ]
        assert sum(hits) / len(hits) >= 0.9
        # the sync face ranks the same way
        assert manager.inject_sync(DANA, query="violin") == await manager.inject(
            DANA, query="violin"
        )
    finally:
        await manager.close()


@pytest.mark.usefixtures("prefect_harness")
async def test_reembedding_flow_moves_every_fact_to_a_new_model(
    settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    from agent_memory.settings import use_settings
    from agent_memory_flows.embeddings import EmbedParams, reembed_flow

    load_facts(db, DANA, DATA["facts"])
    use_settings(with_embeddings(settings, fake_llm, "openai/embed-a"))
    first = await reembed_flow(EmbedParams(limit=10))
    assert (first["embedded_now"], first["embedded"], first["left"]) == (10, 10, 15)
    rest = await reembed_flow(EmbedParams())
    assert (rest["embedded_now"], rest["left"]) == (15, 0)
    again = await reembed_flow(EmbedParams())
    assert again["embedded_now"] == 0  # nothing to redo

    changed = with_embeddings(settings, fake_llm, "openai/embed-b")
    use_settings(changed)
    manager = await MemoryManager.create(settings=changed, migrate=False)
    try:
        # before re-embedding, the new model knows no fact: nothing breaks, none is "relevant"
        frame = await manager.inject(DANA, query="violin")
        assert frame.ranking == "vector" and len(frame.injected_facts) == 5
        moved = await reembed_flow(EmbedParams())
        assert (moved["model"], moved["embedded_now"], moved["left"]) == ("openai/embed-b", 25, 0)
        models = db.execute("SELECT DISTINCT model FROM agent_memory.fact_embeddings").fetchall()
        assert models == [("openai/embed-b",)]
        frame = await manager.inject(DANA, query="Any tips for my daughter's violin practice?")
        assert frame.injected_facts[0] == "User's daughter plays the violin."
    finally:
        await manager.close()
        use_settings(settings)


class Lines(logging.Handler):
    """The messages a logger emits, whatever the root logger's handlers."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.text = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.text += record.getMessage() + "\n"


@pytest.mark.usefixtures("prefect_harness")
async def test_a_failing_embedding_model_leaves_consolidation_and_inject_working(
    embedded: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    fake_llm.embedding_status = 500
    manager = await MemoryManager.create(settings=embedded, migrate=False)
    try:
        await manager.record(DANA, [HumanMessage("Let me tell you about myself.")])
        # a handler on the runner's own logger: Prefect's logging setup, on a process's first
        # flow run, replaces the root handlers that caplog reads
        runner_log, seen = logging.getLogger("agent_memory"), Lines()
        runner_log.addHandler(seen)
        try:
            summary = await manager.consolidate(DANA)
        finally:
            runner_log.removeHandler(seen)
        # the facts are written; only their embeddings wait
        assert summary["completed"] == 1 and summary["facts_created"] == len(DATA["facts"])
        assert db.execute("SELECT count(*) FROM agent_memory.fact_embeddings").fetchone() == (0,)
        # the cause first, where the call went and what came back, then the call
        assert "facts not embedded yet: 500 from the provider at http://127.0.0.1:" in seen.text
        assert "(embedding call to openai/embed-a failed: " in seen.text
        manager_log, seen = logging.getLogger("agent_memory"), Lines()
        manager_log.addHandler(seen)
        try:
            frame = await manager.inject(DANA, query="Any tips for my daughter's violin practice?")
        finally:
            manager_log.removeHandler(seen)
        assert frame.ranking == "text"  # full-text relevance stood in for this inject
        assert frame.injected_facts[0] == "User's daughter plays the violin."
        assert "embedding call to openai/embed-a failed" in seen.text
        assert "sk-embed-SECRET" not in seen.text
    finally:
        await manager.close()
    fake_llm.embedding_status = 200
    from agent_memory_flows.embeddings import EmbedParams, reembed_flow

    assert (await reembed_flow(EmbedParams()))["embedded_now"] == len(DATA["facts"])


def refusals(db: psycopg.Connection[Any]) -> dict[str, str]:
    """content -> reason of every fact an embedding model refused."""
    rows = db.execute(
        """SELECT m.content, r.reason FROM agent_memory.fact_embedding_rejections r
           JOIN agent_memory.memory_items m ON m.id = r.fact_id"""
    ).fetchall()
    return dict(rows)


@pytest.mark.usefixtures("prefect_harness")
async def test_facts_the_model_refuses_are_set_aside_and_the_others_embedded(
    embedded: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any], caplog: Any
) -> None:
    from agent_memory.settings import use_settings
    from agent_memory_flows.embeddings import EmbedParams, reembed_flow

    by_length = sorted((f["content"] for f in DATA["facts"]), key=len)
    too_long = set(by_length[-2:])  # over the model's limit, so their batch is a 400
    fake_llm.embedding_max_chars = len(by_length[-3])
    fake_llm.embedding_zero_for = "violin"  # no usable vector for this one
    manager = await MemoryManager.create(settings=embedded, migrate=False)
    use_settings(embedded)
    try:
        await manager.record(DANA, [HumanMessage("Let me tell you about myself.")])
        with caplog.at_level(logging.WARNING):
            summary = await manager.consolidate(DANA)
        assert summary["completed"] == 1 and summary["facts_created"] == len(DATA["facts"])
        refused = refusals(db)
        assert set(refused) == too_long | {"User's daughter plays the violin."}
        assert all("maximum context length" in refused[c] for c in too_long)
        assert "empty or zero vector" in refused["User's daughter plays the violin."]
        embedded_count = db.execute("SELECT count(*) FROM agent_memory.fact_embeddings")
        assert embedded_count.fetchone() == (len(DATA["facts"]) - 3,)
        assert caplog.text.count("is left without an embedding") == 3
        # a probe, halving finds each too-long text in about 2·log2(batch) calls, a last probe;
        # the zero vector needs no halving: the answer says which text it belongs to
        message = ["Let me tell you about myself."]  # the conversation's, embedded after
        assert fake_llm.embedding_requests[-1]["input"] == message
        requests = fake_llm.embedding_requests[:-1]
        assert requests[1]["input"] == requests[-1]["input"] == ["memory"]
        assert len(requests) <= 3 + 2 * 2 * math.ceil(math.log2(len(DATA["facts"])))

        # inject still ranks by meaning; a refused fact is just not related by meaning
        frame = await manager.inject(DANA, query="When is the ETL job scheduled?")
        assert frame.ranking == "vector" and len(frame.injected_facts) == 5

        # not asked for again: the runs go on past them
        again = await reembed_flow(EmbedParams())
        assert (again["embedded_now"], again["refused_now"], again["left"]) == (0, 0, 0)
        assert (again["refused"], again["refusals"]) == (3, [])
        calls = len(fake_llm.embedding_requests)
        fake_llm.embedding_max_chars = fake_llm.embedding_zero_for = None  # the limit is raised
        assert (await reembed_flow(EmbedParams()))["embedded_now"] == 0
        assert len(fake_llm.embedding_requests) == calls
        retried = await reembed_flow(EmbedParams(retry_rejected=True))
        assert (retried["embedded_now"], retried["refused"], retried["left"]) == (3, 0, 0)
        assert refusals(db) == {}
        frame = await manager.inject(DANA, query="Any tips for my daughter's violin practice?")
        assert frame.injected_facts[0] == "User's daughter plays the violin."
    finally:
        await manager.close()


@pytest.mark.usefixtures("prefect_harness", "stored_facts")
async def test_a_model_that_refuses_everything_is_a_setting_to_fix_not_refused_facts(
    fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    from agent_memory_flows.embeddings import EmbedParams, reembed_flow

    fake_llm.embedding_status = 400  # e.g. dimensions the model does not offer
    with pytest.raises(EmbeddingError, match="refuses every input, a probe text too"):
        await reembed_flow(EmbedParams())
    # the batch, then the probe, and nothing more: not halved, not retried by the task
    requests = fake_llm.embedding_requests
    assert [len(r["input"]) for r in requests] == [len(DATA["facts"]), 1]
    assert requests[-1]["input"] == ["memory"]
    assert refusals(db) == {}
    assert db.execute("SELECT count(*) FROM agent_memory.fact_embeddings").fetchone() == (0,)
    fake_llm.embedding_status = 200  # the setting is fixed
    assert (await reembed_flow(EmbedParams()))["embedded_now"] == len(DATA["facts"])


async def test_the_refusals_of_purged_facts_are_pruned(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    from agent_memory.db import embeddings as repo

    load_facts(db, DANA, DATA["facts"][:3])
    ids = [r[0] for r in db.execute("SELECT id FROM agent_memory.memory_items ORDER BY id")]
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        assert await repo.reject(conn, "openai/embed-a", ids[:2], ["too long"] * 2) == 2
        db.execute("DELETE FROM agent_memory.memory_items WHERE id = %s", (ids[0],))  # purged
        # the purged fact's refusal goes at the next recording; a purged fact is not recorded
        assert await repo.reject(conn, "openai/embed-a", [ids[0], ids[2]], ["x", "policy"]) == 1
    rows = db.execute(
        "SELECT fact_id, reason FROM agent_memory.fact_embedding_rejections ORDER BY 1"
    ).fetchall()
    assert rows == [(ids[1], "too long"), (ids[2], "policy")]


@pytest.mark.usefixtures("prefect_harness")
async def test_a_consolidation_beside_a_model_that_refuses_everything_writes_its_facts(
    embedded: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    fake_llm.embedding_status = 400  # a setting the model does not take
    manager = await MemoryManager.create(settings=embedded, migrate=False)
    try:
        await manager.record(DANA, [HumanMessage("Let me tell you about myself.")])
        summary = await manager.consolidate(DANA)
    finally:
        await manager.close()
    # the scope is done; its facts wait for embeddings; two calls, no retries, nothing refused
    assert summary["completed"] == 1 and summary["facts_created"] == len(DATA["facts"])
    assert [len(r["input"]) for r in fake_llm.embedding_requests] == [len(DATA["facts"]), 1]
    assert refusals(db) == {}


@pytest.mark.usefixtures("prefect_harness", "stored_facts")
async def test_a_service_failure_while_halving_records_nothing_and_the_retry_embeds_all(
    fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    from agent_memory_flows.embeddings import EmbedParams, reembed_flow

    # the batch is refused, the probe passes, then the service fails on the first half
    fake_llm.embedding_status_queue = [400, 200, 503]
    done = await reembed_flow(EmbedParams())
    assert (done["embedded_now"], done["refused"], done["left"]) == (len(DATA["facts"]), 0, 0)
    assert refusals(db) == {}


@pytest.mark.usefixtures("prefect_harness", "stored_facts")
async def test_a_call_refused_whole_but_accepted_in_parts_embeds_all_and_says_so(
    fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    from agent_memory_flows.embeddings import EmbedParams, reembed_flow

    fake_llm.embedding_status_queue = [422]  # e.g. more texts in one call than the model takes
    # a handler on the logger itself: caplog's, on the root, is gone once the process's first
    # flow run has set Prefect's logging up (so this failed when it ran first in its worker)
    embedding_log, seen = logging.getLogger("agent_memory.embedding"), Lines()
    embedding_log.addHandler(seen)
    try:
        done = await reembed_flow(EmbedParams())
    finally:
        embedding_log.removeHandler(seen)
    assert (done["embedded_now"], done["refused"]) == (len(DATA["facts"]), 0)
    assert refusals(db) == {}
    assert "refused a call of 25 texts but accepted each part" in seen.text
    assert "AGENT_MEMORY_EMBEDDING_BATCH_SIZE=64" in seen.text


@pytest.mark.usefixtures("prefect_harness")
def test_embed_command_counts_refused_facts_and_retries_them(
    database_url: str, fake_llm: FakeLLM, db: psycopg.Connection[Any], monkeypatch: Any
) -> None:
    from typer.testing import CliRunner

    from agent_memory_deployments import cli
    from agent_memory_deployments.cli import app

    monkeypatch.setattr(cli.console, "width", 250)  # one line, not wrapped at 80 columns
    for name, value in {
        "DATABASE_URL": database_url,
        "AGENT_MEMORY_EMBEDDING_MODEL": "openai/embed-a",
        "AGENT_MEMORY_EMBEDDING_API_BASE": fake_llm.api_base,
        "AGENT_MEMORY_EMBEDDING_API_KEY": "sk-embed-SECRET",
    }.items():
        monkeypatch.setenv(name, str(value))
    load_facts(db, DANA, DATA["facts"])
    fake_llm.embedding_max_chars = 62  # two facts are longer
    runner = CliRunner()
    first = runner.invoke(app, ["embed"])
    assert first.exit_code == 0, first.output
    assert "23 fact(s) embedded with openai/embed-a, 2 refused;" in first.output
    assert "0 still to do, 2 refused" in first.output
    assert first.output.count("maximum context length is 62 tokens") >= 2  # each one's reason
    assert "refused fact " in first.output
    fake_llm.embedding_max_chars = None
    retried = runner.invoke(app, ["embed", "--retry-rejected"])
    assert retried.exit_code == 0, retried.output
    assert "2 fact(s) embedded with openai/embed-a, 0 refused;" in retried.output
    assert "25 have its embedding, 0 still to do, 0 refused" in retried.output
