"""The bundled local embedding model: WordLlama's ``l2_supercat`` (256 dimensions).

Its weights (16 MB) and tokenizer ship inside the ``wordllama`` wheel, so relevance by meaning
needs no setup, no key and no network. They are loaded from the package's own files:
``WordLlama.load()`` of wordllama 0.4.0 looks for the tokenizer in a folder the wheel does not
have and then downloads it, which this module never calls. Embedding a sentence costs tens of
microseconds on one core, so the hot path embeds the question in-process, with no deadline to
spend; loading takes about a second, paid once per process (``MemoryManager.create`` warms it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_memory.errors import EmbeddingError, EmbeddingRejectedError
from agent_memory.settings import LOCAL_MODEL, EmbeddingSettings

_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")

# The model pools every token, so the cost is linear in the text; what a long text is about is
# in its start (a fact or a message window is far shorter than this).
MAX_CHARS = 8000

_lock = threading.Lock()
_model: Any = None


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


def load() -> Any:
    """The model (a ``WordLlamaInference``), loaded once per process from the wheel's files."""
    global _model
    if _model is not None:
        return _model
    with _lock:
        if _model is None:
            try:
                inference = _import_quietly()
                from safetensors import safe_open
                from tokenizers import Tokenizer

                root = Path(inference.__file__).resolve().parent
                tokenizer = Tokenizer.from_file(str(root.joinpath(*_TOKENIZER)))
                with safe_open(str(root.joinpath(*_WEIGHTS)), framework="np", device="cpu") as f:
                    weights = f.get_tensor("embedding.weight")
            except (ImportError, OSError, RuntimeError) as exc:
                raise EmbeddingError(
                    f"the local embedding model {LOCAL_MODEL} could not be loaded from the "
                    f"wordllama package ({type(exc).__name__}: {exc}); reinstall agent-memory, "
                    "or set AGENT_MEMORY_EMBEDDING_MODEL to a litellm model"
                ) from exc
            _model = inference.WordLlamaInference(weights, tokenizer)
    return _model


def loaded() -> bool:
    return _model is not None


class LocalEmbedder:
    """Embeds in-process with the bundled model; the same interface as the litellm
    :class:`~agent_memory.embedding.Embedder`. A text with nothing to embed (empty) is
    refused, as a remote model's all-zero vector is."""

    model = LOCAL_MODEL

    def __init__(self, settings: EmbeddingSettings) -> None:
        self.settings = settings

    def _each(self, texts: Sequence[str]) -> list[list[float] | EmbeddingRejectedError]:
        import numpy as np

        if not texts:
            return []
        matrix = load().embed([t[:MAX_CHARS] for t in texts], norm=False)
        norms = np.linalg.norm(matrix, axis=1)
        out: list[list[float] | EmbeddingRejectedError] = []
        for row, norm in zip(matrix, norms, strict=True):
            if not np.isfinite(norm) or norm == 0:
                out.append(EmbeddingRejectedError(f"{self.model} has no vector for this text"))
            else:
                out.append((row / norm).astype(float).tolist())
        return out

    def embed_sync(
        self, texts: Sequence[str], *, timeout: float | None = None
    ) -> list[list[float]]:
        """One unit vector per text, in order; raises on a text it has no vector for."""
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
        """One vector per text, or why there is none (an empty text)."""
        return await asyncio.to_thread(self._each, texts)
