"""How a memory's value becomes the text inject shows (LangMem's shapes, through LangMem's own
tool), what the Store refuses before any SQL (NUL characters, lone surrogates, a fact too long)
with its own short error, and where a search puts what matches nothing of the question."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langmem import create_manage_memory_tool
from pydantic import BaseModel

from agent_memory import Scope
from agent_memory.errors import InvalidStoreRequestError
from agent_memory.fact_text import memory_text
from agent_memory.settings import Settings
from agent_memory.store import AgentMemoryStore

NS = ("memories", "erin")
ERIN = Scope(user_id="erin")


@pytest.fixture
def store(settings: Settings) -> Iterator[AgentMemoryStore]:
    with AgentMemoryStore.from_conn_string(settings=settings) as store:
        yield store


def test_the_text_of_values_that_are_not_strings() -> None:
    said = "Erin is allergic to peanuts"
    assert memory_text({"content": said}) == said
    assert memory_text({"content": {"content": said}}) == said
    # LangMem's store manager (langmem/knowledge/extraction.py: {"kind": kind, "content":
    # content}, content a schema's model_dump, its default schema Memory(content: str))
    assert memory_text({"kind": "Memory", "content": {"content": said}}) == said
    assert memory_text({"name": "Erin", "allergy": "peanuts"}) == "name: Erin; allergy: peanuts"
    assert memory_text({"kind": "Profile", "content": {"name": "Erin", "age": 7}}) == (
        "name: Erin; age: 7"
    )
    nested = {"content": {"name": "Erin", "home": {"city": "Oslo", "zip": "0150"}}}
    assert memory_text(nested) == "name: Erin; home: (city: Oslo; zip: 0150)"
    assert memory_text({"content": {"foods": ["peanuts", "shellfish"], "note": None}}) == (
        "foods: peanuts, shellfish"
    )
    assert memory_text({"content": {}, "importance": 0.9}) == ""


class Allergy(BaseModel):
    person: str
    allergen: str


def test_langmem_tool_memories_reach_inject_as_text(
    store: AgentMemoryStore, db: psycopg.Connection[Any]
) -> None:
    # LangMem's real tools, on this store: a string memory and a pydantic schema's
    said = create_manage_memory_tool(namespace=("memories", "{user_id}"), store=store)
    schema = create_manage_memory_tool(
        namespace=("memories", "{user_id}"), store=store, schema=Allergy, name="manage_allergy"
    )
    config = {"configurable": {"user_id": "erin"}}
    said.invoke({"content": "Erin is allergic to peanuts", "action": "create"}, config)
    schema.invoke(
        {"content": {"person": "Erin", "allergen": "shellfish"}, "action": "create"}, config
    )
    store.put(NS, "managed", {"kind": "Memory", "content": {"content": "Erin likes kiwis"}})
    frame = store.manager.inject_sync(ERIN, query="what is erin allergic to?")
    assert set(frame.injected_facts) == {
        "Erin is allergic to peanuts",
        "person: Erin; allergen: shellfish",
        "Erin likes kiwis",
    }
    assert not any("{" in fact for fact in frame.injected_facts)


@pytest.mark.parametrize(
    ("namespace", "key", "value", "named"),
    [
        (NS, "k", {"content": "peanuts\x00"}, "value['content'] 'peanuts\\x00' holds a NUL"),
        (("docs",), "k", {"a": ["ok", "bad\x00"]}, "value['a'][1] 'bad\\x00' holds a NUL"),
        (("docs",), "k", {"bad\x00": 1}, "has the field name 'bad\\x00', which holds a NUL"),
        (("docs",), "k", {"a": "\ud800"}, "holds a lone surrogate"),
        (("docs",), "k\x00", {"a": 1}, "item key 'k\\x00' holds a NUL"),
        (NS, "k", {"content": "x" * 1_000_000}, "is 1000000 characters long, over the limit"),
        (NS, "k", {"content": {"about": None}}, "is empty"),
    ],
)
def test_bad_text_is_refused_by_the_store_in_its_own_short_words(
    store: AgentMemoryStore,
    db: psycopg.Connection[Any],
    namespace: tuple[str, ...],
    key: str,
    value: dict[str, Any],
    named: str,
) -> None:
    store.manager.settings.memory.store_max_value_bytes = 10_000_000
    with pytest.raises(InvalidStoreRequestError) as refused:
        store.put(namespace, key, value)
    assert named in str(refused.value)
    assert len(str(refused.value)) < 400
    assert db.execute("SELECT count(*) FROM agent_memory.store_items").fetchone() == (0,)


def test_what_matches_nothing_puts_the_scopes_facts_before_other_items(
    store: AgentMemoryStore,
) -> None:
    store.put(NS, "allergy", {"content": "Erin is allergic to peanuts"})
    store.put((*NS, "profile"), "settings", {"theme": "dark", "language": "en"})
    store.put(("memories", "other"), "x", {"content": "Other likes tea"})
    # no word of the question is the fact's, and a fact put through the store has no vector
    # before consolidation embeds it: both items score 0; the scope's fact comes first
    found = store.search(NS, query="which allergies?", limit=1)
    assert [(i.key, i.score) for i in found] == [("allergy", 0.0)]
    found = store.search(NS, query="which allergies?", limit=5)
    assert [i.key for i in found] == ["allergy", "settings"]
    # a match still comes before them
    store.put((*NS, "profile"), "diet", {"note": "vegetarian diet, allergies noted"})
    found = store.search(NS, query="which allergies?", limit=5)
    assert [i.key for i in found] == ["diet", "allergy", "settings"]
    assert found[0].score and found[0].score > 0


# labels that are array-literal syntax, quoting, spacing or the word NULL (text_array sends a
# namespace as an array literal, sql/0030)
TRICKY = ['a"b', "c\\d", "{x,y}", " spaced ", "NULL", "é✓", '\\"', "}"]


def test_labels_with_array_syntax_are_kept_as_written(
    store: AgentMemoryStore, db: psycopg.Connection[Any]
) -> None:
    for label in TRICKY:
        store.put(("docs", label), "k", {"text": label})  # a document
        store.put(("memories", label), "k", {"content": f"{label} likes tea"})  # a memory
    for label in TRICKY:
        got = store.get(("docs", label), "k")
        assert got is not None and got.namespace == ("docs", label) and got.value["text"] == label
        memory = store.get(("memories", label), "k")
        assert memory is not None and memory.value["content"] == f"{label} likes tea"
    stored = {tuple(r[0]) for r in db.execute("SELECT namespace FROM agent_memory.store_items")}
    assert stored == {(kind, label) for kind in ("docs", "memories") for label in TRICKY}
    users = {r[0] for r in db.execute("SELECT user_id FROM agent_memory.memory_items")}
    assert users == set(TRICKY)
    assert set(store.list_namespaces(prefix=("docs",))) == {("docs", label) for label in TRICKY}
