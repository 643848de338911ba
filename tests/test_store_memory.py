"""What AgentMemoryStore does beyond a key-value store: an item of a memory namespace is a fact
of its scope (inject sees it, rewording and deleting keep history, consolidation's facts show
up under keys of their own), a query ranks by relevance; and bad input is refused, naming it,
with nothing written."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp

from agent_memory import MemoryManager, Scope
from agent_memory.db.store import fact_key, fact_of_key
from agent_memory.errors import ConfigurationError, InvalidStoreRequestError
from agent_memory.settings import Settings
from agent_memory.store import AgentMemoryStore, NamespaceTemplate, memory_text

ALICE, BOB = Scope(user_id="alice"), Scope(user_id="bob")
NS, BOB_NS = ("memories", "alice"), ("memories", "bob")


@pytest.fixture
def sync_manager(settings: Settings) -> Iterator[MemoryManager]:
    manager = MemoryManager.create_sync(settings=settings, migrate=False)
    yield manager
    manager.close_sync()


@pytest.fixture
def store(sync_manager: MemoryManager) -> AgentMemoryStore:
    return sync_manager.store()


def counts(db: psycopg.Connection[Any]) -> tuple[int, int]:
    row = db.execute(
        "SELECT (SELECT count(*) FROM agent_memory.store_items),"
        " (SELECT count(*) FROM agent_memory.memory_items)"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def current(db: psycopg.Connection[Any], user: str) -> list[str]:
    rows = db.execute(
        "SELECT content FROM agent_memory.memory_items WHERE user_id = %s"
        " AND superseded_at IS NULL ORDER BY id",
        (user,),
    ).fetchall()
    return [r[0] for r in rows]


async def test_a_memory_put_is_a_fact_that_inject_gives_back(settings: Settings) -> None:
    async with AgentMemoryStore.afrom_conn_string(settings=settings) as store:
        await store.aput(NS, "tea", {"content": "Alice drinks green tea", "importance": 0.9})
        await store.aput(NS, "job", {"content": "Alice works as a nurse"})
        got = await store.aget(NS, "tea")
        assert got and got.value == {"content": "Alice drinks green tea", "importance": 0.9}
        facts = {f.content: f for f in await store.manager.facts(ALICE)}
        assert set(facts) == {"Alice drinks green tea", "Alice works as a nurse"}
        assert facts["Alice drinks green tea"].importance == pytest.approx(0.9)
        assert facts["Alice works as a nurse"].importance == pytest.approx(0.5)  # the default
        frame = await store.manager.inject(ALICE, query="what does alice drink")
        assert frame.injected_facts[0] == "Alice drinks green tea"
        assert await store.manager.facts(BOB) == []


def test_rewording_supersedes_and_deleting_invalidates_with_history_kept(
    store: AgentMemoryStore, db: psycopg.Connection[Any]
) -> None:
    store.put(NS, "home", {"content": "Alice lives in Paris"})
    store.put(NS, "home", {"content": "Alice lives in Paris", "note": "same words"})
    assert current(db, "alice") == ["Alice lives in Paris"]  # a value change only
    store.put(NS, "home", {"content": "Alice lives in Berlin"})
    assert current(db, "alice") == ["Alice lives in Berlin"]
    old = db.execute(
        "SELECT o.superseded_by = n.id"
        " FROM agent_memory.memory_items o, agent_memory.memory_items n"
        " WHERE o.content = 'Alice lives in Paris' AND n.content = 'Alice lives in Berlin'"
    ).fetchone()
    assert old == (True,)
    got = store.get(NS, "home")
    assert got and got.value == {"content": "Alice lives in Berlin"}

    store.delete(NS, "home")
    assert store.get(NS, "home") is None
    assert current(db, "alice") == []
    history = db.execute(
        "SELECT content, superseded_at IS NOT NULL, superseded_by FROM agent_memory.memory_items"
        " ORDER BY id"
    ).fetchall()
    assert [(c, s) for c, s, _ in history] == [
        ("Alice lives in Paris", True),
        ("Alice lives in Berlin", True),
    ]
    assert history[1][2] is None  # invalidated, not replaced


def test_a_put_alone_is_one_statement_outside_a_transaction(
    store: AgentMemoryStore, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory put is one call (sql/0022): one round trip, no BEGIN or COMMIT of its own; what
    it leaves is what the four statements it replaced left."""
    sent: list[str] = []
    transactions: list[object] = []
    execute, transaction = psycopg.Connection.execute, psycopg.Connection.transaction

    def watched_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, params, **kw)

    def watched_transaction(self: Any, *args: Any, **kw: Any) -> Any:
        transactions.append(self)
        return transaction(self, *args, **kw)

    assert store.get(NS, "drink") is None  # connected
    monkeypatch.setattr(psycopg.Connection, "execute", watched_execute)
    monkeypatch.setattr(psycopg.Connection, "transaction", watched_transaction)
    store.put(NS, "drink", {"content": "Alice drinks tea"})
    store.put(NS, "drink", {"content": "Alice drinks green tea"})
    store.put(NS, "drink", {"content": "Alice drinks green tea", "note": "a value change"})
    monkeypatch.undo()
    assert len(sent) == 3 and all("store_put_memory" in q for q in sent), sent
    assert transactions == []
    assert current(db, "alice") == ["Alice drinks green tea"]
    assert counts(db) == (1, 2)  # the first wording kept, superseded, as history
    got = store.get(NS, "drink")
    assert got and got.value == {"content": "Alice drinks green tea", "note": "a value change"}
    shown = db.execute("SELECT content, shown FROM agent_memory.memory_items ORDER BY id")
    assert shown.fetchall() == [("Alice drinks tea", False), ("Alice drinks green tea", True)]


