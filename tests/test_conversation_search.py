"""The episodic tier by relevance: every message of every episode is searchable as soon as it
is stored (by full text, from its messages until its sentences are indexed; by meaning once the
flows embed it), inject adds the relevant messages its facts do not cover within a token
budget, and ``search`` finds them from the command line."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from typer.testing import CliRunner

from agent_memory import MemoryManager
from agent_memory.backfill import import_jsonl
from agent_memory.embedding import make_embedder
from agent_memory.errors import InvalidMessageError
from agent_memory.inject import snippet_rows
from agent_memory.models import Scope
from agent_memory.settings import MemorySettings, Settings
from agent_memory.stored_embeddings import embed_snippets
from benchmarks.retrieval import load_facts
from tests.pools import with_pool

ALEX = Scope("alex", "assistant")
MARCH = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
APRIL = datetime(2026, 4, 20, 9, 30, tzinfo=UTC)


async def tuned(settings: Settings, **memory: Any) -> MemoryManager:
    changed = settings.model_copy(
        update={"memory": MemorySettings(**{**settings.memory.model_dump(), **memory})}
    )
    return await MemoryManager.create(settings=changed, migrate=False)


async def test_every_way_in_indexes_the_messages_it_stores(
    manager: MemoryManager, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    await manager.record(
        ALEX,
        [
            HumanMessage("My dentist appointment moved to Friday."),
            AIMessage("Noted, Friday it is."),
            AIMessage("", tool_calls=[{"name": "calendar", "args": {}, "id": "c1"}]),  # no text
            HumanMessage(
                content=[{"type": "text", "text": "Also the"}, {"type": "text", "text": "plumber"}]
            ),
        ],
        occurred_at=MARCH,
    )
    await manager.record_many([(ALEX, [HumanMessage("I started pottery classes.")], APRIL)])
    path = tmp_path / "history.jsonl"
    path.write_text(
        json.dumps(
            {
                "user_id": "alex",
                "agent_id": "assistant",
                "occurred_at": "2026-01-10T08:00:00+00:00",
                "messages": [{"role": "user", "content": "We adopted a kitten."}],
            }
        )
        + "\n",
        encoding="utf-8",
    )
    import_jsonl(db, path)
    # each way in queues what it stores; the drain makes the snippets
    assert await manager.index_pending() == 3
    rows = db.execute(
        "SELECT position, speaker, content, occurred_at FROM agent_memory.snippets"
        " ORDER BY occurred_at, position"
    ).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (0, "user", "We adopted a kitten."),
        (0, "user", "My dentist appointment moved to Friday."),
        (1, "assistant", "Noted, Friday it is."),
        (3, "user", "Also the plumber"),  # the tool call has no text: no snippet
        (0, "user", "I started pottery classes."),
    ]
    assert rows[1][3] == MARCH  # a message carries its conversation's time


async def test_a_message_of_several_sentences_is_a_snippet_per_sentence(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await manager.record(
        ALEX,
        [
            HumanMessage(
                "Traffic was terrible!  I planted basil in the backyard. Is that odd?\u2026 No."
            ),
            AIMessage("Version 2.5 of the app, e.g. the beta, is out"),  # no sentence break
        ],
        occurred_at=MARCH,
    )
    await manager.index_pending()
    rows = db.execute(
        "SELECT position, part, speaker, content FROM agent_memory.snippets ORDER BY position, part"
    ).fetchall()
    assert rows == [
        (0, 0, "user", "Traffic was terrible!"),
        (0, 1, "user", "I planted basil in the backyard."),
        (0, 2, "user", "Is that odd?\u2026"),
        (0, 3, "user", "No."),
        (1, 0, "assistant", "Version 2.5 of the app, e.g. the beta, is out"),
    ]
    # the sentence that answers is what is found, not the whole message
    found = await manager.search_conversations(ALEX, "What did I plant in the backyard?")
    assert found[0].content == "I planted basil in the backyard."
    assert (found[0].position, found[0].speaker) == (0, "user")


def test_upgrading_splits_the_messages_version_9_indexed_whole(
    db: psycopg.Connection[Any],
) -> None:
    from agent_memory.db.migrations import load_migrations

    # a snippet as version 9 made it: the whole message, part 0
    db.execute(
        "INSERT INTO agent_memory.episodes (user_id, agent_id, messages, message_count,"
        " occurred_at) VALUES ('alex', 'assistant', %s, 1, %s)",
        (json.dumps([{"role": "user", "content": "One. Two."}]), MARCH),
    )
    db.execute("DELETE FROM agent_memory.snippets")
    db.execute(
        "INSERT INTO agent_memory.snippets (episode_id, position, scope_key, speaker,"
        " occurred_at, content) SELECT id, 0, scope_key, 'user', occurred_at, 'One. Two.'"
        " FROM agent_memory.episodes"
    )
    (version_10,) = [m for m in load_migrations() if m.version == 10]
    with db.transaction():
        db.execute(version_10.sql.encode())
    rows = db.execute(
        "SELECT position, part, content FROM agent_memory.snippets ORDER BY part"
    ).fetchall()
    assert rows == [(0, 0, "One."), (0, 1, "Two.")]


async def test_search_finds_messages_by_words_and_by_meaning_within_dates(
    manager: MemoryManager,
) -> None:
    await manager.record(
        ALEX, [HumanMessage("My dentist appointment moved to Friday.")], occurred_at=MARCH
    )
    await manager.record(
        ALEX, [HumanMessage("I adopted a border collie called Pixel.")], occurred_at=APRIL
    )
    await manager.record(
        Scope("someone-else"), [HumanMessage("My dentist is great.")], occurred_at=APRIL
    )
    # full text finds it before anything has been embedded or consolidated
    found = await manager.search_conversations(ALEX, "When is the dentist?")
    assert [s.content for s in found] == ["My dentist appointment moved to Friday."]
    assert found[0].line() == "2026-03-02, user: My dentist appointment moved to Friday."
    # by meaning once embedded (the flows do this; here the same call they make)
    embedder = make_embedder(manager.settings.embedding)
    assert embedder is not None
    assert (await embed_snippets(await manager.backend.apool(), embedder, ALEX)).stored == 2
    found = await manager.search_conversations(ALEX, "Which animal lives with me?")
    assert found[0].content == "I adopted a border collie called Pixel."
    # a date range
    assert await manager.search_conversations(ALEX, "dentist", since=date(2026, 4, 1)) == []
    assert len(await manager.search_conversations(ALEX, "dentist", until=date(2026, 4, 1))) == 1
    assert await manager.search_conversations(ALEX, "   ") == []
    with pytest.raises(InvalidMessageError, match="is not before until"):
        await manager.search_conversations(
            ALEX, "x", since=date(2026, 4, 1), until=date(2026, 4, 1)
        )
    with pytest.raises(InvalidMessageError, match="limit 0"):
        await manager.search_conversations(ALEX, "x", limit=0)


async def test_inject_adds_relevant_messages_that_no_fact_covers_within_its_budget(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    load_facts(
        db, ALEX, [{"content": "My dentist appointment moved to Friday.", "importance": 0.5}]
    )
    manager = await tuned(settings, inject_snippets_tokens=30)
    try:
        talk = [
            HumanMessage("My dentist appointment moved to Friday."),  # a fact says it already
            AIMessage("Got it, your dentist appointment moved to Friday."),  # so does this
            HumanMessage("The dentist said my wisdom tooth has to come out."),
            HumanMessage("I need to find a new dentist closer to the office, the old one moved."),
        ]
        await manager.record(ALEX, talk, occurred_at=MARCH)
        frame = await manager.inject(ALEX, query="What did the dentist say?")
        assert frame.injected_facts == ["My dentist appointment moved to Friday."]
        # 30 tokens (120 characters) hold one dated line, not two; none repeats the fact
        assert [s.content for s in frame.snippets] == [
            "The dentist said my wisdom tooth has to come out."
        ]
        assert "From past conversations:\n- 2026-03-02, user: The dentist said my wisdom" in (
            frame.context
        )
        assert (
            manager.inject_sync(ALEX, query="What did the dentist say?").snippets == frame.snippets
        )
        # no question, no snippets; a budget of 0 turns them off
        assert (await manager.inject(ALEX)).snippets == []
    finally:
        await manager.close()
    off = await tuned(settings, inject_snippets_tokens=0)
    try:
        assert (await off.inject(ALEX, query="What did the dentist say?")).snippets == []
    finally:
        await off.close()


async def test_an_inject_searches_its_snippets_with_its_facts_on_one_connection(
    settings: Settings,
) -> None:
    """An inject ranks its facts and searches its snippets in one statement, on the one pooled
    connection it takes: callers that fill the pool each hold one and never wait on another
    for a second, whatever the pool's size."""
    question = "What did the dentist say?"
    expected = ["The dentist said my wisdom tooth has to come out."]
    recorder = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await recorder.record(ALEX, [HumanMessage(expected[0])], occurred_at=MARCH)
    finally:
        await recorder.close()
    for connections in (1, 2):
        manager = MemoryManager.create_sync(
            settings=with_pool(settings, connections), migrate=False
        )
        try:
            pool = manager.backend.spool()
            asked = pool.get_stats().get("requests_num", 0)
            frame = manager.inject_sync(ALEX, query=question)
            assert [s.content for s in frame.snippets] == expected
            assert frame.ranking == "hybrid"
            assert pool.get_stats().get("requests_num", 0) - asked == 1
            with ThreadPoolExecutor(max_workers=8) as callers:
                asks = [
                    callers.submit(manager.inject_sync, ALEX, query=question) for _ in range(16)
                ]
                frames = [ask.result() for ask in asks]
            assert [[s.content for s in f.snippets] for f in frames] == [expected] * 16
        finally:
            manager.close_sync()
        manager = await MemoryManager.create(
            settings=with_pool(settings, connections), migrate=False
        )
        try:
            frames = await asyncio.gather(
                *(manager.inject(ALEX, query=question) for _ in range(16))
            )
            assert [[s.content for s in f.snippets] for f in frames] == [expected] * 16
        finally:
            await manager.close()


