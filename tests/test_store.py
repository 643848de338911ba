"""AgentMemoryStore as LangGraph's stores are used: a digest of LangGraph's PostgresStore
tests, run against both stores on the same PostgreSQL so that every assertion holds for each
(LangGraph's whole files run on this store in tests/upstream); then what only this store does
(memory namespaces are facts), and bad input refused with nothing written."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.postgres import PostgresStore

from agent_memory import MemoryManager
from agent_memory.settings import Settings
from agent_memory.store import AgentMemoryStore


@pytest.fixture
def memory_store(settings: Settings) -> Iterator[AgentMemoryStore]:
    manager = MemoryManager.create_sync(settings=settings, migrate=False)
    try:
        yield manager.store()
    finally:
        manager.close_sync()


@pytest.fixture(params=["agent-memory", "postgres"])
def store(request: pytest.FixtureRequest, database_url: str) -> Iterator[BaseStore]:
    """Each store in turn, on this test's database."""
    if request.param == "postgres":
        with PostgresStore.from_conn_string(database_url) as pg:
            pg.setup()
            yield pg
    else:
        yield request.getfixturevalue("memory_store")


# ---- the peer suite (LangGraph's tests/test_store.py, for both stores) ----------------------


def test_batch_order(store: BaseStore) -> None:
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    results = store.batch(
        [
            GetOp(namespace=("test", "foo"), key="key1"),
            PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
            SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(namespace=("test",), key="key3"),
        ]
    )
    assert len(results) == 5
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert results[0].key == "key1"
    assert results[1] is None
    assert isinstance(results[2], list) and len(results[2]) == 1
    assert isinstance(results[3], list) and len(results[3]) > 0
    assert results[4] is None

    reordered = store.batch(
        [
            SearchOp(namespace_prefix=("test",), filter=None, limit=5, offset=0),
            GetOp(namespace=("test", "bar"), key="key2"),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
            PutOp(namespace=("test",), key="key3", value={"data": "value3"}),
            GetOp(namespace=("test", "foo"), key="key1"),
        ]
    )
    assert isinstance(reordered[0], list) and len(reordered[0]) >= 2
    assert isinstance(reordered[1], Item) and reordered[1].value == {"data": "value2"}
    assert reordered[3] is None
    assert isinstance(reordered[4], Item) and reordered[4].value == {"data": "value1"}


def test_batch_get_put_and_search_ops(store: BaseStore) -> None:
    assert store.batch(
        [
            PutOp(namespace=("test",), key="key1", value={"data": "value1"}),
            PutOp(namespace=("test",), key="key2", value={"data": "value2"}),
            PutOp(namespace=("test",), key="key3", value=None),
        ]
    ) == [None, None, None]
    got = store.batch(
        [GetOp(("test",), "key1"), GetOp(("test",), "key2"), GetOp(("test",), "key3")]
    )
    assert [g.key if g else None for g in got] == ["key1", "key2", None]  # type: ignore[union-attr]

    for namespace, key, value in [
        (("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
        (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
        (("test", "baz"), "key3", {"data": "value3", "tag": "b"}),
    ]:
        store.put(namespace, key, value)
    tagged, first_two, foo = store.batch(
        [
            SearchOp(namespace_prefix=("test",), filter={"tag": "a"}, limit=10, offset=0),
            SearchOp(namespace_prefix=("test",), filter=None, limit=2, offset=0),
            SearchOp(namespace_prefix=("test", "foo"), filter=None, limit=10, offset=0),
        ]
    )
    assert len(tagged) == 2 and all(i.value["tag"] == "a" for i in tagged)  # type: ignore[union-attr]
    assert len(first_two) == 2  # type: ignore[arg-type]
    assert [i.namespace for i in foo] == [("test", "foo")]  # type: ignore[union-attr]


def test_basic_store_ops(store: BaseStore) -> None:
    namespace = ("test", "documents")
    value = {"title": "Test Document", "content": "Hello, World!"}
    store.put(namespace, "doc1", value)
    item = store.get(namespace, "doc1")
    assert item and item.namespace == namespace and item.key == "doc1" and item.value == value

    updated = {"title": "Updated Document", "content": "Hello, Updated!"}
    store.put(namespace, "doc1", updated)
    again = store.get(namespace, "doc1")
    assert again and again.value == updated
    assert again.updated_at > item.updated_at and again.created_at == item.created_at
    assert store.get(("test", "other_documents"), "doc1") is None

    store.delete(namespace, "doc1")
    assert store.get(namespace, "doc1") is None


def test_list_namespaces(store: BaseStore) -> None:
    namespaces = [
        ("test", "documents", "public"),
        ("test", "documents", "private"),
        ("test", "images", "public"),
        ("test", "images", "private"),
        ("prod", "documents", "public"),
        ("prod", "documents", "private"),
    ]
    for namespace in namespaces:
        store.put(namespace, "dummy", {"content": "dummy"})
    assert sorted(store.list_namespaces()) == sorted(namespaces)
    assert store.list_namespaces(prefix=("test",)) == sorted(
        n for n in namespaces if n[0] == "test"
    )
    assert len(store.list_namespaces(suffix=("public",))) == 3
    assert store.list_namespaces(max_depth=2) == [
        ("prod", "documents"),
        ("test", "documents"),
        ("test", "images"),
    ]
    assert store.list_namespaces(limit=3) == sorted(namespaces)[:3]
    assert store.list_namespaces(limit=3, offset=3) == sorted(namespaces)[3:]
    assert store.list_namespaces(prefix=("test", "*", "public")) == [
        ("test", "documents", "public"),
        ("test", "images", "public"),
    ]
    assert store.list_namespaces(prefix=("test",), suffix=("*", "private")) == [
        ("test", "documents", "private"),
        ("test", "images", "private"),
    ]
    listed = store.batch(
        [ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("public",)),), limit=10)]
    )[0]
    assert all(ns[-1] == "public" for ns in listed) and len(listed) == 3  # type: ignore[union-attr]
    for namespace in namespaces:
        store.delete(namespace, "dummy")
    assert store.list_namespaces() == []


