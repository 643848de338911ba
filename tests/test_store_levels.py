"""Levels of memory through the LangGraph Store (issue 39, item 4): a memory namespace reads the
levels its scope reads, as inject does, each fact of another level under its own key and with
its level; a prefix cut before the agent reaches the person's level; puts still write their
exact scope; with AGENT_MEMORY_SHARE=exact nothing crosses."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.db import fact_edits
from agent_memory.db.store import fact_key
from agent_memory.models import Fact
from agent_memory.settings import MemorySettings, Settings

ALICE, SUPPORT, BILLING = Scope("alice"), Scope("alice", "support"), Scope("alice", "billing")
AGENT_TEMPLATE = ("memories", "{user_id}", "{agent_id}")
PERSON = "Alice wants answers by email"
NOTE = "Ticket 4711 about the email gateway waits on Alice"
SIBLING = "Invoice 88 sent by email is disputed"


@pytest.fixture(params=["user", "exact"])
def manager(settings: Settings, request: pytest.FixtureRequest) -> Iterator[MemoryManager]:
    changed = settings.model_copy(update={"memory": MemorySettings(share=request.param)})
    manager = MemoryManager.create_sync(settings=changed, migrate=False)
    yield manager
    manager.close_sync()


def _filed(manager: MemoryManager, db: psycopg.Connection[Any]) -> dict[str, int]:
    """The person's fact filed at her level as consolidation files it (no Store row), each
    agent's note put at its own; their fact ids."""
    with manager.backend.spool().connection() as conn:
        for scope, text in ((ALICE, PERSON), (Scope("bob"), "Bob wants answers by email")):
            fact_edits.add_sync(conn, scope, Fact(content=text, importance=0.8), datetime.now(UTC))
    agents = manager.store(AGENT_TEMPLATE)
    agents.put(("memories", "alice", "support"), "ticket", {"content": NOTE})
    agents.put(("memories", "alice", "billing"), "invoice", {"content": SIBLING})
    rows = db.execute("SELECT content, id FROM agent_memory.memory_items").fetchall()
    return {str(content): int(fact_id) for content, fact_id in rows}


def _shown(items: list[Any]) -> list[tuple[tuple[str, ...], str, str | None]]:
    return sorted((tuple(i.namespace), i.value["content"], i.value.get("level")) for i in items)


