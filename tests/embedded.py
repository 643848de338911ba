"""What the embedding tests share (a pytest plugin, loaded by conftest): the labelled set's
scope and facts, settings with a loopback embedding model, and two fixtures, ``embedded`` (an
extraction that answers with the labelled facts) and ``stored_facts`` (the facts stored without
embeddings)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agent_memory.models import Scope
from agent_memory.settings import EmbeddingSettings, MemorySettings, Settings
from benchmarks.retrieval import labelled_set, load_facts
from tests.fake_llm import FakeLLM, Reply

DANA = Scope("dana", "assistant")
DATA = labelled_set()


def with_embeddings(
    settings: Settings, fake_llm: FakeLLM, model: str = "openai/embed-a"
) -> Settings:
    return settings.model_copy(
        update={
            "embedding": EmbeddingSettings(
                model=model, api_base=fake_llm.api_base, api_key="sk-embed-SECRET"
            ),
            "memory": MemorySettings(inject_ranking="vector", inject_limit=5),
        }
    )


@pytest.fixture
def embedded(llm_settings: Settings, fake_llm: FakeLLM) -> Iterator[Settings]:
    """LLM extraction that answers with the labelled set's facts, and an embedding model."""
    fake_llm.reset(lambda _request: Reply(json.dumps(DATA["facts"])))
    yield with_embeddings(llm_settings, fake_llm)


@pytest.fixture
def stored_facts(
    settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> Iterator[Settings]:
    """The labelled set's facts stored with no embeddings, and settings with an embedding model
    installed for the flows (the re-embedding flow reads them)."""
    from agent_memory.settings import use_settings

    load_facts(db, DANA, DATA["facts"])
    with_model = with_embeddings(settings, fake_llm)
    use_settings(with_model)
    yield with_model
    use_settings(settings)
