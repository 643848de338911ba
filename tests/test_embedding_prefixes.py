"""A model trained with a prefix for each kind of text (E5's ``query: `` and ``passage: ``):
questions are sent after the query prefix, stored texts after the document prefix, over real
HTTP to the loopback server; the vectors are named for the model and its prefixes, so a change
of prefix re-embeds as a change of model does; and a prefix for the bundled model is refused."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from agent_memory import MemoryManager
from agent_memory.errors import SettingsError
from agent_memory.settings import EmbeddingSettings, Settings
from tests.embedded import DANA, DATA
from tests.fake_llm import FakeLLM


def with_prefixes(settings: Settings, fake_llm: FakeLLM, query: str, document: str) -> Settings:
    embedding = EmbeddingSettings(
        model="openai/e5",
        api_base=fake_llm.api_base,
        api_key="sk-embed-SECRET",
        query_prefix=query,
        document_prefix=document,
    )
    return settings.model_copy(update={"embedding": embedding})


def sent(fake_llm: FakeLLM) -> list[str]:
    return [text for r in fake_llm.embedding_requests for text in r["input"]]


@pytest.mark.usefixtures("prefect_harness")
async def test_questions_and_stored_texts_each_get_their_prefix(
    embedded: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    settings = with_prefixes(embedded, fake_llm, "query: ", "passage: ")
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await manager.record(DANA, [HumanMessage("Let me tell you about myself.")])
        await manager.consolidate(DANA)
        stored = sent(fake_llm)
        assert len(stored) == len(DATA["facts"]) + 1  # the facts, and the message
        assert all(text.startswith("passage: ") for text in stored)
        assert "passage: Let me tell you about myself." in stored
        models = db.execute(
            "SELECT DISTINCT model FROM agent_memory.fact_embeddings"
            " UNION SELECT DISTINCT model FROM agent_memory.snippet_embeddings"
        ).fetchall()
        assert models == [("openai/e5 ['query: ', 'passage: ']",)]

        fake_llm.embedding_requests.clear()
        frame = await manager.inject(DANA, query="Any tips for my daughter's violin practice?")
        assert sent(fake_llm) == ["query: Any tips for my daughter's violin practice?"]
        assert "User's daughter plays the violin." in frame.injected_facts
        assert frame.ranking == "vector"  # the fixture ranks by meaning alone
        fake_llm.embedding_requests.clear()
        found = await manager.search_conversations(DANA, "about myself")
        assert sent(fake_llm) == ["query: about myself"]
        assert found and found[0].content == "Let me tell you about myself."
    finally:
        await manager.close()


@pytest.mark.usefixtures("prefect_harness")
async def test_a_change_of_prefix_is_a_change_of_model(
    embedded: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    from agent_memory.settings import use_settings
    from agent_memory_flows.embeddings import EmbedParams, reembed_flow

    before = with_prefixes(embedded, fake_llm, "query: ", "passage: ")
    manager = await MemoryManager.create(settings=before, migrate=False)
    try:
        await manager.record(DANA, [HumanMessage("Let me tell you about myself.")])
        await manager.consolidate(DANA)
    finally:
        await manager.close()
    after = with_prefixes(embedded, fake_llm, "search_query: ", "search_document: ")
    use_settings(after)
    try:
        fake_llm.embedding_requests.clear()
        moved = await reembed_flow(EmbedParams())
        assert moved["model"] == "openai/e5 ['search_query: ', 'search_document: ']"
        assert moved["embedded_now"] == len(DATA["facts"]) and moved["left"] == 0
        assert all(text.startswith("search_document: ") for text in sent(fake_llm))
        models = db.execute("SELECT DISTINCT model FROM agent_memory.fact_embeddings").fetchall()
        assert models == [("openai/e5 ['search_query: ', 'search_document: ']",)]
    finally:
        use_settings(embedded)


def test_no_prefix_is_the_model_alone(fake_llm: FakeLLM) -> None:
    plain = EmbeddingSettings(model="openai/e5", api_base=fake_llm.api_base)
    assert plain.active_model == "openai/e5"
    assert EmbeddingSettings(model="openai/e5", query_prefix="q: ").active_model == (
        "openai/e5 ['q: ', '']"
    )


def test_a_prefix_for_the_bundled_model_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENT_MEMORY_EMBEDDING_MODEL", raising=False)
    monkeypatch.setenv("AGENT_MEMORY_EMBEDDING_QUERY_PREFIX", "query: ")
    with pytest.raises(SettingsError) as refused:
        EmbeddingSettings()
    message = str(refused.value)
    assert "'query: '" in message and "wordllama" in message
    assert "AGENT_MEMORY_EMBEDDING_MODEL" in message
