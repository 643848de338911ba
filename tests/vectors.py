"""Embedding the facts a test stored, as the consolidation flow would."""

from __future__ import annotations

from agent_memory.embedding import make_embedder
from agent_memory.manager import MemoryManager
from agent_memory.stored_embeddings import embed_missing


async def embed_all(manager: MemoryManager) -> int:
    """Embed every current fact with the manager's model (the bundled one by default)."""
    embedder = make_embedder(manager.settings.embedding)
    assert embedder is not None
    return (await embed_missing(await manager.backend.apool(), embedder)).stored
