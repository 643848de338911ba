"""TTLs of AgentMemoryStore, as LangGraph's PostgresStore has them.

The first part is LangGraph's own TTL tests (libs/checkpoint-postgres/tests/test_store.py and
test_async_store.py), their bodies kept, with the store's construction and the SQL of their
helpers swapped for this store's. Where they slept to let time pass, the stored expiry times are
moved back instead (:func:`_sleep`), by a unit much longer than any real delay here, so no
test depends on how fast the machine runs. One divergence, by design: expired items are hidden
at once (``omit_expired`` always on), so upstream's ``omit_expired`` False test is replaced by
one that checks the refusal. The second part tests what this store adds: memory items, the
sweeper, refresh, the per-put TTL, bad values.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from langgraph.store.base import PutOp

from agent_memory import MemoryManager, Scope
from agent_memory.db.migrations import load_migrations
from agent_memory.errors import InvalidStoreRequestError
from agent_memory.settings import Settings
from agent_memory.store import AgentMemoryStore

# one upstream "second" is ten minutes here: real delays (milliseconds) cannot matter
SCALE = 600
TTL_SECONDS = 6
TTL_MINUTES = TTL_SECONDS * SCALE / 60
TTL_CONFIG: dict[str, Any] = {
    "default_ttl": TTL_MINUTES,
    "refresh_on_read": True,
    "sweep_interval_minutes": TTL_MINUTES / 2,
}
ALICE, NS = Scope(user_id="alice"), ("memories", "alice")


@pytest.fixture
def db_url(settings: Settings) -> str:
    return settings.db.url.get_secret_value()


def _sql(url: str, query: str, params: Any = None) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _sleep(url: str, seconds: float) -> None:
    """As if ``seconds`` upstream seconds passed: every expiry comes that much closer."""
    _sql(
        url,
        "UPDATE agent_memory.store_items SET expires_at = expires_at - %s * interval '1 second'"
        " WHERE expires_at IS NOT NULL",
        (seconds * SCALE,),
    )


def _expire_now(url: str, ns: tuple[str, ...], key: str) -> None:
    """Backdate a row's expires_at into the past without deleting it (unswept)."""
    _sql(
        url,
        "UPDATE agent_memory.store_items SET expires_at = now() - interval '1 minute'"
        " WHERE namespace = %s::text[] AND key = %s",
        (list(ns), key),
    )


def _row_exists(url: str, ns: tuple[str, ...], key: str) -> bool:
    rows = _sql(
        url,
        "SELECT count(*) FROM agent_memory.store_items WHERE namespace = %s::text[] AND key = %s",
        (list(ns), key),
    )
    return bool(rows[0][0] == 1)


def _stored_expires_at(url: str, ns: tuple[str, ...], key: str) -> datetime | None:
    rows = _sql(
        url,
        "SELECT expires_at FROM agent_memory.store_items WHERE namespace = %s::text[] AND key = %s",
        (list(ns), key),
    )
    return rows[0][0] if rows else None


def _set_updated(url: str, ns: tuple[str, ...], seconds_ago: dict[str, int]) -> None:
    for key, secs in seconds_ago.items():
        _sql(
            url,
            "UPDATE agent_memory.store_items SET updated_at = now() - (%s * interval '1 second')"
            " WHERE namespace = %s::text[] AND key = %s",
            (secs, list(ns), key),
        )


@pytest.fixture
def store(settings: Settings) -> Iterator[AgentMemoryStore]:
    with AgentMemoryStore.from_conn_string(settings=settings, ttl=dict(TTL_CONFIG)) as store:
        store.start_ttl_sweeper()
        yield store
        assert store.stop_ttl_sweeper()


@pytest.fixture(params=["thread", "task"])
async def astore(request: pytest.FixtureRequest, settings: Settings) -> AsyncIterator[Any]:
    config = dict(TTL_CONFIG)
    async with AgentMemoryStore.afrom_conn_string(settings=settings, ttl=config) as store:
        if request.param == "thread":  # as code written for AsyncPostgresStore does
            await store.start_ttl_sweeper()
            yield store
            await store.stop_ttl_sweeper()
        else:
            await store.astart_ttl_sweeper()
            yield store
            assert await store.astop_ttl_sweeper()


