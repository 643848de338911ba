"""``AgentMemoryStore(index=...)``: LangGraph's vector index, on a real PostgreSQL.

The first part is LangGraph's own vector tests (``libs/checkpoint-postgres/tests/
test_store.py`` and ``test_async_store.py``) with only the store's construction swapped, and
the test embeddings they use (``CharacterEmbeddings``, their tests/embed_test_utils.py): a
small deterministic model, so that scores can be computed here. Tests that need pgvector's
``halfvec`` (0.7 and later) are skipped on a server with an older pgvector.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
import pytest
from langchain_core.embeddings import Embeddings

from agent_memory import MemoryManager
from agent_memory.errors import ConfigurationError
from agent_memory.settings import Settings
from agent_memory.store import AgentMemoryStore


class CharacterEmbeddings(Embeddings):
    """Character-frequency embeddings by random projections (LangGraph's test embeddings)."""

    def __init__(self, dims: int = 50, seed: int = 42) -> None:
        self._rng = random.Random(seed)
        self.dims = dims
        self._char_projections: defaultdict[str, list[float]] = defaultdict(
            lambda: [self._rng.gauss(0, 1 / math.sqrt(self.dims)) for _ in range(self.dims)]
        )

    def _embed_one(self, text: str) -> list[float]:
        counts = Counter(text)
        total = sum(counts.values())
        if total == 0:
            return [0.0] * self.dims
        embedding = [0.0] * self.dims
        for char, count in counts.items():
            weight = count / total
            for i, proj in enumerate(self._char_projections[char]):
                embedding[i] += weight * proj
        norm = math.sqrt(sum(x * x for x in embedding))
        return [x / norm for x in embedding] if norm > 0 else embedding

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed_one(text)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, CharacterEmbeddings) and self.dims == other.dims

    __hash__ = None  # type: ignore[assignment]


@pytest.fixture
def fake_embeddings() -> CharacterEmbeddings:
    return CharacterEmbeddings(dims=500)


def _has_halfvec(database_url: str) -> bool:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    version = tuple(int(p) for p in str(row[0]).split(".")) if row else (0,)
    return version >= (0, 7)


def _url(settings: Settings) -> str:
    assert settings.db.url is not None
    return settings.db.url.get_secret_value()


def _skip_without(vector_type: str, database_url: str) -> None:
    if vector_type == "halfvec" and not _has_halfvec(database_url):
        pytest.skip("halfvec needs pgvector 0.7 or later; this server has an older one")


def _config(
    vector_type: str, distance_type: str, embeddings: Embeddings, fields: list[str] | None
) -> dict[str, Any]:
    return {
        "dims": embeddings.dims,  # type: ignore[attr-defined]
        "embed": embeddings,
        "ann_index_config": {"vector_type": vector_type},
        "distance_type": distance_type,
        "fields": fields,
    }


@contextmanager
def _create_vector_store(
    settings: Settings,
    vector_type: str,
    distance_type: str,
    fake_embeddings: Embeddings,
    text_fields: list[str] | None = None,
) -> Iterator[AgentMemoryStore]:
    _skip_without(vector_type, _url(settings))
    config = _config(vector_type, distance_type, fake_embeddings, text_fields)
    with AgentMemoryStore.from_conn_string(settings=settings, index=config) as store:  # type: ignore[arg-type]
        store.setup()
        store.setup()  # fails if setup is not idempotent
        yield store


@asynccontextmanager
async def _acreate_vector_store(
    settings: Settings,
    vector_type: str,
    distance_type: str,
    fake_embeddings: Embeddings,
    text_fields: list[str] | None = None,
) -> AsyncIterator[AgentMemoryStore]:
    _skip_without(vector_type, _url(settings))
    config = _config(vector_type, distance_type, fake_embeddings, text_fields)
    async with AgentMemoryStore.afrom_conn_string(settings=settings, index=config) as store:  # type: ignore[arg-type]
        await store.asetup()
        yield store


_vector_params = [
    (vector_type, distance_type)
    for vector_type in ("vector", "halfvec")
    for distance_type in ("l2", "inner_product", "cosine")
]


