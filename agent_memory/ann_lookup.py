"""Which scopes have a nearest-neighbour (HNSW) index of their own, as the flows build them for
large scopes: looked up once, remembered for a while (the flows may build one meanwhile), and
shared by inject and the searches."""

from __future__ import annotations

from time import monotonic

import psycopg

from agent_memory.db import ann_indexes
from agent_memory.db.ann_indexes import AnnIndex
from agent_memory.db.dual import Steps
from agent_memory.models import Scope
from agent_memory.query_embedding import QueryEmbedder

# a scope's HNSW index is looked up again after this long (the flows may have built one), and
# the memory of which scopes have one is cleared past this many
_ANN_RECHECK_S = 60.0
_ANN_KNOWN_MAX = 100_000

Key = tuple[str, Scope, str]


class AnnLookup:
    """The scopes' own HNSW indexes of the question embedder's model, as last looked up."""

    def __init__(self, queries: QueryEmbedder) -> None:
        self._queries = queries
        self.known: dict[Key, tuple[AnnIndex | None, float]] = {}

    def _cached(self, kind: str, scope: Scope) -> tuple[Key, tuple[AnnIndex | None, float] | None]:
        """The scope's HNSW index of ``kind`` as last looked up, None when due a new look."""
        key = (kind, scope, self._queries.model or "")
        known = self.known.get(key)
        return key, known if known is not None and known[1] > monotonic() else None

    def _learned(self, key: Key, ann: AnnIndex | None) -> AnnIndex | None:
        if len(self.known) > _ANN_KNOWN_MAX:
            self.known.clear()
        self.known[key] = (ann, monotonic() + _ANN_RECHECK_S)
        return ann

    def steps(self, kind: str, scope: Scope) -> Steps[AnnIndex | None]:
        """The scope's own HNSW index of ``kind``, if the flows built one."""
        key, known = self._cached(kind, scope)
        if known is not None:
            return known[0]
        try:
            ann = yield from ann_indexes.ann_index_steps(kind, scope, key[2])
        except psycopg.Error:  # the table is not there (an old schema): compare every vector
            ann = None
        return self._learned(key, ann)