def test_two_keys_with_one_fact_keep_it_until_both_go(
    store: AgentMemoryStore, db: psycopg.Connection[Any]
) -> None:
    store.put(NS, "a", {"content": "Alice has a cat"})
    store.put(NS, "b", {"content": "alice has a cat."})  # the same fact, reinforced
    assert current(db, "alice") == ["alice has a cat."]
    store.delete(NS, "a")
    assert current(db, "alice") == ["alice has a cat."]
    assert [i.key for i in store.search(NS)] == ["b"]
    store.delete(NS, "b")
    assert current(db, "alice") == []


async def test_facts_consolidation_wrote_show_under_their_own_keys(
    manager: MemoryManager, store: AgentMemoryStore, db: psycopg.Connection[Any]
) -> None:
    said = await manager.add_fact(ALICE, "Alice is allergic to peanuts", kind="identity")
    key = fact_key(said.id)
    assert fact_of_key(key) == said.id and fact_of_key("plain") is None
    [item] = store.search(NS)
    assert item.key == key
    assert item.value["content"] == "Alice is allergic to peanuts"
    assert item.value["kind"] == "identity"
    got = store.get(NS, key)
    assert got and got.value["content"] == "Alice is allergic to peanuts"
    assert store.get(BOB_NS, key) is None  # another scope's namespace does not show it
    assert store.list_namespaces() == [NS]

    # LangMem updates a memory by its key: the new wording replaces the fact
    store.put(NS, key, {"content": "Alice is allergic to peanuts and shellfish"})
    assert current(db, "alice") == ["Alice is allergic to peanuts and shellfish"]
    assert [i.key for i in store.search(NS)] == [key]
    store.delete(NS, key)
    assert current(db, "alice") == [] and store.search(NS) == []


async def test_a_put_that_points_a_new_key_at_a_flows_fact_shows_it_once(
    manager: MemoryManager, store: AgentMemoryStore, db: psycopg.Connection[Any]
) -> None:
    """A new item whose wording is a fact the flows wrote (or whose key names that fact) shows
    that fact: it is marked shown by the put (sql/0030), so the store lists it under the item's
    key alone, never also under the fact's own key."""
    tea = await manager.add_fact(ALICE, "Alice drinks green tea")
    cat = await manager.add_fact(ALICE, "Alice has a cat")
    assert {i.key for i in store.search(NS)} == {fact_key(tea.id), fact_key(cat.id)}

    store.put(NS, "drink", {"content": "Alice drinks green tea"})  # the same wording
    store.put(NS, fact_key(cat.id), {"content": "Alice has a cat", "note": "kept"})  # its key
    shown = db.execute("SELECT id, shown FROM agent_memory.memory_items ORDER BY id").fetchall()
    assert shown == [(tea.id, True), (cat.id, True)]
    assert sorted(i.key for i in store.search(NS)) == sorted(["drink", fact_key(cat.id)])
    assert counts(db) == (2, 2)

    store.delete(NS, "drink")  # the delete's trigger: no row shows it any more
    assert db.execute(
        "SELECT shown, superseded_at IS NULL FROM agent_memory.memory_items WHERE id = %s",
        (tea.id,),
    ).fetchone() == (False, False)