@pytest.fixture(params=_vector_params, ids=lambda p: f"{p[0]}_{p[1]}")
def vector_store(
    request: pytest.FixtureRequest, settings: Settings, fake_embeddings: CharacterEmbeddings
) -> Iterator[AgentMemoryStore]:
    vector_type, distance_type = request.param
    with _create_vector_store(settings, vector_type, distance_type, fake_embeddings) as store:
        yield store


@pytest.fixture(params=_vector_params, ids=lambda p: f"{p[0]}_{p[1]}")
async def avector_store(
    request: pytest.FixtureRequest, settings: Settings, fake_embeddings: CharacterEmbeddings
) -> AsyncIterator[AgentMemoryStore]:
    vector_type, distance_type = request.param
    async with _acreate_vector_store(
        settings, vector_type, distance_type, fake_embeddings
    ) as store:
        yield store


# ---- LangGraph's tests/test_store.py ------------------------------------------------------


def test_vector_store_initialization(
    vector_store: AgentMemoryStore, fake_embeddings: CharacterEmbeddings
) -> None:
    assert vector_store.index_config is not None
    assert vector_store.index_config["dims"] == fake_embeddings.dims
    assert vector_store.index_config["embed"] == fake_embeddings


def test_vector_insert_with_auto_embedding(vector_store: AgentMemoryStore) -> None:
    docs = [
        ("doc1", {"text": "short text"}),
        ("doc2", {"text": "longer text document"}),
        ("doc3", {"text": "longest text document here"}),
        ("doc4", {"description": "text in description field"}),
        ("doc5", {"content": "text in content field"}),
        ("doc6", {"body": "text in body field"}),
    ]
    for key, value in docs:
        vector_store.put(("test",), key, value)
    results = vector_store.search(("test",), query="long text")
    assert len(results) > 0
    doc_order = [r.key for r in results]
    assert "doc2" in doc_order
    assert "doc3" in doc_order


def test_vector_update_with_embedding(vector_store: AgentMemoryStore) -> None:
    vector_store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    vector_store.put(("test",), "doc2", {"text": "something about dogs"})
    vector_store.put(("test",), "doc3", {"text": "text about birds"})

    results_initial = vector_store.search(("test",), query="Zany Xerxes")
    assert len(results_initial) > 0
    assert results_initial[0].key == "doc1"
    initial_score = results_initial[0].score
    assert initial_score is not None

    vector_store.put(("test",), "doc1", {"text": "new text about dogs"})
    results_after = vector_store.search(("test",), query="Zany Xerxes")
    after_score = next((r.score for r in results_after if r.key == "doc1"), 0.0)
    assert after_score is not None and after_score < initial_score

    results_new = vector_store.search(("test",), query="new text about dogs")
    for r in results_new:
        if r.key == "doc1":
            assert r.score is not None and r.score > after_score

    vector_store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    results_new = vector_store.search(("test",), query="new text about dogs", limit=3)
    assert not any(r.key == "doc4" for r in results_new)