async def test_the_users_words_stand_in_for_a_restatement_of_them(
    manager: MemoryManager,
) -> None:
    await manager.record(
        ALEX,
        [
            HumanMessage("Long day. I adopted a border collie called Pixel from the shelter."),
            AIMessage("Got it, you adopted a border collie called Pixel."),
        ],
        occurred_at=MARCH,
    )
    frame = await manager.inject(ALEX, query="border collie called Pixel")
    assert [s.speaker for s in frame.snippets] == ["user"]
    # the same when messages carry their authors' names: the role says who the user is
    bob = Scope("bob", "assistant")
    await manager.record(
        bob,
        [
            HumanMessage("Long day. I adopted a tabby cat called Biscuit.", name="Bob"),
            AIMessage("Got it, you adopted a tabby cat called Biscuit.", name="Ada"),
        ],
        occurred_at=MARCH,
    )
    frame = await manager.inject(bob, query="tabby cat called Biscuit")
    assert [(s.speaker, s.role) for s in frame.snippets] == [("Bob", "user")]


async def test_a_question_comes_with_the_reply_that_answers_it(settings: Settings) -> None:
    """The question matches the words asked; its reply, which says the answer in none of them,
    is shown with it, attributed, and counts as what the snippet says."""
    recorder = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await recorder.record(
            ALEX,
            [
                AIMessage("Can your dog do any tricks yet?"),
                HumanMessage("Sit, stay, paw and roll over!"),
                AIMessage("Which tricks will you teach next?"),  # followed by its own speaker
                AIMessage("Maybe fetch."),
            ],
            occurred_at=MARCH,
        )
    finally:
        await recorder.close()
    question = "What tricks can my dog do?"
    manager = await tuned(settings, inject_snippets_tokens=100)
    try:
        frame = await manager.inject(ALEX, query=question)
        first = frame.snippets[0]
        assert first.content == "Can your dog do any tricks yet?"
        assert first.reply is not None
        assert (first.reply.speaker, first.reply.content) == (
            "user",
            "Sit, stay, paw and roll over!",
        )
        assert "yet? \u2014 user: Sit, stay, paw and roll over!" in frame.context
        # the same speaker going on is no reply; the reply shown is not shown again alone
        assert all(s.reply is None for s in frame.snippets[1:])
        assert "Sit, stay" not in [s.content for s in frame.snippets[1:]]
        found = await manager.search_conversations(ALEX, question)
        assert found[0].reply == first.reply
    finally:
        await manager.close()
    off = await tuned(settings, inject_snippets_tokens=100, inject_snippet_replies=False)
    try:
        frame = await off.inject(ALEX, query=question)
        assert [s.reply for s in frame.snippets] == [None] * len(frame.snippets)
        assert frame.snippets[0].content == "Can your dog do any tricks yet?"
    finally:
        await off.close()