# ---- LangGraph's tests (checkpoint-postgres/tests/test_store.py) ----------------------------


def test_store_ttl(store: AgentMemoryStore, db_url: str) -> None:
    ns = ("foo",)
    store.put(ns, key="item1", value={"foo": "bar"}, ttl=TTL_MINUTES)
    _sleep(db_url, TTL_SECONDS - 2)
    res = store.get(ns, key="item1", refresh_ttl=True)
    assert res is not None
    _sleep(db_url, TTL_SECONDS - 2)
    results = store.search(ns, query="foo", refresh_ttl=True)
    assert len(results) == 1
    _sleep(db_url, TTL_SECONDS - 2)
    res = store.get(ns, key="item1", refresh_ttl=False)
    assert res is not None
    _sleep(db_url, TTL_SECONDS - 1)
    # Now has been (TTL_SECONDS-2)*2 > TTL_SECONDS + TTL_SECONDS/2
    res2 = store.search(ns, query="bar", refresh_ttl=False)
    assert len(res2) == 0


def test_omit_expired_filters_read_paths(store: AgentMemoryStore, db_url: str) -> None:
    store.stop_ttl_sweeper()  # deterministic: no background deletion
    assert store.ttl_config is not None
    store.ttl_config["omit_expired"] = True

    expired_ns = ("omit", "expired")
    control_ns = ("omit", "control")
    store.put(expired_ns, "e", {"data": "gone"}, ttl=TTL_MINUTES)
    store.put(control_ns, "c", {"data": "keep"}, ttl=None)
    _expire_now(db_url, expired_ns, "e")

    # The row is expired but physically still present (unswept).
    assert _row_exists(db_url, expired_ns, "e")

    # get omits it; the never-expiring control is still returned.
    assert store.get(expired_ns, "e") is None
    assert store.get(control_ns, "c") is not None

    # search omits it but returns the control.
    assert store.search(expired_ns) == []
    assert [i.key for i in store.search(control_ns)] == ["c"]

    # list_namespaces drops the expired-only namespace, keeps the control.
    namespaces = store.list_namespaces(prefix=("omit",))
    assert expired_ns not in namespaces
    assert control_ns in namespaces


def test_omit_expired_refresh_ttl_only_refreshes_live_rows(
    store: AgentMemoryStore, db_url: str
) -> None:
    store.stop_ttl_sweeper()
    assert store.ttl_config is not None
    store.ttl_config["omit_expired"] = True

    ns = ("refresh",)
    store.put(ns, "expired", {"n": 0}, ttl=TTL_MINUTES)
    store.put(ns, "live_get", {"n": 1}, ttl=TTL_MINUTES)
    store.put(ns, "live_search", {"n": 2}, ttl=TTL_MINUTES)
    _expire_now(db_url, ns, "expired")

    expired_before = _stored_expires_at(db_url, ns, "expired")
    get_before = _stored_expires_at(db_url, ns, "live_get")
    search_before = _stored_expires_at(db_url, ns, "live_search")
    assert get_before and search_before

    # refresh_ttl=True must NOT resurrect the expired row (via get or search)...
    assert store.get(ns, "expired", refresh_ttl=True) is None
    assert "expired" not in [i.key for i in store.search(ns, refresh_ttl=True)]
    assert _stored_expires_at(db_url, ns, "expired") == expired_before

    # ...but must still extend the live rows that were read.
    assert store.get(ns, "live_get", refresh_ttl=True) is not None
    assert (_stored_expires_at(db_url, ns, "live_get") or get_before) > get_before
    assert (_stored_expires_at(db_url, ns, "live_search") or search_before) > search_before