@pytest.mark.parametrize("refresh_ttl", [True, False])
def test_vector_search_with_filters(vector_store: AgentMemoryStore, refresh_ttl: bool) -> None:
    docs = [
        ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
        ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
        ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
        ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
    ]
    for key, value in docs:
        vector_store.put(("test",), key, value)

    results = vector_store.search(
        ("test",), query="apple", filter={"color": "red"}, refresh_ttl=refresh_ttl
    )
    assert len(results) == 2
    assert results[0].key == "doc1"

    results = vector_store.search(
        ("test",), query="car", filter={"color": "red"}, refresh_ttl=refresh_ttl
    )
    assert len(results) == 2
    assert results[0].key == "doc2"

    results = vector_store.search(
        ("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}}, refresh_ttl=refresh_ttl
    )
    assert len(results) == 3
    assert results[0].key == "doc4"

    results = vector_store.search(
        ("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"}
    )
    assert len(results) == 1
    assert results[0].key == "doc3"


def test_vector_search_pagination(vector_store: AgentMemoryStore) -> None:
    for i in range(5):
        vector_store.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    results_page1 = vector_store.search(("test",), query="test", limit=2)
    results_page2 = vector_store.search(("test",), query="test", limit=2, offset=2)
    assert len(results_page1) == 2
    assert len(results_page2) == 2
    assert results_page1[0].key != results_page2[0].key
    all_results = vector_store.search(("test",), query="test", limit=10)
    assert len(all_results) == 5


def test_vector_search_edge_cases(vector_store: AgentMemoryStore) -> None:
    vector_store.put(("test",), "doc1", {"text": "test document"})
    assert len(vector_store.search(("test",), query="")) == 1
    assert len(vector_store.search(("test",), query=None)) == 1
    assert len(vector_store.search(("test",), query="test " * 100)) == 1
    assert len(vector_store.search(("test",), query="test!@#$%^&*()")) == 1


@pytest.mark.parametrize(
    ("vector_type", "distance_type"),
    [
        ("vector", "cosine"),
        ("vector", "inner_product"),
        ("halfvec", "cosine"),
        ("halfvec", "inner_product"),
    ],
)
def test_embed_with_path_sync(
    settings: Settings, fake_embeddings: CharacterEmbeddings, vector_type: str, distance_type: str
) -> None:
    with _create_vector_store(
        settings, vector_type, distance_type, fake_embeddings, text_fields=["key0", "key1", "key3"]
    ) as store:
        doc1 = {"key1": "xxx", "key2": "yyy", "key3": "zzz"}  # key0 left out: no error
        doc2 = {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"}
        store.put(("test",), "doc1", doc1)
        store.put(("test",), "doc2", doc2)

        results = store.search(("test",), query="xxx")
        assert len(results) == 2
        assert results[0].key != results[1].key
        ascore = results[0].score
        assert ascore == pytest.approx(results[1].score, abs=1e-3)

        results = store.search(("test",), query="uuu")
        assert len(results) == 2
        assert results[0].key == "doc2"
        assert results[0].score > results[1].score  # type: ignore[operator]
        assert ascore == pytest.approx(results[0].score, abs=1e-3)

        results = store.search(("test",), query="zzz")
        assert len(results) == 2
        assert results[0].key == "doc1"
        assert results[0].score > results[1].score  # type: ignore[operator]
        assert ascore == pytest.approx(results[0].score, abs=1e-3)

        results = store.search(("test",), query="www")  # not embedded: low for both
        assert len(results) == 2
        assert all(r.score < ascore for r in results)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("vector_type", "distance_type"),
    [
        ("vector", "cosine"),
        ("vector", "inner_product"),
        ("halfvec", "cosine"),
        ("halfvec", "inner_product"),
    ],
)
def test_embed_with_path_operation_config(
    settings: Settings, fake_embeddings: CharacterEmbeddings, vector_type: str, distance_type: str
) -> None:
    with _create_vector_store(
        settings, vector_type, distance_type, fake_embeddings, text_fields=["key17"]
    ) as store:
        doc3 = {"key0": "aaa", "key1": "bbb", "key2": "ccc", "key3": "ddd"}
        doc4 = {"key0": "eee", "key1": "bbb", "key2": "fff", "key3": "ggg"}
        store.put(("test",), "doc3", doc3, index=["key0", "key1"])
        store.put(("test",), "doc4", doc4, index=["key1", "key3"])

        results = store.search(("test",), query="aaa")
        assert len(results) == 2
        assert results[0].key == "doc3"
        assert len({r.key for r in results}) == 2
        assert results[0].score > results[1].score  # type: ignore[operator]

        results = store.search(("test",), query="ggg")
        assert len(results) == 2
        assert results[0].key == "doc4"
        assert results[0].score > results[1].score  # type: ignore[operator]

        results = store.search(("test",), query="bbb")
        assert len(results) == 2
        assert results[0].key != results[1].key
        assert results[0].score == pytest.approx(results[1].score, abs=1e-3)

        results = store.search(("test",), query="ccc")
        assert len(results) == 2
        assert all(r.score < 0.9 for r in results)  # type: ignore[operator]

        store.put(("test",), "doc5", {"key0": "hhh", "key1": "iii"}, index=False)
        results = store.search(("test",))
        assert len(results) == 3
        assert all(r.score is None for r in results)
        assert any(r.key == "doc5" for r in results)


def _cosine_similarity(x: list[float], y: list[float]) -> float:
    dot = sum(a * b for a, b in zip(x, y, strict=True))
    n1 = math.sqrt(sum(a * a for a in x))
    n2 = math.sqrt(sum(b * b for b in y))
    return dot / (n1 * n2) if n1 > 0 and n2 > 0 else 0.0


def _inner_product(x: list[float], y: list[float]) -> float:
    return sum(a * b for a, b in zip(x, y, strict=True))


def _neg_l2_distance(x: list[float], y: list[float]) -> float:
    return -math.sqrt(sum((a - b) ** 2 for a, b in zip(x, y, strict=True)))


@pytest.mark.parametrize(
    ("vector_type", "distance_type"),
    [("vector", "cosine"), ("vector", "inner_product"), ("halfvec", "l2")],
)
@pytest.mark.parametrize("query", ["aaa", "bbb", "ccc", "abcd", "poisson"])
def test_scores(
    settings: Settings,
    fake_embeddings: CharacterEmbeddings,
    vector_type: str,
    distance_type: str,
    query: str,
) -> None:
    with _create_vector_store(
        settings, vector_type, distance_type, fake_embeddings, text_fields=["key0"]
    ) as store:
        doc = {"key0": "aaa"}
        store.put(("test",), "doc", doc, index=["key0", "key1"])
        results = store.search((), query=query)
        vec0 = fake_embeddings.embed_query(doc["key0"])
        vec1 = fake_embeddings.embed_query(query)
        expected = {
            "cosine": _cosine_similarity,
            "inner_product": _inner_product,
            "l2": _neg_l2_distance,
        }[distance_type](vec1, vec0)
        assert len(results) == 1
        assert results[0].score == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize("distance_type", ["cosine", "inner_product", "l2"])
@pytest.mark.parametrize("query", ["aaa", "abcd", "poisson"])
def test_scores_vector_l2(
    settings: Settings, fake_embeddings: CharacterEmbeddings, distance_type: str, query: str
) -> None:
    """``test_scores`` for every distance on ``vector`` (its ``halfvec`` cases are skipped
    on this server)."""
    with _create_vector_store(
        settings, "vector", distance_type, fake_embeddings, text_fields=["key0"]
    ) as store:
        store.put(("test",), "doc", {"key0": "aaa"})
        (found,) = store.search((), query=query)
        vec0, vec1 = fake_embeddings.embed_query("aaa"), fake_embeddings.embed_query(query)
        expected = {
            "cosine": _cosine_similarity,
            "inner_product": _inner_product,
            "l2": _neg_l2_distance,
        }[distance_type](vec1, vec0)
        assert found.score == pytest.approx(expected, abs=1e-3)


def test_nonnull_migrations() -> None:
    """Every migration has a statement (LangGraph's check of its MIGRATIONS list)."""
    from agent_memory.db.migrations import load_migrations

    for migration in load_migrations():
        lines = [line for line in migration.sql.splitlines() if not line.startswith("--")]
        assert "".join(lines).strip(), migration.name


# ---- LangGraph's tests/test_async_store.py ------------------------------------------------


async def test_async_vector_search_edge_cases(avector_store: AgentMemoryStore) -> None:
    await avector_store.aput(("test",), "doc1", {"text": "test document"})
    perfect = await avector_store.asearch(("test",), query="text test document")
    perfect_score = perfect[0].score
    assert perfect_score is not None

    results = await avector_store.asearch(("test",), query="")
    assert len(results) == 1
    assert results[0].score is None
    results = await avector_store.asearch(("test",), query=None)
    assert len(results) == 1
    assert results[0].score is None

    results = await avector_store.asearch(("test",), query="foo " * 100)
    assert len(results) == 1
    assert results[0].score is not None and results[0].score < perfect_score

    results = await avector_store.asearch(("test",), query="test!@#$%^&*()")
    assert len(results) == 1
    assert results[0].score is not None and results[0].score < perfect_score


async def test_async_vector_update_and_filters(avector_store: AgentMemoryStore) -> None:
    await avector_store.aput(("test",), "doc1", {"text": "red apple", "color": "red"})
    await avector_store.aput(("test",), "doc2", {"text": "red car", "color": "red"})
    await avector_store.aput(("test",), "doc3", {"text": "green apple", "color": "green"})
    results = await avector_store.asearch(("test",), query="apple", filter={"color": "red"})
    assert [r.key for r in results][:1] == ["doc1"] and len(results) == 2
    await avector_store.aput(("test",), "doc1", {"text": "blue sky", "color": "red"})
    results = await avector_store.asearch(("test",), query="red car", filter={"color": "red"})
    assert results[0].key == "doc2"


@pytest.mark.parametrize(
    ("vector_type", "distance_type"),
    list(itertools.product(["vector", "halfvec"], ["cosine", "inner_product", "l2"])),
)
async def test_embed_with_path(
    settings: Settings, fake_embeddings: CharacterEmbeddings, vector_type: str, distance_type: str
) -> None:
    async with _acreate_vector_store(
        settings, vector_type, distance_type, fake_embeddings, text_fields=["key0", "key1", "key3"]
    ) as store:
        await store.aput(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})
        await store.aput(
            ("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"}
        )
        results = await store.asearch(("test",), query="xxx")
        assert len(results) == 2
        ascore = results[0].score
        assert ascore == pytest.approx(results[1].score, abs=1e-3)

        results = await store.asearch(("test",), query="uuu")
        assert results[0].key == "doc2"
        assert results[0].score > results[1].score  # type: ignore[operator]
        assert ascore == pytest.approx(results[0].score, abs=1e-3)

        results = await store.asearch(("test",), query="www")
        assert len(results) == 2
        assert all(r.score < ascore for r in results)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("vector_type", "distance_type"),
    list(itertools.product(["vector", "halfvec"], ["cosine", "inner_product", "l2"])),
)
async def test_search_sorting(
    settings: Settings, fake_embeddings: CharacterEmbeddings, vector_type: str, distance_type: str
) -> None:
    async with _acreate_vector_store(
        settings, vector_type, distance_type, fake_embeddings, text_fields=["key1"]
    ) as store:
        await store.aput(("test", "M"), "M", {"key1": "mmm"})
        for i in range(100):
            await store.aput(("test", "A"), f"A{i}", {"key1": "no"})
        for i in range(100):
            await store.aput(("test", "Z"), f"Z{i}", {"key1": "no"})
        results = await store.asearch(("test",), query="mmm", limit=10)
        assert len(results) == 10
        assert len({r.key for r in results}) == 10
        assert results[0].key == "M"
        assert results[0].score > results[1].score  # type: ignore[operator]


