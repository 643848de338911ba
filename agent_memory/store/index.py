"""``AgentMemoryStore(index=...)``: LangGraph's vector index (``IndexConfig``), as its
``PostgresStore`` has it.

With an index, every put embeds the chosen fields of its value (``fields``: JSON paths such as
``"text"``, ``"metadata.title"``, ``"items[*].name"``; ``"$"``, the default, is the whole value)
with the index's embeddings (a LangChain ``Embeddings``, a function, or a ``"provider:model"``
string), or those the put names (``index=["field"]``), or none (``index=False``); and a search
with a query returns the items that have vectors, ranked by their nearest field's similarity
to the query's vector (``distance_type``: ``cosine``, the default, ``inner_product`` or
``l2``), with the score PostgresStore gives; then, with no score, the items kept out of the
index and the memory scope's facts that no item shows (consolidation's), newest first. The
embeddings are asked outside the transaction, once per batch (``embed_documents`` for the
puts' texts, ``embed_query`` for each query; their ``a...`` forms in async code). The vectors
live in ``agent_memory.store_vectors`` (`agent_memory.db.store_vectors`).

Without an index nothing here runs: memory namespaces rank by the project's relevance ranking
and documents by full text, as the store's module says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from langgraph.store.base import IndexConfig, SearchItem, SearchOp
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from agent_memory.db import pgvector, store_vectors
from agent_memory.db import store as store_repo
from agent_memory.db.dual import Steps, Transaction, run_async, run_sync
from agent_memory.errors import ConfigurationError
from agent_memory.store.plan import Write
from agent_memory.store.ttl import refresh_steps

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from agent_memory.backend import Backend

Item = tuple[tuple[str, ...], str]
# the texts a batch's puts embed: (item, field path, text)
Texts = list[tuple[Item, str, str]]

_KINDS = {"hnsw": ("m", "ef_construction"), "ivfflat": ("lists", "nlist"), "flat": ()}


class StoreIndex:
    """An ``IndexConfig`` checked, with its embeddings (see the module)."""

    def __init__(self, index: IndexConfig) -> None:
        config: dict[str, Any] = dict(index)
        dims = config.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
            raise ConfigurationError(f"index dims {dims!r} is not a whole number >= 1")
        if config.get("embed") is None:
            raise ConfigurationError("index has no 'embed' (an Embeddings, a function or a name)")
        distance = config.get("distance_type", "cosine")
        if distance not in ("cosine", "inner_product", "l2"):
            raise ConfigurationError(
                f"index distance_type {distance!r} is not 'cosine', 'inner_product' or 'l2'"
            )
        ann = dict(config.get("ann_index_config") or {})
        vector_type = ann.pop("vector_type", "vector")
        if vector_type not in ("vector", "halfvec"):
            raise ConfigurationError(
                f"index vector_type {vector_type!r} is not 'vector' or 'halfvec'"
            )
        kind = str(ann.pop("kind", "hnsw"))
        if kind not in _KINDS:
            raise ConfigurationError(f"index kind {kind!r} is not one of {', '.join(_KINDS)}")
        self.options: dict[str, int] = {}
        for name, value in ann.items():
            if name in _KINDS[kind]:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ConfigurationError(f"index option {name}={value!r} is not >= 1")
                self.options["lists" if name == "nlist" else name] = value
        fields = config.get("fields") or ["$"]
        if isinstance(fields, str):
            fields = [fields]
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise ConfigurationError(f"index fields {fields!r} is not a list of paths")
        # as PostgresStore keeps them, so code that reads index_config finds them
        config["__tokenized_fields"] = [(f, "$" if f == "$" else tokenize_path(f)) for f in fields]
        config["__estimated_num_vectors"] = sum(
            1 if f == "$" else len(tokenize_path(f)) for f in fields
        )
        self.config = cast(IndexConfig, config)
        self.dims: int = dims
        self.distance: store_vectors.Distance = distance
        self.vector_type: store_vectors.VectorType = vector_type
        self.kind = kind
        self.embeddings: Embeddings = ensure_embeddings(config["embed"])
        self._ready = False

    # ---- what a put embeds ----------------------------------------------------------------

    def texts(self, writes: dict[Item, Write]) -> Texts:
        """The texts of a batch's puts (each item's last): ``fields``, or the put's own list;
        none for ``index=False`` or a delete."""
        found: Texts = []
        for item, write in writes.items():
            op = write.op
            if op.value is None or op.index is False:
                continue
            paths: Sequence[tuple[str, Any]] = (
                self.config["__tokenized_fields"]  # type: ignore[typeddict-item]
                if op.index is None
                else [(p, "$" if p == "$" else tokenize_path(p)) for p in op.index]
            )
            seen: set[str] = set()
            for path, tokens in paths:
                texts = get_text_at_path(op.value, tokens)
                for i, text in enumerate(texts):
                    name = f"{path}.{i}" if len(texts) > 1 else path
                    if name not in seen:  # a path named twice is embedded once
                        seen.add(name)
                        found.append((item, name, text))
        return found

    def _checked(self, vectors: Sequence[Sequence[float]], count: int) -> list[list[float]]:
        if len(vectors) != count:
            raise ConfigurationError(
                f"the index's embeddings gave {len(vectors)} vectors for {count} texts"
            )
        for vector in vectors:
            if len(vector) != self.dims:
                raise ConfigurationError(
                    f"the index's embeddings gave a vector of {len(vector)} numbers; the"
                    f" index's dims is {self.dims}"
                )
        return [list(map(float, vector)) for vector in vectors]

    @staticmethod
    def _keep(plan: Any, texts: Texts, vectors: list[list[float]]) -> None:
        for (item, path, _), vector in zip(texts, vectors, strict=True):
            plan.item_vectors.setdefault(item, []).append((path, vector))

    # ---- a batch's embeddings, outside its transaction -------------------------------------

    def prepare_sync(self, backend: Backend, plan: Any) -> None:
        """Embed a batch's puts and queries (``plan.queries``, emptied: the project's model is
        not asked), after making sure the server has pgvector (once per store)."""
        if not self._ready:
            with backend.spool().connection() as conn:
                run_sync(conn, self._extension_steps())
        texts = self.texts(plan.writes)
        if texts:
            vectors = self.embeddings.embed_documents([text for *_, text in texts])
            self._keep(plan, texts, self._checked(vectors, len(texts)))
        for index, query in plan.queries.items():
            plan.vectors[index] = self._checked([self.embeddings.embed_query(query)], 1)[0]
        plan.queries.clear()

    async def aprepare(self, backend: Backend, plan: Any) -> None:
        """`prepare_sync` for async code."""
        if not self._ready:
            pool = await backend.apool()
            async with pool.connection() as conn:
                await run_async(conn, self._extension_steps())
        texts = self.texts(plan.writes)
        if texts:
            vectors = await self.embeddings.aembed_documents([text for *_, text in texts])
            self._keep(plan, texts, self._checked(vectors, len(texts)))
        queries = list(plan.queries.items())
        found = await asyncio.gather(*(self.embeddings.aembed_query(q) for _, q in queries))
        for (index, _), vector in zip(queries, found, strict=True):
            plan.vectors[index] = self._checked([vector], 1)[0]
        plan.queries.clear()

    def _extension_steps(self) -> Steps[None]:
        found = yield from store_vectors.pgvector_steps()
        if found is None:
            raise ConfigurationError(
                "the store's index needs pgvector, which this PostgreSQL server does not have"
            )
        version, installed = found
        if self.vector_type == "halfvec" and not pgvector.has(version, "halfvec"):
            raise ConfigurationError(
                f"index vector_type 'halfvec': {pgvector.lacking(version, 'halfvec')}"
            )
        if not installed:
            yield Transaction(store_vectors.create_extension_steps())
        self._ready = True

    def setup_steps(self) -> Steps[None]:
        """pgvector, and the approximate index of the configured dims and distance (the
        owner's work: ``AgentMemoryStore.setup()``)."""
        yield from self._extension_steps()
        yield Transaction(
            store_vectors.index_steps(
                dims=self.dims,
                distance=self.distance,
                vector_type=self.vector_type,
                kind=self.kind,
                options=self.options,
            )
        )

    # ---- running a batch -------------------------------------------------------------------

    def write_steps(self, plan: Any, namespace: tuple[str, ...], key: str) -> Steps[None]:
        """Make the vectors embedded for item ``(namespace, key)`` (none: ``index=False``) its
        vectors, after its row was written."""
        yield from store_vectors.replace_steps(
            namespace, key, plan.item_vectors.get((namespace, key), [])
        )

    def search_steps(self, op: SearchOp, vector: list[float] | None) -> Steps[list[SearchItem]]:
        """A search with a query: the indexed items, most similar first (see the module)."""
        if vector is None or not op.limit:
            return []
        params: dict[str, Any] = {}
        condition = store_repo.filter_sql(op.filter, "s", params)
        rows = yield from store_vectors.search_steps(
            tuple(op.namespace_prefix),
            vector,
            distance=self.distance,
            vector_type=self.vector_type,
            condition=condition,
            params=params,
            limit=op.limit,
            offset=op.offset,
        )
        yield from refresh_steps(op.refresh_ttl, rows)
        return [
            SearchItem(
                namespace=r[0], key=r[1], value=r[2], created_at=r[3], updated_at=r[4], score=r[5]
            )
            for r in rows
        ]
