"""The bundled local embedding model: loaded from the wordllama wheel with no network call,
warmed up by ``MemoryManager.create`` so the first question of a process is ranked by meaning,
and harmless to the host application (its logging stays as it was)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager
from agent_memory.errors import EmbeddingRejectedError
from agent_memory.local_embedding import LocalEmbedder
from agent_memory.models import Scope
from agent_memory.settings import LOCAL_MODEL, EmbeddingSettings, Settings
from benchmarks.retrieval import load_facts
from tests.processes import ROOT, run_python
from tests.vectors import embed_all

# Every Python-level network attempt (sockets, name lookups) is recorded by an audit hook
# installed before anything is imported; a download of the tokenizer or the weights (what
# WordLlama.load() does when it misses the bundled files) would show here.
NO_NETWORK = """
import json, logging, sys
events = []
def hook(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
                 "socket.sendto", "urllib.Request"):
        events.append([event, repr(args)[:200]])
sys.addaudithook(hook)
root = logging.getLogger()
before = (list(root.handlers), root.level)
from agent_memory.local_embedding import LocalEmbedder, load
from agent_memory.settings import EmbeddingSettings
load()
vectors = LocalEmbedder(EmbeddingSettings()).embed_sync(
    ["User has a border collie named Pixel.", "What pet do I have?", "User prefers tea."]
)
print(json.dumps({
    "events": events,
    "dims": [len(v) for v in vectors],
    "norms": [sum(x * x for x in v) for v in vectors],
    "logging_unchanged": (list(root.handlers), root.level) == before,
    "pet": sum(a * b for a, b in zip(vectors[0], vectors[1])),
    "tea": sum(a * b for a, b in zip(vectors[2], vectors[1])),
}))
"""


@pytest.mark.system
def test_the_local_model_loads_and_embeds_with_no_network_call(tmp_path: Path) -> None:
    # an empty home: nothing cached from an earlier download can stand in for the wheel's files
    env = {
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "HF_HUB_OFFLINE": "0",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-c", NO_NETWORK],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["events"] == []
    assert result["dims"] == [256, 256, 256]
    assert result["norms"] == [pytest.approx(1.0, abs=1e-5)] * 3
    assert result["logging_unchanged"], "importing wordllama changed the root logger"
    # a real model of meaning: the question about a pet is nearer the dog than the tea
    assert result["pet"] > result["tea"] + 0.1


def test_a_text_with_nothing_to_embed_is_refused_not_a_nan_vector() -> None:
    embedder = LocalEmbedder(EmbeddingSettings())
    assert embedder.model == LOCAL_MODEL
    out = embedder._each(["", "User plays the violin.", "x" * 100_000])
    assert isinstance(out[0], EmbeddingRejectedError)
    assert isinstance(out[1], list) and math.isclose(sum(x * x for x in out[1]), 1, rel_tol=1e-5)
    assert isinstance(out[2], list) and all(math.isfinite(x) for x in out[2])
    with pytest.raises(EmbeddingRejectedError, match="no vector"):
        embedder.embed_sync([""])


def test_relevance_by_meaning_can_be_turned_off() -> None:
    assert EmbeddingSettings().active_model == LOCAL_MODEL and EmbeddingSettings().local
    assert EmbeddingSettings(enabled=False).active_model is None
    litellm = EmbeddingSettings(model="openai/text-embedding-3-small")
    assert litellm.active_model == "openai/text-embedding-3-small" and not litellm.local


FIRST_INJECT = """
import asyncio, json
from agent_memory import MemoryManager, Scope
from agent_memory import local_embedding

async def main():
    manager = await MemoryManager.create(migrate=False)
    warmed = local_embedding.loaded()
    try:
        frame = await manager.inject(Scope("dana", "assistant"), query="Which pet do I have?")
    finally:
        await manager.close()
    print(json.dumps({"warmed": warmed, "ranking": frame.ranking,
                      "facts": frame.injected_facts}))

asyncio.run(main())
"""


@pytest.mark.system
async def test_the_first_inject_of_a_process_is_ranked_by_meaning(
    manager: MemoryManager, settings: Settings, db: psycopg.Connection[Any]
) -> None:
    load_facts(
        db,
        Scope("dana", "assistant"),
        [
            {"content": "User has a border collie named Pixel.", "importance": 0.3},
            {"content": "User prefers tea over coffee.", "importance": 0.9},
            {"content": "User works at a logistics company.", "importance": 0.9},
        ],
    )
    assert await embed_all(manager) == 3
    # relevance alone orders (no prior): the one fact about a pet is the nearest by meaning
    done = run_python(FIRST_INJECT, settings, AGENT_MEMORY_INJECT_PRIOR_WEIGHT="0")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["warmed"]  # create() loaded the model, not the first question
    assert result["ranking"] == "hybrid"
    assert result["facts"][0] == "User has a border collie named Pixel."