# ---- this store's own ---------------------------------------------------------------------


def _vectors(store: AgentMemoryStore, key: str) -> list[str]:
    with store.manager.backend.spool().connection() as conn:
        rows = conn.execute(
            "SELECT v.field_path FROM agent_memory.store_vectors v"
            " JOIN agent_memory.store_items s ON s.id = v.item_id WHERE s.key = %s"
            " ORDER BY 1",
            (key,),
        ).fetchall()
    return [r[0] for r in rows]


def test_index_false_keeps_an_item_out_and_a_reput_takes_it_out(
    settings: Settings, fake_embeddings: CharacterEmbeddings
) -> None:
    with _create_vector_store(settings, "vector", "cosine", fake_embeddings, ["text"]) as store:
        store.put(("docs",), "kept", {"text": "green tea"})
        store.put(("docs",), "out", {"text": "green tea"}, index=False)
        # an item kept out of the index comes after every scored one, with no score (as
        # langgraph's stores return it)
        found = store.search(("docs",), query="green tea")
        assert [(r.key, r.score is None) for r in found] == [("kept", False), ("out", True)]
        assert [r.key for r in store.search(("docs",), query="green tea", limit=1)] == ["kept"]
        assert _vectors(store, "out") == []
        # a put with index=False takes out what an earlier put embedded
        store.put(("docs",), "kept", {"text": "green tea"}, index=False)
        assert all(r.score is None for r in store.search(("docs",), query="green tea"))
        assert {r.key for r in store.search(("docs",))} == {"kept", "out"}  # still there