def test_omit_expired_search_pagination(store: AgentMemoryStore, db_url: str) -> None:
    store.stop_ttl_sweeper()
    assert store.ttl_config is not None
    store.ttl_config["omit_expired"] = True

    ns = ("page",)
    for k in ("a", "b", "c"):
        store.put(ns, k, {"k": k}, ttl=TTL_MINUTES)
    store.put(ns, "expired", {"k": "x"}, ttl=TTL_MINUTES)
    _expire_now(db_url, ns, "expired")

    # updated_at DESC orders these a, expired, b, c, so the expired row sits inside
    # the first limit=2 window. Correct (pre-LIMIT) filtering yields live pages
    # [a, b] then [c]; post-LIMIT filtering would underfill page 1 to just [a].
    _set_updated(db_url, ns, {"a": 1, "expired": 2, "b": 3, "c": 4})

    page1 = store.search(ns, limit=2, offset=0)
    page2 = store.search(ns, limit=2, offset=2)
    assert [i.key for i in page1] == ["a", "b"]
    assert [i.key for i in page2] == ["c"]


# ---- LangGraph's tests (checkpoint-postgres/tests/test_async_store.py) ----------------------


async def test_async_store_ttl(astore: AgentMemoryStore, db_url: str) -> None:
    store = astore
    ns = ("foo",)
    await store.start_ttl_sweeper()
    await store.aput(ns, key="item1", value={"foo": "bar"}, ttl=TTL_MINUTES)
    _sleep(db_url, TTL_SECONDS - 2)
    res = await store.aget(ns, key="item1", refresh_ttl=True)
    assert res is not None
    _sleep(db_url, TTL_SECONDS - 2)
    results = await store.asearch(ns, query="foo", refresh_ttl=True)
    assert len(results) == 1
    _sleep(db_url, TTL_SECONDS - 2)
    res = await store.aget(ns, key="item1", refresh_ttl=False)
    assert res is not None
    _sleep(db_url, TTL_SECONDS - 1)
    # Now has been (TTL_SECONDS-2)*2 > TTL_SECONDS + TTL_SECONDS/2
    results = await store.asearch(ns, query="bar", refresh_ttl=False)
    assert len(results) == 0


async def test_async_omit_expired_filters_read_paths(astore: AgentMemoryStore, db_url: str) -> None:
    store = astore
    await store.stop_ttl_sweeper()  # deterministic: no background deletion
    assert store.ttl_config is not None
    store.ttl_config["omit_expired"] = True

    expired_ns = ("omit", "expired")
    control_ns = ("omit", "control")
    await store.aput(expired_ns, "e", {"data": "gone"}, ttl=TTL_MINUTES)
    await store.aput(control_ns, "c", {"data": "keep"}, ttl=None)
    _expire_now(db_url, expired_ns, "e")

    assert _row_exists(db_url, expired_ns, "e")
    assert await store.aget(expired_ns, "e") is None
    assert await store.aget(control_ns, "c") is not None
    assert await store.asearch(expired_ns) == []
    assert [i.key for i in await store.asearch(control_ns)] == ["c"]
    namespaces = await store.alist_namespaces(prefix=("omit",))
    assert expired_ns not in namespaces
    assert control_ns in namespaces


async def test_async_omit_expired_refresh_ttl_only_refreshes_live_rows(
    astore: AgentMemoryStore, db_url: str
) -> None:
    store = astore
    await store.stop_ttl_sweeper()
    assert store.ttl_config is not None
    store.ttl_config["omit_expired"] = True

    ns = ("refresh",)
    await store.aput(ns, "expired", {"n": 0}, ttl=TTL_MINUTES)
    await store.aput(ns, "live_get", {"n": 1}, ttl=TTL_MINUTES)
    await store.aput(ns, "live_search", {"n": 2}, ttl=TTL_MINUTES)
    _expire_now(db_url, ns, "expired")

    expired_before = _stored_expires_at(db_url, ns, "expired")
    get_before = _stored_expires_at(db_url, ns, "live_get")
    search_before = _stored_expires_at(db_url, ns, "live_search")
    assert get_before and search_before

    assert await store.aget(ns, "expired", refresh_ttl=True) is None
    live_keys = [i.key for i in await store.asearch(ns, refresh_ttl=True)]
    assert "expired" not in live_keys
    assert _stored_expires_at(db_url, ns, "expired") == expired_before

    assert await store.aget(ns, "live_get", refresh_ttl=True) is not None
    assert (_stored_expires_at(db_url, ns, "live_get") or get_before) > get_before
    assert (_stored_expires_at(db_url, ns, "live_search") or search_before) > search_before


