"""AgentMemoryStore under LangMem's store manager and LangChain's create_agent, with the Store's
vector index (``index=``) and TTL (``ttl=``), driven by a real chat model (``ChatOpenAI``) over
real HTTP to the loopback OpenAI-compatible server, on the real PostgreSQL.

The server is scripted as a model would answer LangMem: its extraction (trustcall) asks for the
``Memory`` tool (or a pydantic schema's) when nothing is stored yet, and for ``PatchDoc`` and
``RemoveDoc`` against the memories it found, named by the ids in its prompt. What LangMem writes
must be items of the memory namespace and facts inject gives back as text, never JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from langchain.agents import create_agent
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI
from langgraph.config import get_store
from langgraph.graph import END, START, MessagesState, StateGraph
from langmem import (
    create_manage_memory_tool,
    create_memory_store_manager,
    create_search_memory_tool,
)
from pydantic import BaseModel, SecretStr

from agent_memory import Scope
from agent_memory.settings import Settings
from agent_memory.store import AgentMemoryStore
from tests.fake_llm import EMBEDDING_DIMENSIONS, FakeLLM, Reply, completion_json, embed_text

NS = ("memories", "alice")
ALICE = Scope(user_id="alice")
CONFIG: RunnableConfig = {"configurable": {"user_id": "alice", "langgraph_user_id": "alice"}}


class HashEmbeddings(Embeddings):
    """Deterministic embeddings (the loopback server's hashed bag of words): texts that share
    words are close, others are not."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [embed_text(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return embed_text(text)


INDEX: dict[str, Any] = {
    "dims": EMBEDDING_DIMENSIONS,
    "embed": HashEmbeddings(),
    "fields": ["content"],
}
TTL: dict[str, Any] = {"default_ttl": 60, "refresh_on_read": True}


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> Reply:
    """A chat completion whose answer is these tool calls, as OpenAI sends them."""
    body = completion_json("")
    choice = body["choices"][0]
    choice["finish_reason"] = "tool_calls"
    choice["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ],
    }
    return Reply(body=json.dumps(body))


def offered(request: dict[str, Any]) -> list[str]:
    return sorted(t["function"]["name"] for t in request.get("tools", []))


def instances(request: dict[str, Any]) -> dict[str, str]:
    """The existing memories trustcall shows the model: id -> the instance's text."""
    prompt = "\n".join(str(m.get("content")) for m in request["messages"])
    found = re.findall(r'<instance id=(\S+) schema_type="\w+">\n(.*?)\n</instance>', prompt, re.S)
    return {text: doc_id for doc_id, text in found}


def id_of(request: dict[str, Any], words: str) -> str:
    ids = [doc_id for text, doc_id in instances(request).items() if words in text]
    assert len(ids) == 1, instances(request)
    return ids[0]


def chat_model(fake_llm: FakeLLM) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=fake_llm.api_base, api_key=SecretStr("test"), model="test-model", max_retries=0
    )


@pytest.fixture
def store(settings: Settings) -> Iterator[AgentMemoryStore]:
    with AgentMemoryStore.from_conn_string(settings=settings) as s:
        yield s