def test_search_namespace_segment_boundary(store: BaseStore) -> None:
    for namespace in [("foo",), ("foo", "child"), ("foo", "child", "deep"), ("foobar",),
                      ("foobar", "baz"), ("foo2",)]:  # fmt: skip
        store.put(namespace, "k", {"v": 1})

    def found(prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        return {item.namespace for item in store.search(prefix, limit=100)}

    assert found(("foo",)) == {("foo",), ("foo", "child"), ("foo", "child", "deep")}
    assert found(("foobar",)) == {("foobar",), ("foobar", "baz")}
    assert found(("foo", "child")) == {("foo", "child"), ("foo", "child", "deep")}
    assert found(("foo2",)) == {("foo2",)}
    assert found(("fo",)) == set()
    assert found(()) == {("foo",), ("foo", "child"), ("foo", "child", "deep"), ("foobar",),
                         ("foobar", "baz"), ("foo2",)}  # fmt: skip


def test_search_namespace_like_metacharacters(store: BaseStore) -> None:
    for namespace in [("user_1",), ("user_1", "child"), ("userX1",), ("a%b",), ("axxb",)]:
        store.put(namespace, "k", {"v": 1})
    assert {i.namespace for i in store.search(("user_1",))} == {("user_1",), ("user_1", "child")}
    assert {i.namespace for i in store.search(("a%b",))} == {("a%b",)}


def test_list_namespaces_segment_boundary(store: BaseStore) -> None:
    for namespace in [("foo",), ("foo", "child"), ("foobar",), ("foobar", "baz"),
                      ("uid", "users", "alice"), ("uid", "users", "malice"),
                      ("uid", "a", "b", "alice")]:  # fmt: skip
        store.put(namespace, "k", {"v": 1})
    assert set(store.list_namespaces(prefix=("foo",))) == {("foo",), ("foo", "child")}
    assert set(store.list_namespaces(suffix=("alice",))) == {
        ("uid", "users", "alice"),
        ("uid", "a", "b", "alice"),
    }
    assert set(store.list_namespaces(prefix=("uid", "*", "alice"))) == {("uid", "users", "alice")}
    assert set(store.list_namespaces(prefix=["uid"], limit=100)) == {  # type: ignore[arg-type]
        ("uid", "users", "alice"),
        ("uid", "users", "malice"),
        ("uid", "a", "b", "alice"),
    }


def test_search_filters_and_pages(store: BaseStore) -> None:
    data = [
        (("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "score": 4.5}),
        (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "score": 3.0}),
        (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "score": 5.0}),
    ]
    for namespace, key, value in data:
        store.put(namespace, key, value)
    assert len(store.search(("test",))) == 3
    assert {i.key for i in store.search(("test", "docs"))} == {"doc1", "doc2"}
    assert {i.key for i in store.search(("test",), filter={"author": "Alice"})} == {"doc1", "img1"}
    assert {i.key for i in store.search(("test",), filter={"score": {"$gte": 4.5}})} == {
        "doc1",
        "img1",
    }
    assert {i.key for i in store.search(("test",), filter={"score": {"$lt": 4.5}})} == {"doc2"}
    assert {i.key for i in store.search(("test",), filter={"author": {"$ne": "Alice"}})} == {"doc2"}
    assert {
        i.key for i in store.search(("test",), filter={"author": {"$eq": "Alice"}, "score": 5.0})
    } == {"img1"}
    assert len(store.search(("test",), limit=2)) == 2
    assert len(store.search(("test",), offset=2)) == 1
    # the latest updated first
    assert [i.key for i in store.search(("test",))] == ["img1", "doc2", "doc1"]
    assert all(i.score is None for i in store.search(("test",)))


def test_langgraph_root_and_empty_namespaces(store: BaseStore) -> None:
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", doc)
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.search(("foo", "langgraph", "foo"), query="bar")[0].value == doc
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    got = store.get(("langgraph", "foo"), "bar")
    assert got and got.value == doc


async def test_async_faces(store: BaseStore) -> None:
    await store.aput(("a", "b"), "k", {"n": 1})
    got = await store.aget(("a", "b"), "k")
    assert got and got.value == {"n": 1}
    assert [i.key for i in await store.asearch(("a",))] == ["k"]
    assert await store.alist_namespaces(prefix=("a",)) == [("a", "b")]
    await asyncio.gather(*(store.aput(("a", "c"), f"k{i}", {"n": i}) for i in range(20)))
    assert len(await store.asearch(("a", "c"), limit=100)) == 20
    await store.adelete(("a", "b"), "k")
    assert await store.aget(("a", "b"), "k") is None