async def test_async_omit_expired_search_pagination(astore: AgentMemoryStore, db_url: str) -> None:
    store = astore
    await store.stop_ttl_sweeper()
    assert store.ttl_config is not None
    store.ttl_config["omit_expired"] = True

    ns = ("page",)
    for k in ("a", "b", "c"):
        await store.aput(ns, k, {"k": k}, ttl=TTL_MINUTES)
    await store.aput(ns, "expired", {"k": "x"}, ttl=TTL_MINUTES)
    _expire_now(db_url, ns, "expired")
    _set_updated(db_url, ns, {"a": 1, "expired": 2, "b": 3, "c": 4})

    page1 = await store.asearch(ns, limit=2, offset=0)
    page2 = await store.asearch(ns, limit=2, offset=2)
    assert [i.key for i in page1] == ["a", "b"]
    assert [i.key for i in page2] == ["c"]


# ---- what this store adds -------------------------------------------------------------------


def test_omit_expired_cannot_be_turned_off(settings: Settings) -> None:
    # upstream's test_omit_expired_disabled_preserves_expired_rows, by design the other way
    manager = MemoryManager.create_sync(settings=settings, migrate=False)
    try:
        with pytest.raises(InvalidStoreRequestError, match="omit_expired False"):
            manager.store(ttl={"default_ttl": 5, "omit_expired": False})
        assert AgentMemoryStore.supports_ttl is True
    finally:
        manager.close_sync()


async def test_an_expired_memory_leaves_inject_and_stays_as_history(
    settings: Settings, db_url: str
) -> None:
    async with AgentMemoryStore.afrom_conn_string(settings=settings, ttl={}) as store:
        await store.aput(NS, "mood", {"content": "Alice is tired today"}, ttl=30)
        await store.aput(NS, "tea", {"content": "Alice drinks green tea"})
        frame = await store.manager.inject(ALICE, query="how is alice")
        assert "Alice is tired today" in frame.injected_facts
        _expire_now(db_url, NS, "mood")
        expired_at = _stored_expires_at(db_url, NS, "mood")
        # hidden from the store at once, and not shown again under its fact's own key
        assert await store.aget(NS, "mood") is None
        assert [i.key for i in await store.asearch(NS, query="tired")] == ["tea"]

        assert await store.asweep_ttl() == 1
        assert not _row_exists(db_url, NS, "mood")
        frame = await store.manager.inject(ALICE, query="how is alice")
        assert "Alice is tired today" not in frame.injected_facts
        assert "Alice drinks green tea" in frame.injected_facts
        rows = _sql(
            db_url,
            "SELECT superseded_at IS NOT NULL, superseded_by, valid_to, valid_from"
            " FROM agent_memory.memory_items WHERE content = 'Alice is tired today'",
        )
        # kept, invalidated as of when it expired (not before it was said)
        assert expired_at is not None
        assert rows == [(True, None, max(expired_at, rows[0][3]), rows[0][3])]
        assert [f.content for f in await store.manager.facts(ALICE)] == ["Alice drinks green tea"]
        assert await store.asweep_ttl() == 0