def test_a_memory_namespace_reads_the_persons_level(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    shares = manager.settings.memory.share == "user"
    ids = _filed(manager, db)
    store = manager.store(AGENT_TEMPLATE)
    ns = ("memories", "alice", "support")
    person = [(ns, PERSON, "user")] if shares else []
    for query in ("email", None):
        found = store.search(ns, query=query)
        assert _shown(found) == sorted([(ns, NOTE, None), *person])
        if query:  # both match: ranked, scored
            assert all(i.score and i.score > 0 for i in found)
    got = store.get(ns, fact_key(ids[PERSON]))
    assert (got is not None) == shares
    if got is not None:
        assert got.value["content"] == PERSON and got.value["level"] == "user"
    # another agent of alice's reads her person too, and never support's note
    billing = _shown(store.search(("memories", "alice", "billing"), query="email"))
    assert NOTE not in [content for _, content, _ in billing]
    assert (("memories", "alice", "billing"), PERSON, "user") in billing or not shares
    # the prefix cut before the agent is the person's level namespace
    prefix = _shown(store.search(("memories", "alice"), query="email"))
    assert (("memories", "alice"), PERSON, "user") in prefix or not shares
    assert [c for _, c, _ in prefix].count(PERSON) == (1 if shares else 0)
    assert {c for _, c, _ in prefix} >= {NOTE, SIBLING}
    assert not any("Bob" in c for _, c, _ in prefix)
    got = store.get(("memories", "alice"), fact_key(ids[PERSON]))
    assert (got is not None) == shares

    # a put writes its exact scope, as before
    store.put(ns, "tz", {"content": "Alice works in CET"})
    row = db.execute(
        "SELECT user_id, agent_id FROM agent_memory.memory_items WHERE content = %s",
        ("Alice works in CET",),
    ).fetchone()
    assert row == ("alice", "support")


def test_the_default_template_with_a_fixed_agent_reads_the_person(
    manager: MemoryManager,
) -> None:
    shares = manager.settings.memory.share == "user"
    ids = {}
    with manager.backend.spool().connection() as conn:  # as consolidation files them: no Store rows
        for scope, text in ((ALICE, PERSON), (SUPPORT, NOTE), (BILLING, SIBLING)):
            fact = Fact(content=text, importance=0.8)
            ids[text] = fact_edits.add_sync(conn, scope, fact, datetime.now(UTC))
    store = manager.store(agent_id="support")  # ("memories", "{user_id}") of agent support
    ns = ("memories", "alice")
    for query in ("email", None):
        shown = _shown(store.search(ns, query=query))
        assert shown == sorted([(ns, NOTE, None), *([(ns, PERSON, "user")] if shares else [])])
    assert (store.get(ns, fact_key(ids[PERSON])) is not None) == shares
    assert store.get(ns, fact_key(ids[SIBLING])) is None
    # the person's own store (no agent) reads the person alone
    assert _shown(manager.store().search(ns)) == [(ns, PERSON, None)]


def test_a_key_of_another_levels_fact_put_is_the_namespaces_own_and_deleted_forgets_it(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    shares = manager.settings.memory.share == "user"
    ids = _filed(manager, db)
    store = manager.store(AGENT_TEMPLATE)
    ns, key = ("memories", "alice", "support"), fact_key(ids[PERSON])
    # a put writes the exact scope; its row holds the key, so the key shows one item
    store.put(ns, key, {"content": "Alice wants answers by phone"})
    found = [i for i in store.search(ns, limit=50) if i.key == key]
    assert [i.value["content"] for i in found] == ["Alice wants answers by phone"]
    got = store.get(ns, key)
    assert got is not None and got.value["content"] == "Alice wants answers by phone"
    # a delete of the key forgets what it named: the row's fact, and the person's fact at
    # the person's level (as the forget tool does), where the namespace reads it
    store.delete(ns, key)
    assert store.get(ns, key) is None
    person = db.execute(
        "SELECT superseded_at IS NULL FROM agent_memory.memory_items WHERE id = %s",
        (ids[PERSON],),
    ).fetchone()
    assert person == (not shares,)
    billing = store.search(("memories", "alice", "billing"))
    assert PERSON not in [i.value["content"] for i in billing]


def test_a_vector_search_completes_its_page_with_the_levels_facts(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    from agent_memory.store import AgentMemoryStore
    from tests.test_store_index import CharacterEmbeddings

    shares = manager.settings.memory.share == "user"
    _filed(manager, db)
    embeddings = CharacterEmbeddings()
    index = {"dims": embeddings.dims, "embed": embeddings, "fields": ["content"]}
    store = AgentMemoryStore(manager, namespace=AGENT_TEMPLATE, index=index)  # type: ignore[arg-type]
    store.setup()
    ns = ("memories", "alice", "support")
    store.put(ns, "tz", {"content": "Alice works in CET"})
    found = store.search(ns, query="email", limit=10)
    assert found[0].value["content"] == "Alice works in CET" and found[0].score is not None
    # then, unscored, what no item shows: its note (put before the index) and the person's
    rest = sorted((i.value["content"], i.value.get("level")) for i in found[1:])
    assert rest == sorted([(NOTE, None), *([(PERSON, "user")] if shares else [])])
    assert all(i.score is None for i in found[1:])


def test_list_namespaces_names_the_level_namespaces_that_hold_facts(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    shares = manager.settings.memory.share == "user"
    _filed(manager, db)
    store = manager.store(AGENT_TEMPLATE)
    people = [("memories", "alice"), ("memories", "bob")] if shares else []
    assert store.list_namespaces(prefix=("memories",)) == sorted(
        [*people, ("memories", "alice", "billing"), ("memories", "alice", "support")]
    )
    assert store.list_namespaces(prefix=("memories", "bob")) == people[1:]
    # the default template has no level namespace: the person's is a memory namespace
    assert manager.store().list_namespaces(max_depth=2) == [
        ("memories", "alice"),
        ("memories", "bob"),
    ]