def test_a_query_ranks_the_matching_memories_first(store: AgentMemoryStore) -> None:
    facts = [
        "Alice plays the cello in an orchestra",
        "Alice's sister lives in Lisbon",
        "Alice drinks her coffee black",
        "Alice is training for a marathon",
    ]
    for n, fact in enumerate(facts):
        store.put(NS, f"k{n}", {"content": fact, "topic": "music" if n == 0 else "life"})
    store.put(BOB_NS, "k", {"content": "Bob drinks coffee with milk"})
    found = store.search(NS, query="how does she take her coffee?", limit=10)
    assert found[0].value["content"] == "Alice drinks her coffee black"
    assert found[0].score and found[0].score > 0
    assert len(found) == 4 and all(i.namespace == NS for i in found)  # the rest follow, score 0
    assert [i.score for i in found[1:]] == [0.0, 0.0, 0.0]
    assert [i.key for i in store.search(NS, query="coffee", filter={"topic": "music"})] == ["k0"]
    page = store.search(NS, query="coffee", limit=2, offset=1)
    assert [i.key for i in page] == [i.key for i in found[1:3]]
    # documents rank by full text beside them
    store.put((*NS, "notes"), "n1", {"text": "Alice's coffee grinder is broken"})
    top = store.search(NS, query="coffee grinder", limit=3)
    assert top[0].key == "n1" and top[0].namespace == (*NS, "notes")


