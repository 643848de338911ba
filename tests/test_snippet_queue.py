"""A record is one INSERT and a queue row (sql/0026_snippet_queue.sql): the sentences of what
it stored are indexed later, off the agent's path, by a drain (the manager's own a moment after
a record, the consolidation flow's, ``agent-memory index``), exactly as the INSERT used to
index them. A search finds a conversation still waiting from its messages, ranked as it is
once indexed; drains are idempotent and run side by side without indexing anything twice; an
erasure takes the waiting rows too; a database upgraded keeps what was indexed."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from typer.testing import CliRunner

from agent_memory import MemoryManager
from agent_memory.db import episodes as episode_repo
from agent_memory.db import snippet_queue
from agent_memory.models import Scope, Snippet
from agent_memory.settings import EmbeddingSettings, MemorySettings, Settings

ALEX, SAM = Scope("alex", "assistant"), Scope("sam")
MARCH = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
TALK = [
    HumanMessage("Traffic was terrible! I planted basil in the backyard. Can it grow in shade?"),
    AIMessage("Basil wants six hours of sun. Shade makes it leggy."),
    HumanMessage("My dentist appointment moved to Friday."),
]
ROWS = """
SELECT id, episode_id, position, part, scope_key, speaker, role, occurred_at, content
FROM agent_memory.snippets ORDER BY id
"""
QUEUED = "SELECT scope_key, episode_id FROM agent_memory.snippet_queue ORDER BY episode_id"
COUNTED = """
SELECT scope_key, sum(docs), sum(size) FROM agent_memory.term_counts
WHERE corpus = 's' AND lexeme = '' GROUP BY 1 ORDER BY 1
"""


def with_delay(settings: Settings, seconds: float) -> Settings:
    """``settings`` whose manager indexes ``seconds`` after a record (0: never by itself)."""
    memory = MemorySettings(**{**settings.memory.model_dump(), "index_after_s": seconds})
    return settings.model_copy(update={"memory": memory})


def key(db: psycopg.Connection[Any], scope: Scope) -> str:
    row = db.execute("SELECT agent_memory.scope_key(%s, %s, %s)", scope.params).fetchone()
    assert row is not None
    return str(row[0])


def without_ids(found: list[Snippet]) -> list[dict[str, Any]]:
    return [s.model_dump(exclude={"id"}) for s in found]


async def test_a_record_is_found_at_once_and_the_same_once_indexed(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    manager = await MemoryManager.create(settings=with_delay(settings, 0), migrate=False)
    try:
        episode = await manager.record(ALEX, TALK, occurred_at=MARCH)
        # the record stored the episode and queued it; nothing is indexed or counted yet
        assert db.execute(QUEUED).fetchall() == [(key(db, ALEX), episode)]
        assert db.execute(ROWS).fetchall() == []
        assert db.execute(COUNTED).fetchall() == []

        async def asked() -> tuple[list[Snippet], list[Snippet], list[Snippet], list[Snippet]]:
            return (
                await manager.search_conversations(ALEX, "Where did I plant basil?"),
                await manager.search_conversations(ALEX, "Can basil grow in the shade?"),
                (await manager.inject(ALEX, query="Where did I plant basil?")).snippets,
                manager.inject_sync(ALEX, query="When is the dentist?").snippets,
            )

        waiting = await asked()
        found, question, injected, injected_sync = waiting
        assert found[0].id is None  # read from its messages: no row yet
        assert (found[0].content, found[0].position, found[0].speaker, found[0].role) == (
            "I planted basil in the backyard.",
            0,
            "user",
            "user",
        )
        assert (found[0].episode_id, found[0].occurred_at) == (episode, MARCH)
        # a question comes with its reply, read from the waiting messages too
        assert question[0].content == "Can it grow in shade?"
        assert question[0].reply is not None
        assert question[0].reply.content == "Basil wants six hours of sun. Shade makes it leggy."
        assert "I planted basil in the backyard." in [s.content for s in injected]
        assert [s.content for s in injected_sync] == ["My dentist appointment moved to Friday."]

        assert await manager.index_pending() == 1
        rows = db.execute(ROWS).fetchall()
        # the snippets the INSERT's trigger made: every sentence, numbered by message and part
        assert [r[2:] for r in rows] == [
            (p, part, key(db, ALEX), who, who, MARCH, text)
            for p, part, who, text in [
                (0, 0, "user", "Traffic was terrible!"),
                (0, 1, "user", "I planted basil in the backyard."),
                (0, 2, "user", "Can it grow in shade?"),
                (1, 0, "assistant", "Basil wants six hours of sun."),
                (1, 1, "assistant", "Shade makes it leggy."),
                (2, 0, "user", "My dentist appointment moved to Friday."),
            ]
        ]
        assert {r[1] for r in rows} == {episode} and db.execute(QUEUED).fetchall() == []
        # found the same from the index, scores included; now with their rows' ids
        indexed = await asked()
        assert [without_ids(a) for a in indexed] == [without_ids(w) for w in waiting]
        assert indexed[0][0].id == rows[1][0]
        counted = db.execute(COUNTED).fetchall()
        assert [(k, docs) for k, docs, _ in counted] == [(key(db, ALEX), 6)]

        # a second drain finds nothing to do and changes nothing
        assert await manager.index_pending() == 0
        assert manager.index_pending_sync(ALEX) == 0
        assert db.execute(ROWS).fetchall() == rows
        assert db.execute(COUNTED).fetchall() == counted
    finally:
        await manager.close()


def test_drains_side_by_side_index_each_episode_once(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    scopes = [Scope(f"user-{n}") for n in range(3)]
    turns = [
        (scopes[n % 3], [{"role": "user", "content": f"Turn {n} was fine. I like tea."}], {}, None)
        for n in range(120)
    ]
    episode_repo.insert_many_sync(db, turns)
    # rows another drain holds are skipped, not waited for
    with psycopg.connect(database_url) as holder:
        held = holder.execute(
            "SELECT episode_id FROM agent_memory.snippet_queue WHERE scope_key = %s FOR UPDATE",
            (key(db, scopes[0]),),
        ).fetchall()
        assert len(held) == 40
        assert snippet_queue.drain_sync(db, scopes[1:2], batch=7) == 40
        holder.rollback()
    # four drains at once, in small batches
    start = threading.Barrier(4)

    def drain() -> int:
        with psycopg.connect(database_url, autocommit=True) as conn:
            start.wait()
            return snippet_queue.drain_sync(conn, None, batch=3)

    with ThreadPoolExecutor(max_workers=4) as drains:
        done = [f.result() for f in [drains.submit(drain) for _ in range(4)]]
    assert sum(done) == 80
    assert db.execute(QUEUED).fetchall() == []
    assert db.execute(
        "SELECT count(*), count(DISTINCT (episode_id, position, part)) FROM agent_memory.snippets"
    ).fetchone() == (240, 240)
    assert [docs for _, docs, _ in db.execute(COUNTED).fetchall()] == [80, 80, 80]
    assert snippet_queue.drain_sync(db) == 0


async def test_the_manager_indexes_a_moment_after_a_record_and_stops_when_closed(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    def indexed() -> int:
        row = db.execute("SELECT count(DISTINCT episode_id) FROM agent_memory.snippets").fetchone()
        return int(row[0]) if row else 0

    async def until(count: int) -> None:
        deadline = time.monotonic() + 20
        while indexed() < count:
            assert time.monotonic() < deadline, f"{indexed()} of {count} indexed"
            await asyncio.sleep(0.05)

    manager = await MemoryManager.create(settings=with_delay(settings, 0.2), migrate=False)
    try:
        await manager.record(ALEX, [HumanMessage("I started pottery classes.")])
        await manager.record_many([(SAM, [HumanMessage("We adopted a kitten.")], None)])
        await until(2)
        manager.record_sync(ALEX, [HumanMessage("The kiln is hot.")])  # the sync face's thread
        await until(3)
        await manager.record(ALEX, [HumanMessage("Glazes take a day.")])
    finally:
        await manager.close()
    # closing stopped the drain that was due: the last record waits for the next drain
    await asyncio.sleep(0.4)
    assert indexed() == 3 and len(db.execute(QUEUED).fetchall()) == 1


@pytest.mark.usefixtures("prefect_harness")
async def test_the_consolidation_flow_indexes_the_waiting_conversations_first(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    # no embedding step (which indexes what it embeds) and no drain by the manager itself
    quiet = with_delay(settings, 0).model_copy(
        update={"embedding": EmbeddingSettings(enabled=False)}
    )
    manager = await MemoryManager.create(settings=quiet, migrate=False)
    try:
        await manager.record(ALEX, TALK)
        await manager.record(SAM, [HumanMessage("We adopted a kitten.")])
        summary = await manager.consolidate(ALEX)  # one scope's run: that scope's only
        assert summary["completed"] == 1
        assert [k for k, _ in db.execute(QUEUED).fetchall()] == [key(db, SAM)]
        assert await manager.consolidate() is not None  # every scope's run: every scope's
        assert db.execute(QUEUED).fetchall() == []
        assert db.execute(
            "SELECT count(*) FROM agent_memory.snippets GROUP BY scope_key ORDER BY 1"
        ).fetchall() == [(1,), (6,)]
    finally:
        await manager.close()


@pytest.mark.usefixtures("prefect_harness")
async def test_erasing_a_scope_takes_its_waiting_conversations(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    manager = await MemoryManager.create(settings=with_delay(settings, 0), migrate=False)
    try:
        await manager.record(ALEX, TALK)
        await manager.record(SAM, [HumanMessage("We adopted a kitten.")])
        removed = await manager.erase(ALEX)
        assert removed["snippet_queue"] == 1 and removed["episodes"] == 1
        assert [k for k, _ in db.execute(QUEUED).fetchall()] == [key(db, SAM)]
        assert await manager.search_conversations(ALEX, "basil") == []
    finally:
        await manager.close()


def test_the_index_command_drains_the_queue(
    database_url: str, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", database_url)
    rows = [(s, [{"role": "user", "content": "Hello there. Bye."}], {}, None) for s in (ALEX, SAM)]
    episode_repo.insert_many_sync(db, rows)
    runner = CliRunner()
    one = runner.invoke(cli.app, ["index", "--user", "sam"])
    assert one.exit_code == 0, one.output
    assert "1 conversation(s) indexed" in one.output
    assert [k for k, _ in db.execute(QUEUED).fetchall()] == [key(db, ALEX)]
    rest = runner.invoke(cli.app, ["index"])
    assert rest.exit_code == 0 and "1 conversation(s) indexed" in rest.output
    assert db.execute(QUEUED).fetchall() == []
    assert db.execute("SELECT count(*) FROM agent_memory.snippets").fetchone() == (4,)


def test_upgrading_keeps_what_was_indexed_and_queues_what_comes_after(
    empty_database: psycopg.Connection[Any],
) -> None:
    from agent_memory.db.migrations import load_migrations, migrate

    db = empty_database
    migrations = load_migrations()
    migrate(db, migrations=migrations[:25])
    talk = [{"role": "user", "content": "One. Two."}, {"role": "assistant", "content": "Three."}]
    episode_repo.insert_sync(db, ALEX, talk, {})  # indexed by version 18's trigger
    before = db.execute(ROWS).fetchall()
    assert len(before) == 3
    counted = db.execute(COUNTED).fetchall()
    assert migrate(db, migrations=migrations[:26]) == ["0026_snippet_queue"]
    assert db.execute(ROWS).fetchall() == before
    assert db.execute(COUNTED).fetchall() == counted
    assert db.execute(QUEUED).fetchall() == []
    later = episode_repo.insert_sync(db, ALEX, talk, {})
    assert db.execute(QUEUED).fetchall() == [(key(db, ALEX), later)]
    # drained as that release drained, by the schema's own function (today's code reads
    # today's schema)
    assert db.execute("SELECT agent_memory.index_pending(200, NULL)").fetchone() == (1,)

    def made(rows: list[Any]) -> list[tuple[Any, ...]]:  # all but the ids and the time
        return [(*r[2:7], r[8]) for r in rows]

    assert made(db.execute(ROWS).fetchall()[3:]) == made(before)