def test_per_put_fields_replace_the_item_vectors(
    settings: Settings, fake_embeddings: CharacterEmbeddings
) -> None:
    with _create_vector_store(settings, "vector", "cosine", fake_embeddings, ["a"]) as store:
        value = {"a": "alpha", "b": "beta", "items": [{"name": "x"}, {"name": "y"}]}
        store.put(("docs",), "k", value)
        assert _vectors(store, "k") == ["a"]
        store.put(("docs",), "k", value, index=["b", "items[*].name"])
        assert _vectors(store, "k") == ["b", "items[*].name.0", "items[*].name.1"]
        (found,) = store.search(("docs",), query="beta")
        assert found.score == pytest.approx(1.0, abs=1e-3)
        store.delete(("docs",), "k")
        assert _vectors(store, "k") == []


def test_memory_items_are_indexed_and_superseded_ones_leave(
    settings: Settings, fake_embeddings: CharacterEmbeddings
) -> None:
    with _create_vector_store(settings, "vector", "cosine", fake_embeddings, ["content"]) as store:
        store.put(("memories", "alice"), "tea", {"content": "Alice drinks green tea"})
        store.put(("memories", "alice"), "job", {"content": "Alice is a plumber"})
        results = store.search(("memories", "alice"), query="Alice drinks green tea")
        assert results[0].key == "tea"
        assert results[0].score == pytest.approx(1.0, abs=1e-3)
        with store.manager.backend.spool().connection() as conn:  # still facts of the scope
            facts = conn.execute(
                "SELECT count(*) FROM agent_memory.memory_items"
                " WHERE user_id = 'alice' AND superseded_at IS NULL"
            ).fetchone()
        assert facts == (2,)
        store.delete(("memories", "alice"), "tea")
        assert [r.key for r in store.search(("memories", "alice"), query="green tea")] == ["job"]


