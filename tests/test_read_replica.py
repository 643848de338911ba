"""Reads on a read replica (AGENT_MEMORY_READ_DATABASE_URL), against a real one: a primary and
a streaming replica started from the embedded server's binaries (tests/replica_servers.py).

What is shown: inject, search and conversation search read on the replica (a fact written on
the primary while the replica's replay is paused is not there); record, add_fact and the
reinforcement of the facts an inject used go to the primary; a replica further behind than
AGENT_MEMORY_READ_MAX_LAG_SECONDS, stopped, or not answering leaves the reads to the primary
(within the read deadline), and says so once."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from time import monotonic
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from agent_memory import MemoryManager
from agent_memory.db.migrations import ensure_decay_policy, migrate
from agent_memory.decay import DecayPolicy
from agent_memory.models import Scope
from agent_memory.settings import DatabaseSettings, LLMSettings, MemorySettings, Settings
from tests.replica_servers import CATCH_UP_S, Pair, missing, primary_and_replica

pytestmark = [
    pytest.mark.system,  # servers of its own
    pytest.mark.skipif(missing() is not None, reason=f"no replica here: {missing()}"),
]

ALEX = Scope("alex", "assistant")
TEMPLATE = "replica_template"


def _migrated(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        ensure_decay_policy(conn, DecayPolicy.of(MemorySettings()))


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with primary_and_replica() as started:
        started.new_database(name=TEMPLATE, prepare=_migrated)
        yield started


@pytest.fixture
def dbname(pair: Pair) -> str:
    """A fresh migrated database of this test's, on the primary and the replica."""
    return pair.new_database(template=TEMPLATE)


def replica_settings(
    url: str, read_url: str, memory: MemorySettings | None = None, **db: Any
) -> Settings:
    return Settings(
        db=DatabaseSettings(url=url, read_url=read_url, pool_min_size=1, pool_max_size=4, **db),
        llm=LLMSettings(model=None),
        memory=memory or MemorySettings(),
    )


@asynccontextmanager
async def managed(pair: Pair, dbname: str, **db: Any) -> AsyncIterator[MemoryManager]:
    """A manager whose reads go to ``pair``'s replica (``db``: its other settings)."""
    db.setdefault("read_lag_check", 0)  # every read asks: what a test changes, the next sees
    settings = replica_settings(pair.primary.dsn(dbname), pair.replica.dsn(dbname), **db)
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        yield manager
    finally:
        await manager.close()


def _count(dsn: str, query: str, *params: Any) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


def _says(facts: list[str], word: str) -> bool:
    return any(word in fact for fact in facts)


async def test_reads_go_to_the_replica_until_it_lags_too_far_and_writes_to_the_primary(
    pair: Pair, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent_memory.replica")
    async with (
        managed(pair, dbname, read_max_lag=86400) as patient,
        managed(pair, dbname, read_max_lag=0) as strict,
    ):
        await patient.add_fact(ALEX, "User drinks green tea every morning.")
        pair.wait_caught_up()
        assert _says((await patient.inject(ALEX, query="tea")).injected_facts, "tea")
        assert patient.backend.replica is not None and patient.backend.replica.state == "ok"

        with pair.replay_paused():
            # writes: on the primary (the replica refuses them: it is read-only)
            await patient.add_fact(ALEX, "User keeps a red bicycle in the garage.")
            episode = await patient.record(ALEX, [HumanMessage("My bicycle has a flat tyre.")])
            pair.wait_received()
            episodes = "SELECT count(*) FROM agent_memory.episodes WHERE id = %s"
            assert _count(pair.primary.dsn(dbname), episodes, episode) == 1
            assert _count(pair.replica.dsn(dbname), episodes, episode) == 0

            # behind by less than a day: the replica answers, without what it has not replayed
            frame = await patient.inject(ALEX, query="bicycle")
            assert not _says(frame.injected_facts, "bicycle")
            assert not _says(patient.inject_sync(ALEX, query="bicycle").injected_facts, "bicycle")
            assert await patient.search(ALEX, "bicycle") == []
            assert await patient.search_conversations(ALEX, "bicycle") == []
            assert [f.content for f in await patient.search(ALEX, "tea")] == [
                "User drinks green tea every morning."
            ]

            # behind at all is too far for the strict one: the primary answers
            assert _says((await strict.inject(ALEX, query="bicycle")).injected_facts, "bicycle")
            assert _says(strict.inject_sync(ALEX, query="bicycle").injected_facts, "bicycle")
            assert len(await strict.search(ALEX, "bicycle")) == 1
            assert [s.content for s in await strict.search_conversations(ALEX, "bicycle")] == [
                "My bicycle has a flat tyre."
            ]
            assert strict.backend.replica is not None and strict.backend.replica.state == "lagging"
            # one warning for the whole episode of lag, however many reads it sent away
            lagging = _warnings(caplog)
            assert len(lagging) == 1, lagging
            assert "behind its primary" in lagging[0]
            assert "AGENT_MEMORY_READ_MAX_LAG_SECONDS=0" in lagging[0]

        # caught up again: a check finds it so (replay resumed; WAL the primary writes on its
        # own may keep a strict bound's replica "behind" for a moment, so asked until then)
        deadline = monotonic() + CATCH_UP_S
        while strict.backend.replica.state != "ok" and monotonic() < deadline:
            assert _says((await strict.inject(ALEX, query="bicycle")).injected_facts, "bicycle")
        assert strict.backend.replica.state == "ok"
        assert any("keeps up" in r.getMessage() for r in caplog.records)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "agent_memory.replica" and r.levelno == logging.WARNING
    ]