def test_a_put_revives_an_expired_item_and_without_ttl_ends_it(
    store: AgentMemoryStore, db_url: str
) -> None:
    store.put(NS, "home", {"content": "Alice lives in Paris"}, ttl=5)
    _expire_now(db_url, NS, "home")
    assert store.get(NS, "home") is None
    store.put(NS, "home", {"content": "Alice lives in Paris"}, ttl=None)
    got = store.get(NS, "home")
    assert got is not None and got.value == {"content": "Alice lives in Paris"}
    assert _stored_expires_at(db_url, NS, "home") is None
    assert store.sweep_ttl() == 0
    assert store.get(NS, "home") is not None


def _wait_for(condition: Any, what: str, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, f"not within {deadline_s} s: {what}"
        time.sleep(0.05)


def test_the_sweeper_deletes_expired_rows(settings: Settings, db_url: str) -> None:
    ttl = {"sweep_interval_minutes": 0.001}  # a sweep every 60 ms
    with AgentMemoryStore.from_conn_string(settings=settings, ttl=ttl) as store:
        store.put(("docs",), "old", {"v": 1}, ttl=5)
        store.put(NS, "mood", {"content": "Alice is tired today"}, ttl=5)
        store.put(("docs",), "kept", {"v": 2}, ttl=5)
        store.put(("docs",), "forever", {"v": 3})
        future = store.start_ttl_sweeper()
        _expire_now(db_url, ("docs",), "old")
        _expire_now(db_url, NS, "mood")
        _wait_for(
            lambda: (
                not _row_exists(db_url, ("docs",), "old") and not _row_exists(db_url, NS, "mood")
            ),
            "the sweeper deleted the expired rows",
        )
        assert store.stop_ttl_sweeper(timeout=30)
        assert future.done()
        assert _row_exists(db_url, ("docs",), "kept") and _row_exists(db_url, ("docs",), "forever")
        current = _sql(
            db_url,
            "SELECT count(*) FROM agent_memory.memory_items WHERE superseded_at IS NULL",
        )
        assert current == [(0,)]


async def test_the_async_sweeper_deletes_expired_rows(settings: Settings, db_url: str) -> None:
    ttl = {"sweep_interval_minutes": 0.001}
    async with AgentMemoryStore.afrom_conn_string(settings=settings, ttl=ttl) as store:
        await store.aput(("docs",), "old", {"v": 1}, ttl=5)
        task = await store.astart_ttl_sweeper()
        assert await store.astart_ttl_sweeper() is task  # one sweeper
        _expire_now(db_url, ("docs",), "old")
        end = time.monotonic() + 60
        while _row_exists(db_url, ("docs",), "old"):
            assert time.monotonic() < end, "the sweeper did not delete the expired row"
            await asyncio.sleep(0.05)
        assert await store.astop_ttl_sweeper(timeout=30)
        assert task.done()


def test_no_sweeper_without_a_ttl_configuration(store: AgentMemoryStore) -> None:
    bare = AgentMemoryStore(store.manager)
    assert bare.start_ttl_sweeper().done()
    assert bare.stop_ttl_sweeper()
    bare.put(("docs",), "k", {"v": 1}, ttl=10)  # a put may still name a TTL
    assert bare.get(("docs",), "k") is not None


def test_refresh_on_read_extends_and_can_be_turned_off(settings: Settings, db_url: str) -> None:
    manager = MemoryManager.create_sync(settings=settings, migrate=False)
    try:
        refreshing = manager.store(ttl={"default_ttl": 60})  # refresh_on_read: True by default
        still = manager.store(ttl={"default_ttl": 60, "refresh_on_read": False})
        for key in ("a", "b"):
            refreshing.put(("docs",), key, {"text": "tea leaves"})
        _sql(db_url, "UPDATE agent_memory.store_items SET expires_at = now() + interval '1 minute'")
        short = _stored_expires_at(db_url, ("docs",), "a")
        assert short is not None
        still.get(("docs",), "a")
        still.search(("docs",), query="tea")
        assert _stored_expires_at(db_url, ("docs",), "a") == short
        assert _stored_expires_at(db_url, ("docs",), "b") == short
        still.get(("docs",), "a", refresh_ttl=True)
        refreshing.search(("docs",), query="tea", limit=10)
        for key in ("a", "b"):
            extended = _stored_expires_at(db_url, ("docs",), key)
            assert extended is not None and (extended - short).total_seconds() > 58 * 60
        # a read refreshes the TTL, not the item: its updated_at stays
        assert (
            len(
                _sql(
                    db_url,
                    "SELECT 1 FROM agent_memory.store_items"
                    " WHERE updated_at > created_at + interval '1 second'",
                )
            )
            == 0
        )
    finally:
        manager.close_sync()


def test_a_puts_ttl_overrides_the_default(store: AgentMemoryStore, db_url: str) -> None:
    store.put(("docs",), "default", {"v": 1})
    store.put(("docs",), "short", {"v": 2}, ttl=5)
    store.put(("docs",), "never", {"v": 3}, ttl=None)
    store.batch([PutOp(("docs",), "batch", {"v": 4})])  # a PutOp names its TTL itself
    rows = dict(
        (key, (minutes, seconds))
        for key, minutes, seconds in _sql(
            db_url,
            "SELECT key, ttl_minutes, extract(epoch FROM expires_at - updated_at)::float"
            " FROM agent_memory.store_items",
        )
    )
    assert rows["default"][0] == TTL_MINUTES
    assert rows["default"][1] == pytest.approx(TTL_MINUTES * 60, abs=5)
    assert rows["short"][0] == 5 and rows["short"][1] == pytest.approx(300, abs=5)
    assert rows["never"] == (None, None)
    assert rows["batch"] == (None, None)


@pytest.mark.parametrize(
    "ttl", [0, -1, math.nan, math.inf, "10", True, 10**9], ids=lambda v: repr(v)
)
def test_a_bad_ttl_is_refused_naming_it(store: AgentMemoryStore, db_url: str, ttl: Any) -> None:
    with pytest.raises(InvalidStoreRequestError, match=f"TTL {ttl!r}"):
        store.batch([PutOp(("docs",), "good", {"v": 1}), PutOp(("docs",), "k", {"v": 1}, ttl=ttl)])
    assert _sql(db_url, "SELECT count(*) FROM agent_memory.store_items") == [(0,)]


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"default_ttl": -1}, "default_ttl -1"),
        ({"default_ttl": "60"}, "default_ttl '60'"),
        ({"sweep_interval_minutes": 0}, "sweep_interval_minutes 0"),
        ({"refresh_on_read": "yes"}, "refresh_on_read 'yes'"),
        ({"default_tll": 5}, "'default_tll'"),
        ([("default_ttl", 5)], "TTLConfig"),
    ],
)
def test_a_bad_ttl_configuration_is_refused_naming_it(
    store: AgentMemoryStore, config: Any, named: str
) -> None:
    with pytest.raises(InvalidStoreRequestError, match=named):
        AgentMemoryStore(store.manager, ttl=config)