def facts(db: psycopg.Connection[Any], user: str = "alice") -> list[tuple[str, bool]]:
    """The scope's facts, current or superseded (history), in the order they were written."""
    rows = db.execute(
        "SELECT content, superseded_at IS NULL FROM agent_memory.memory_items"
        " WHERE user_id = %s ORDER BY id",
        (user,),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


# ---- LangMem's store manager ----------------------------------------------------------------


def test_langmem_store_manager_writes_updates_and_deletes_facts(
    store: AgentMemoryStore, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    manager = create_memory_store_manager(
        chat_model(fake_llm), namespace=("memories", "{user_id}"), store=store, enable_deletes=True
    )
    fake_llm.reply_with(
        tool_calls(
            ("Memory", {"content": "Alice's favourite colour is teal"}),
            ("Memory", {"content": "Alice works as a night nurse"}),
        )
    )
    conversation = [("user", "I love teal, and I work nights as a nurse"), ("ai", "Noted!")]
    puts = manager.invoke({"messages": conversation}, CONFIG)
    assert fake_llm.calls == 1
    assert offered(fake_llm.requests[0]) == ["Memory"]  # nothing stored yet: extract only
    assert len(puts) == 2

    items = {i.key: i.value for i in store.search(NS)}
    assert sorted(items.values(), key=lambda v: str(v["content"]["content"])) == [
        {"kind": "Memory", "content": {"content": "Alice works as a night nurse"}},
        {"kind": "Memory", "content": {"content": "Alice's favourite colour is teal"}},
    ]
    frame = store.manager.inject_sync(ALICE, query="what colour does alice like?")
    assert sorted(frame.injected_facts) == [
        "Alice works as a night nurse",
        "Alice's favourite colour is teal",
    ]
    teal = next(k for k, v in items.items() if "teal" in str(v))

    # the second run finds both memories in the store and shows them to the model by id; the
    # model patches one and removes the other
    def update(request: dict[str, Any]) -> Reply:
        return tool_calls(
            (
                "PatchDoc",
                {
                    "json_doc_id": id_of(request, "teal"),
                    "planned_edits": "the colour changed",
                    "patches": [
                        {
                            "op": "replace",
                            "path": "/content",
                            "value": "Alice's favourite colour is amber",
                        }
                    ],
                },
            ),
            ("RemoveDoc", {"json_doc_id": id_of(request, "nurse")}),
        )

    fake_llm.reset(update)
    conversation = [("user", "I like amber now, and I quit nursing"), ("ai", "Got it.")]
    manager.invoke({"messages": conversation}, CONFIG)
    assert fake_llm.calls == 1
    assert offered(fake_llm.requests[0]) == ["Memory", "PatchDoc", "RemoveDoc"]
    assert [(i.key, i.value) for i in store.search(NS)] == [
        (teal, {"kind": "Memory", "content": {"content": "Alice's favourite colour is amber"}})
    ]
    assert store.manager.inject_sync(ALICE, query="colour").injected_facts == [
        "Alice's favourite colour is amber"
    ]
    # the old wordings are kept as history, superseded
    assert sorted(facts(db)) == [
        ("Alice works as a night nurse", False),
        ("Alice's favourite colour is amber", True),
        ("Alice's favourite colour is teal", False),
    ]


class Person(BaseModel):
    """Someone the user talks about."""

    name: str
    relation: str
    city: str


async def test_langmem_store_manager_with_a_schema_on_an_indexed_store_with_ttl(
    settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    async with AgentMemoryStore.afrom_conn_string(
        settings=settings,
        index=INDEX,
        ttl=TTL,
    ) as store:
        manager = create_memory_store_manager(
            chat_model(fake_llm),
            schemas=[Person],
            namespace=("memories", "{user_id}"),
            store=store,
            enable_deletes=True,
        )
        alice = {"name": "Alice", "relation": "self", "city": "Oslo"}
        bob = {"name": "Bob", "relation": "brother", "city": "Rome"}
        fake_llm.reply_with(tool_calls(("Person", alice), ("Person", bob)))
        said = "I'm Alice from Oslo; my brother Bob lives in Rome"
        await manager.ainvoke({"messages": [("user", said)]}, CONFIG)
        assert offered(fake_llm.requests[0]) == ["Person"]
        found = await store.asearch(NS, query="which city does Alice live in, Oslo?")
        assert [i.value for i in found] == [
            {"kind": "Person", "content": alice},
            {"kind": "Person", "content": bob},
        ]
        assert all(i.score is not None for i in found)  # ranked by the index's vectors
        assert found[0].score > found[1].score  # type: ignore[operator]
        frame = await store.manager.inject(ALICE, query="where does alice live?")
        assert sorted(frame.injected_facts) == [
            "name: Alice; relation: self; city: Oslo",
            "name: Bob; relation: brother; city: Rome",
        ]
        # the puts got the store's default TTL
        ttls = db.execute(
            "SELECT ttl_minutes, expires_at - now() FROM agent_memory.store_items"
        ).fetchall()
        assert len(ttls) == 2
        assert all(
            m == 60 and timedelta(minutes=59) < left <= timedelta(minutes=60) for m, left in ttls
        )

        def moved(request: dict[str, Any]) -> Reply:
            patch = {"op": "replace", "path": "/city", "value": "Bergen"}
            edit = {"json_doc_id": id_of(request, "Oslo"), "planned_edits": "moved"}
            return tool_calls(
                ("PatchDoc", {**edit, "patches": [patch]}),
                ("RemoveDoc", {"json_doc_id": id_of(request, "Rome")}),
            )

        # the update and the delete are put together (asyncio.gather): one batch of the loop
        fake_llm.reset(moved)
        await manager.ainvoke({"messages": [("user", "I moved to Bergen; forget Bob")]}, CONFIG)
        assert offered(fake_llm.requests[0]) == ["PatchDoc", "Person", "RemoveDoc"]
        (again,) = await store.asearch(NS, query="Bergen")
        assert again.key == found[0].key
        assert again.value == {"kind": "Person", "content": {**alice, "city": "Bergen"}}
        frame = await store.manager.inject(ALICE, query="where does alice live?")
        assert frame.injected_facts == ["name: Alice; relation: self; city: Bergen"]
        assert ("name: Bob; relation: brother; city: Rome", False) in facts(db)
        # the removed item's vector went with it; the updated one's is of its new text
        vectors = db.execute(
            "SELECT s.key FROM agent_memory.store_vectors v"
            " JOIN agent_memory.store_items s ON s.id = v.item_id"
        ).fetchall()
        assert vectors == [(again.key,)]
        assert again.score is not None and again.score > 0


async def test_on_an_indexed_store_langmem_finds_and_removes_facts_no_item_shows(
    settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    async with AgentMemoryStore.afrom_conn_string(settings=settings, index=INDEX) as store:
        # a fact the store has no item of (consolidation's, add_fact's): it has no vector
        await store.manager.add_fact(ALICE, "Alice keeps bees on her roof")
        # LangMem's shape: its manager reads every item's "kind" and "content"
        tea = {"kind": "Memory", "content": {"content": "Alice drinks green tea"}}
        await store.aput(NS, "tea", tea)
        found = await store.asearch(NS, query="green tea")
        assert [(i.value["content"], i.score is None) for i in found] == [
            (tea["content"], False),
            ("Alice keeps bees on her roof", True),  # after the scored items, as index=False's
        ]
        paged = [await store.asearch(NS, query="green tea", limit=1, offset=n) for n in range(3)]
        assert [[i.value["content"] for i in page] for page in paged] == [
            [tea["content"]],
            ["Alice keeps bees on her roof"],
            [],
        ]
        assert await store.asearch(NS, query="bees", filter={"kind": "general"}) == [found[1]]
        assert await store.asearch(("memories", "bob"), query="bees") == []

        manager = create_memory_store_manager(
            chat_model(fake_llm),
            namespace=("memories", "{user_id}"),
            store=store,
            enable_deletes=True,
        )

        def forget(request: dict[str, Any]) -> Reply:
            return tool_calls(("RemoveDoc", {"json_doc_id": id_of(request, "bees")}))

        fake_llm.reset(forget)
        await manager.ainvoke({"messages": [("user", "I gave my bees away")]}, CONFIG)
        assert "Alice keeps bees on her roof" in str(fake_llm.requests[0]["messages"])
        frame = await store.manager.inject(ALICE, query="bees")
        assert frame.injected_facts == ["Alice drinks green tea"]
        assert ("Alice keeps bees on her roof", False) in facts(db)


# ---- create_agent and get_store() on an indexed store with TTLs -----------------------------


def agent_script(found: list[str]) -> Callable[[dict[str, Any]], Reply]:
    """The agent's model: remember, then search, then answer (keeping what the search said)."""

    def answer(request: dict[str, Any]) -> Reply:
        said = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        if not said:
            return tool_calls(("manage_memory", {"content": "Alice drinks green tea at dawn"}))
        if len(said) == 1:
            return tool_calls(("search_memory", {"query": "what green tea does alice drink"}))
        found.append(said[-1])
        return Reply("Green tea, at dawn.")

    return answer


def expires_in(db: psycopg.Connection[Any], key: str) -> timedelta:
    row = db.execute(
        "SELECT expires_at - now() FROM agent_memory.store_items WHERE key = %s", (key,)
    ).fetchone()
    assert row is not None and row[0] is not None, key
    return row[0]  # type: ignore[no-any-return]


def test_create_agent_and_get_store_with_an_index_and_ttls(
    settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    with AgentMemoryStore.from_conn_string(settings=settings, index=INDEX, ttl=TTL) as store:
        # said directly, kept out of the index: a fact, but no vector
        store.put(NS, "unindexed", {"content": "Alice drinks green tea at dusk"}, index=False)
        tools_ns = ("memories", "{langgraph_user_id}")
        tools = [create_manage_memory_tool(tools_ns), create_search_memory_tool(tools_ns)]
        found: list[str] = []
        fake_llm.reset(agent_script(found))
        agent = create_agent(chat_model(fake_llm), tools=tools, store=store)
        said: Any = {"messages": [("user", "I drink green tea at dawn")]}
        result = agent.invoke(said, CONFIG)
        assert result["messages"][-1].content == "Green tea, at dawn."
        assert fake_llm.calls == 3

        # the search tool's answer (what the model read): the indexed memory scored, first;
        # the one kept out of the index after it, with no score
        seen = json.loads(found[0])
        assert [(m["value"]["content"], m["score"] is None) for m in seen] == [
            ("Alice drinks green tea at dawn", False),
            ("Alice drinks green tea at dusk", True),
        ]
        assert seen[0]["score"] > 0.5
        dawn = seen[0]["key"]
        vectors = db.execute(
            "SELECT s.key, v.field_path FROM agent_memory.store_vectors v"
            " JOIN agent_memory.store_items s ON s.id = v.item_id"
        ).fetchall()
        assert vectors == [(dawn, "content")]
        frame = store.manager.inject_sync(ALICE, query="when does alice drink green tea?")
        assert sorted(frame.injected_facts) == [
            "Alice drinks green tea at dawn",
            "Alice drinks green tea at dusk",
        ]

        # both got the default TTL; a node's get() refreshes the one it reads
        assert timedelta(minutes=59) < expires_in(db, dawn) <= timedelta(minutes=60)
        db.execute("UPDATE agent_memory.store_items SET expires_at = now() + interval '1 minute'")
        scores: list[tuple[str, float | None]] = []

        def recall(state: MessagesState) -> dict[str, Any]:
            memories = get_store()
            hit = memories.get(NS, dawn)
            assert hit is not None
            scores.extend(
                (i.value["content"], i.score)
                for i in memories.search(NS, query="dawn tea", refresh_ttl=False)
            )
            return {"messages": [("ai", f"Remember: {hit.value['content']}")]}

        builder = StateGraph(MessagesState)
        builder.add_node("recall", recall)
        builder.add_edge(START, "recall")
        builder.add_edge("recall", END)
        graph = builder.compile(store=store)
        asked: Any = {"messages": [("user", "what do you remember?")]}
        out = graph.invoke(asked)
        assert out["messages"][-1].content == "Remember: Alice drinks green tea at dawn"
        assert scores[0][0] == "Alice drinks green tea at dawn"
        assert scores[0][1] is not None and scores[0][1] > 0
        assert scores[1:] == [("Alice drinks green tea at dusk", None)]
        assert expires_in(db, dawn) > timedelta(minutes=59)  # refreshed by the read
        assert expires_in(db, "unindexed") <= timedelta(minutes=1)  # not read: not refreshed
        # a vector search refreshes what it returns (refresh_on_read), as get does
        db.execute("UPDATE agent_memory.store_items SET expires_at = now() + interval '1 minute'")
        assert [i.key for i in store.search(NS, query="tea at dusk")] == [dawn, "unindexed"]
        assert expires_in(db, dawn) > timedelta(minutes=59)
        assert expires_in(db, "unindexed") > timedelta(minutes=59)
        db.execute("UPDATE agent_memory.store_items SET expires_at = now() + interval '1 minute'")

        # time passes for the unread one: it is gone from reads at once, the sweep deletes it
        # and its fact leaves inject, kept as history
        db.execute(
            "UPDATE agent_memory.store_items SET expires_at = now() - interval '1 minute'"
            " WHERE key = 'unindexed'"
        )
        assert [i.key for i in store.search(NS)] == [dawn]
        assert store.sweep_ttl() == 1
        assert store.sweep_ttl() == 0
        assert db.execute(
            "SELECT count(*) FROM agent_memory.store_items WHERE key = 'unindexed'"
        ).fetchone() == (0,)
        frame = store.manager.inject_sync(ALICE, query="when does alice drink green tea?")
        assert frame.injected_facts == ["Alice drinks green tea at dawn"]
        assert ("Alice drinks green tea at dusk", False) in facts(db)