async def test_an_inject_on_the_replica_reinforces_its_facts_on_the_primary(
    pair: Pair, dbname: str
) -> None:
    primary = pair.primary.dsn(dbname)

    def last_used_days_ago(fact_id: int) -> int:
        return _count(
            primary,
            "SELECT current_date - (importance_at AT TIME ZONE 'UTC')::date"
            " FROM agent_memory.memory_items WHERE id = %s",
            fact_id,
        )

    def used_days_ago(fact_id: int, days: int) -> None:
        with psycopg.connect(primary, autocommit=True) as conn:
            conn.execute(
                "UPDATE agent_memory.memory_items SET importance_at = importance_at - %s"
                " * interval '1 day' WHERE id = %s",
                (days, fact_id),
            )
        pair.wait_caught_up()

    reinforcing = MemorySettings(inject_reinforce=True)
    async with managed(pair, dbname, read_max_lag=86400, memory=reinforcing) as manager:
        fact = await manager.add_fact(ALEX, "User swims on Sundays.", importance=0.8)
        for inject in (
            lambda: manager.inject(ALEX, query="swims"),
            _awaitable(lambda: manager.inject_sync(ALEX, query="swims")),
        ):
            used_days_ago(fact.id, 3)
            assert last_used_days_ago(fact.id) == 3
            frame = await inject()
            assert frame.fact_ids == [fact.id]
            assert manager.backend.replica is not None and manager.backend.replica.state == "ok"
            assert last_used_days_ago(fact.id) == 0  # its decay clock restarted, on the primary


def _awaitable(call: Callable[[], Any]) -> Callable[[], Any]:
    async def run() -> Any:
        return call()

    return run


async def test_a_replica_that_stops_leaves_the_reads_to_the_primary(
    pair: Pair, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    # asked once: reads keep going to the replica, until one fails there
    async with managed(pair, dbname, read_max_lag=86400, read_lag_check=3600) as manager:
        await manager.add_fact(ALEX, "User plays chess on Tuesdays.")
        pair.wait_caught_up()
        assert _says((await manager.inject(ALEX, query="chess")).injected_facts, "chess")
        assert manager.backend.replica is not None and manager.backend.replica.state == "ok"
        with pair.replica_stopped():
            # the read on the replica fails (its connection is cut) and is made on the primary
            assert _says((await manager.inject(ALEX, query="chess")).injected_facts, "chess")
            assert manager.backend.replica.state == "down"
            assert _says(manager.inject_sync(ALEX, query="chess").injected_facts, "chess")
            assert len(await manager.search(ALEX, "chess")) == 1
    down = _warnings(caplog)
    assert len(down) == 1 and "tried again in 3600 s" in down[0], down


@pytest.fixture
def silent_server() -> Iterator[socket.socket]:
    """A server that takes connections and never answers (a replica lost in the network)."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)  # the kernel completes the handshakes; nobody ever reads
        yield hole


async def test_a_replica_that_does_not_answer_costs_one_deadline_then_none(
    pair: Pair, dbname: str, silent_server: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    port = silent_server.getsockname()[1]
    silent = f"postgresql://reader:pw-Secret-42@127.0.0.1:{port}/memory?connect_timeout=60"
    settings = replica_settings(
        pair.primary.dsn(dbname), silent, read_timeout=0.5, connect_timeout=60
    )
    manager = await MemoryManager.create(settings=settings, migrate=False)
    synced = MemoryManager.create_sync(settings=settings, migrate=False)
    try:
        await manager.add_fact(ALEX, "User grows tomatoes on the balcony.")
        for inject in (
            lambda: manager.inject(ALEX, query="tomatoes"),
            _awaitable(lambda: synced.inject_sync(ALEX, query="tomatoes")),
        ):
            start = monotonic()
            frame = await inject()
            # answered from the primary after the read deadline, far before the connect timeout
            assert _says(frame.injected_facts, "tomatoes")
            assert monotonic() - start < 30
        for m in (manager, synced):
            assert m.backend.replica is not None and m.backend.replica.state == "down"
            assert m.backend.replica.route() == "primary"  # the next reads do not wait for it
    finally:
        silent_server.close()  # the connection attempts still waiting on it end
        await manager.close()
        synced.close_sync()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "no answer within 0.5 s" in said or "PoolTimeout" in said
    assert "pw-Secret-42" not in said


async def test_without_a_read_url_everything_is_on_the_primary(pair: Pair, dbname: str) -> None:
    settings = replica_settings(pair.primary.dsn(dbname), "")
    assert settings.db.read_url is None
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        assert manager.backend.replica is None
        await manager.add_fact(ALEX, "User reads science fiction.")
        assert _says((await manager.inject(ALEX, query="fiction")).injected_facts, "fiction")
    finally:
        await manager.close()