async def test_a_long_reply_is_cut_to_what_a_snippet_may_inject(settings: Settings) -> None:
    recorder = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await recorder.record(
            ALEX,
            [AIMessage("Which books did you read on holiday?"), HumanMessage("Dune. " * 200)],
            occurred_at=MARCH,
        )
    finally:
        await recorder.close()
    manager = await tuned(settings, inject_snippets_tokens=400)
    try:
        (first, *_) = (await manager.inject(ALEX, query="books on holiday")).snippets
        assert first.reply is not None and first.reply.content.startswith("Dune. Dune.")
        assert len(first.reply.content) == 400 and first.reply.content.endswith("\u2026")
    finally:
        await manager.close()


async def test_a_question_naming_someone_finds_what_they_said(manager: MemoryManager) -> None:
    """The speaker is part of what a message says: a question naming Calvin matches Calvin's
    own messages, and a message that only addresses him does not outrank them."""
    await manager.record(
        ALEX,
        [
            HumanMessage("I went hiking on Sunday.", name="Dana"),
            AIMessage("Thanks, Calvin!", name="Dana"),
            AIMessage("I went hiking on Saturday.", name="Calvin"),
            HumanMessage("See you soon.", name="Dana"),
        ],
        occurred_at=MARCH,
    )
    found = await manager.search_conversations(ALEX, "When did Calvin go hiking?")
    assert [(s.speaker, s.content) for s in found[:1]] == [("Calvin", "I went hiking on Saturday.")]