def test_the_migration_reruns_and_lets_tenants_set_expiry(db_url: str) -> None:
    (migration,) = [m for m in load_migrations() if m.version == 20]
    _sql(db_url, migration.sql)
    _sql(db_url, migration.sql)
    tenants = _sql(db_url, "SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant'")
    if tenants:
        may = _sql(
            db_url,
            "SELECT has_column_privilege('agent_memory_tenant', 'agent_memory.store_items',"
            " c, 'UPDATE') FROM unnest(ARRAY['expires_at', 'ttl_minutes']) c",
        )
        assert may == [(True,), (True,)]
        assert _sql(
            db_url,
            "SELECT has_table_privilege('agent_memory_tenant', 'agent_memory.store_items',"
            " 'UPDATE')",
        ) == [(False,)]


async def test_the_guides_example_runs(
    database_url: str, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ast
    import re
    from pathlib import Path

    from agent_memory.settings import use_settings

    guide = (Path(__file__).parents[1] / "docs" / "guide.md").read_text()
    match = re.search(r"<!-- run by tests/test_store_ttl.py -->\n```python\n(.*?)```", guide, re.S)
    assert match, "the guide's TTL example"
    monkeypatch.setenv("DATABASE_URL", database_url)
    use_settings(None)  # the block reads the environment, as a user's program would
    code = compile(match.group(1), "guide.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, {})  # the docs' own code
    if result is not None:
        await result
    rows = db.execute(
        "SELECT key, ttl_minutes FROM agent_memory.store_items ORDER BY key"
    ).fetchall()
    assert rows == [("mood", 60.0), ("reply", 10.0), ("signature", None)]


@pytest.fixture
def owner_settings(secure_pg_server: dict[str, Any]) -> Iterator[Settings]:
    """Settings for a fresh database on the server that has tenants (asks for passwords)."""
    from agent_memory.settings import DatabaseSettings, LLMSettings, MemorySettings, use_settings
    from tests.tenant_server import secure_database_url

    for url in secure_database_url(secure_pg_server):
        database = DatabaseSettings(url=url, pool_min_size=1, pool_max_size=4)
        use_settings(
            s := Settings(db=database, llm=LLMSettings(model=None), memory=MemorySettings())
        )
        yield s
        use_settings(None)


async def test_a_tenant_puts_refreshes_and_sweeps_its_own_items_only(
    owner_settings: Settings,
) -> None:
    owner = await MemoryManager.create(settings=owner_settings, migrate=False)
    bob = alice = None
    try:
        alice = await MemoryManager.create(
            await owner.create_tenant(ALICE), settings=owner_settings
        )
        bob = await MemoryManager.create(
            await owner.create_tenant(Scope(user_id="bob")), settings=owner_settings
        )
        mine, theirs = alice.store(ttl={}), bob.store(ttl={})
        await mine.aput(NS, "mood", {"content": "Alice is tired today"}, ttl=30)
        await mine.aput((*NS, "notes"), "n", {"text": "call Sam"}, ttl=30)
        await theirs.aput(("memories", "bob"), "mood", {"content": "Bob is happy"}, ttl=30)
        owner_url = owner_settings.db.url.get_secret_value()  # every item has expired
        _sql(owner_url, "UPDATE agent_memory.store_items SET expires_at = now() - interval '1 s'")
        assert await theirs.aget(("memories", "bob"), "mood", refresh_ttl=True) is None
        assert await theirs.asweep_ttl() == 1  # bob's only: alice's rows are not his to see
        assert await mine.asearch(NS) == []
        assert await mine.asweep_ttl() == 2
        assert [f.content for f in await owner.facts(ALICE)] == []
        assert [f.content for f in await owner.facts(Scope(user_id="bob"))] == []
    finally:
        for manager in (alice, bob, owner):
            if manager is not None:
                await manager.close()


def test_a_read_of_items_without_a_ttl_runs_no_refresh(
    store: AgentMemoryStore, db_url: str
) -> None:
    store.put(("plain",), "a", {"data": 1}, ttl=None)  # never expires (no default TTL)
    store.put(("plain",), "b", {"data": 2}, ttl=5)
    # every UPDATE statement on the items counted, whether it changes a row or not
    _sql(db_url, "CREATE TABLE public.updates (n int)")
    _sql(
        db_url,
        "CREATE FUNCTION public.count_update() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN INSERT INTO public.updates VALUES (1); RETURN NULL; END $$",
    )
    _sql(
        db_url,
        "CREATE TRIGGER count_update AFTER UPDATE ON agent_memory.store_items"
        " FOR EACH STATEMENT EXECUTE FUNCTION public.count_update()",
    )
    count = "SELECT count(*) FROM public.updates"
    assert store.get(("plain",), "a") is not None
    assert [len(store.search(("plain",), filter={"data": 1}))] == [1]
    assert _sql(db_url, count) == [(0,)]  # no TTL: nothing to refresh, no statement
    assert store.get(("plain",), "b") is not None
    assert _sql(db_url, count) == [(1,)]  # its TTL refreshed