def test_a_template_maps_namespaces_to_scopes(
    sync_manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    store = sync_manager.store(("agents", "{agent_id}", "users", "{user_id}"), workflow_id="w")
    store.put(("agents", "bot", "users", "alice"), "k", {"memory": "Alice prefers email"})
    assert db.execute(
        "SELECT user_id, agent_id, workflow_id FROM agent_memory.memory_items"
    ).fetchall() == [("alice", "bot", "w")]
    store.put(("agents", "bot", "profile"), "p", {"content": "not a memory namespace"})
    assert counts(db) == (2, 1)  # a document: no fact
    assert store.list_namespaces(prefix=("agents", "bot"), max_depth=3) == [
        ("agents", "bot", "profile"),
        ("agents", "bot", "users"),
    ]
    template = NamespaceTemplate(("memories", "{user_id}"), agent_id="bot")
    assert template.memory_scope(("memories", "x")) == Scope(user_id="x", agent_id="bot")
    assert template.memory_scope(("other", "x")) is None
    assert template.owner(("memories", "x", "deeper")) == Scope(user_id="x", agent_id="bot")
    assert template.render(Scope(user_id="a.b", agent_id="bot")) is None  # not a label
    for bad, named in [
        (("memories",), "no placeholder"),
        (("memories", "{tenant}"), "{tenant}"),
        (("memories", "{user_id}", "{user_id}"), "twice"),
        (("langgraph", "{user_id}"), "langgraph"),
    ]:
        with pytest.raises(ConfigurationError, match=named):
            NamespaceTemplate(bad)
    with pytest.raises(ConfigurationError, match="fixed"):
        NamespaceTemplate(("m", "{user_id}"), user_id="x")


def test_memory_text_of_values() -> None:
    assert memory_text({"content": "likes tea"}) == "likes tea"
    assert memory_text({"text": "likes tea", "content": ""}) == "likes tea"
    assert memory_text({"content": {"food": "tea"}}) == "food: tea"
    assert memory_text({"b": 1, "a": 2}) == "b: 1; a: 2"


@pytest.mark.parametrize(
    ("op", "error", "named"),
    [
        (PutOp(("memories", 5), "k", {"content": "x"}), InvalidNamespaceError, "5"),  # type: ignore[arg-type]
        (PutOp(("memories", ""), "k", {"content": "x"}), InvalidNamespaceError, "empty label"),
        (PutOp((), "k", {"content": "x"}), InvalidNamespaceError, "empty"),
        (PutOp(("docs",), "", {"v": 1}), InvalidStoreRequestError, "key ''"),
        (PutOp(("docs",), "k", ["not", "a", "mapping"]), InvalidStoreRequestError, "list"),  # type: ignore[arg-type]
        (PutOp(("docs",), "k", {"v": object()}), InvalidStoreRequestError, "not JSON"),
        (PutOp(("docs",), "k", {"v": "x" * 300_000}), InvalidStoreRequestError, "over the limit"),
        (PutOp(NS, "k", {"content": "x", "importance": 3}), InvalidStoreRequestError, "3"),
        (PutOp(NS, "k", {"content": "x" * 5000}), InvalidStoreRequestError, "'k'"),
        (PutOp(("docs",), "k", {"v": 1}, ttl=-5.0), InvalidStoreRequestError, "TTL -5.0"),
        (SearchOp(("docs",), filter={"v": {"$in": [1]}}), InvalidStoreRequestError, "'\\$in'"),
        (
            SearchOp(("docs",), filter={"v": {"$gt": 1, "$regex": "a"}}),
            InvalidStoreRequestError,
            "regex",
        ),
        (SearchOp(("docs", 7)), InvalidNamespaceError, "7"),  # type: ignore[arg-type]
        (SearchOp(("docs",), limit=-1), InvalidStoreRequestError, "limit -1"),
        (GetOp(("docs", "a.b"), "k"), InvalidNamespaceError, "a.b"),
    ],
)
def test_bad_input_is_refused_naming_it_and_writes_nothing(
    store: AgentMemoryStore, db: psycopg.Connection[Any], op: Any, error: type, named: str
) -> None:
    store.put(("docs",), "kept", {"v": 0})
    before = counts(db)
    with pytest.raises(error, match=named):
        # a good write beside the bad op: the batch is refused whole
        store.batch([PutOp(NS, "good", {"content": "Alice is here"}), op])
    assert counts(db) == before
    assert store.get(NS, "good") is None


async def test_manager_search_ranks_a_scopes_facts(manager: MemoryManager) -> None:
    for fact in ["Bob keeps bees", "Bob's car is red", "Bob sells honey at the market"]:
        await manager.add_fact(BOB, fact)
    found = await manager.search(BOB, "honey from his bees", limit=5)
    assert {f.content for f in found} == {"Bob keeps bees", "Bob sells honey at the market"}
    assert all(f.score > 0 for f in found) and found[0].score >= found[-1].score
    assert await manager.search(ALICE, "honey") == []
    assert await manager.search(BOB, "   ") == []
    with pytest.raises(ValueError, match="limit 0"):
        await manager.search(BOB, "bees", limit=0)


async def test_a_fact_superseded_or_purged_elsewhere_leaves_the_store(
    manager: MemoryManager, store: AgentMemoryStore, db: psycopg.Connection[Any]
) -> None:
    store.put(NS, "a", {"content": "Alice plays golf"})
    store.put(NS, "b", {"content": "Alice owns a boat"})
    [golf] = [f for f in await manager.facts(ALICE) if f.content == "Alice plays golf"]
    await manager.forget_fact(golf.id)  # by hand (or a consolidation that contradicts it)
    assert store.get(NS, "a") is None
    assert [i.key for i in store.search(NS)] == ["b"]
    # said again, the fact is current again, and so is the item that shows it
    await manager.add_fact(ALICE, "Alice plays golf")
    got = store.get(NS, "a")
    assert got and got.value == {"content": "Alice plays golf"}
    # a fact decay purges takes its items with it
    db.execute("DELETE FROM agent_memory.memory_items WHERE content = 'Alice owns a boat'")
    assert store.get(NS, "b") is None
    assert db.execute("SELECT key FROM agent_memory.store_items").fetchall() == [("a",)]
    assert store.list_namespaces() == [NS]