def test_the_search_command_prints_dated_attributed_messages(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_memory_deployments.cli import app

    monkeypatch.setenv("DATABASE_URL", database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO agent_memory.episodes (user_id, messages, message_count, occurred_at)"
            " VALUES ('alex', %s, 1, %s)",
            (json.dumps([{"role": "user", "content": "I broke my wrist skiing."}]), MARCH),
        )
    runner = CliRunner()
    result = runner.invoke(app, ["search", "wrist", "--user", "alex"])
    assert result.exit_code == 0, result.output
    assert "2026-03-02, user: I broke my wrist skiing." in result.output
    assert "1 message(s)" in result.output
    result = runner.invoke(app, ["search", "wrist", "--user", "alex", "--since", "2026-04-01"])
    assert "0 message(s)" in result.output
    result = runner.invoke(app, ["search", "wrist", "--user", "alex", "--since", "March"])
    assert result.exit_code == 2 and "'March' is not a date" in result.output
    result = runner.invoke(app, ["search", "wrist"])
    assert result.exit_code == 2 and "name the scope" in result.output


async def test_the_snippets_searched_for_scale_with_the_budget(settings: Settings) -> None:
    """Inject reads twice as many snippets as its budget holds at typical lines: enough for a
    larger budget to fill with more of them, no more rows than a small one can use."""
    assert [snippet_rows(t) for t in (0, 30, 300, 600, 100_000)] == [10, 10, 20, 40, 500]
    lessons = [
        HumanMessage(f"Pottery lesson {i}: the kiln{i:02d} fired the glaze{i:02d} on vase{i:02d}.")
        for i in range(40)
    ]
    recorder = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await recorder.record(ALEX, lessons, occurred_at=MARCH)
    finally:
        await recorder.close()
    question = "What happened at the pottery lesson?"
    chosen = {}
    for tokens in (300, 600):
        manager = await tuned(settings, inject_snippets_tokens=tokens)
        try:
            frame = await manager.inject(ALEX, query=question)
        finally:
            await manager.close()
        chosen[tokens] = [s.content for s in frame.snippets]
        lines = "\n".join(s.line() for s in frame.snippets)
        assert len(lines) <= tokens * 4  # within the budget
        assert set(chosen[tokens]) <= {str(m.content) for m in lessons}
    # about 80 characters a line: 300 tokens hold 15 of them, 600 hold 30 (more than a fixed
    # 20 rows would give)
    assert 12 <= len(chosen[300]) <= 20
    assert 25 <= len(chosen[600]) <= 40
    assert chosen[600][: len(chosen[300])] == chosen[300]  # the same best ones first