def test_bad_index_configs_are_refused(settings: Settings) -> None:
    manager = MemoryManager.create_sync(settings=settings, migrate=False)
    try:
        emb = CharacterEmbeddings(dims=8)
        for config, words in [
            ({"dims": 0, "embed": emb}, "dims"),
            ({"dims": 8}, "embed"),
            ({"dims": 8, "embed": emb, "distance_type": "hamming"}, "distance_type"),
            ({"dims": 8, "embed": emb, "ann_index_config": {"vector_type": "bit"}}, "bit"),
        ]:
            with pytest.raises(ConfigurationError, match=words):
                AgentMemoryStore(manager, index=config)  # type: ignore[arg-type]
        store = AgentMemoryStore(manager, index={"dims": 9, "embed": emb})
        with pytest.raises(ConfigurationError, match="dims is 9"):
            store.put(("docs",), "k", {"text": "x"})
        assert store.get(("docs",), "k") is None  # nothing written
    finally:
        manager.close_sync()


def test_without_an_index_memory_namespaces_keep_the_project_ranking(
    settings: Settings,
) -> None:
    with AgentMemoryStore.from_conn_string(settings=settings) as store:
        assert store.index_config is None
        store.put(("memories", "bob"), "tea", {"content": "Bob drinks green tea every morning"})
        store.put(("memories", "bob"), "car", {"content": "Bob drives a red car"})
        store.put(("memories", "bob"), "out", {"content": "green tea"}, index=False)
        results = store.search(("memories", "bob"), query="what tea does bob drink?")
        # the project's ranking: the relevant facts first, scored between 0 and 1, and an
        # index=False put is ignored without an index (as PostgresStore ignores it)
        assert {r.key for r in results[:2]} == {"tea", "out"}
        assert all(r.score is not None and 0 < r.score <= 1 for r in results[:2])
        assert results[-1].key == "car"
        with store.manager.backend.spool().connection() as conn:
            count = conn.execute("SELECT count(*) FROM agent_memory.store_vectors").fetchone()
        assert count == (0,)


def test_an_expired_item_is_gone_from_a_vector_search_before_any_sweep(
    settings: Settings, fake_embeddings: CharacterEmbeddings
) -> None:
    with _create_vector_store(settings, "vector", "cosine", fake_embeddings, ["text"]) as store:
        store.put(("docs",), "old", {"text": "green tea"}, ttl=5)
        store.put(("docs",), "new", {"text": "green tea"})
        with psycopg.connect(_url(settings), autocommit=True) as conn:
            conn.execute(
                "UPDATE agent_memory.store_items SET expires_at = now() - interval '1 minute'"
                " WHERE key = 'old'"
            )
        assert [r.key for r in store.search(("docs",), query="green tea")] == ["new"]
