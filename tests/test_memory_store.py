"""Recording episodes and injecting facts, on a real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.db import facts as fact_repo
from agent_memory.db.migrations import current_version, load_migrations, migrate
from agent_memory.errors import InvalidMessageError, InvalidScopeError
from agent_memory.models import Fact


async def add_facts(
    manager: MemoryManager, scope: Scope, facts: list[tuple[str, float]], at: datetime | None = None
) -> None:
    pool = await manager.backend.apool()
    async with pool.connection() as conn:
        await fact_repo.upsert(
            conn,
            scope,
            [Fact(content=c, importance=i) for c, i in facts],
            at or datetime.now(UTC),
            None,
        )


def test_migrations_are_recorded_and_safe_to_rerun(db: psycopg.Connection[Any]) -> None:
    assert current_version(db) == len(load_migrations())
    assert migrate(db) == []  # nothing left to apply
    # replaying every migration's SQL on an up-to-date schema must not fail
    for migration in load_migrations():
        db.execute(migration.sql.encode())
    assert current_version(db) == len(load_migrations())


async def test_inject_returns_top_facts_by_importance(manager: MemoryManager) -> None:
    scope = Scope(user_id="alice")
    await add_facts(manager, scope, [("low", 0.05), ("mid", 0.5), ("high", 0.9), ("edge", 0.1)])
    frame = await manager.inject(scope)
    assert frame.injected_facts == ["high", "mid", "edge"]  # 0.05 is under the 0.1 floor
    assert frame.importances == pytest.approx([0.9, 0.5, 0.1])


async def test_inject_limit_and_min_importance_are_configurable(manager: MemoryManager) -> None:
    scope = Scope(user_id="bob")
    await add_facts(manager, scope, [(f"fact {i}", 0.3 + i / 100) for i in range(30)])
    assert len((await manager.inject(scope)).injected_facts) == 20
    manager.settings.memory.inject_limit = 5
    manager.settings.memory.inject_min_importance = 0.55
    frame = await manager.inject(scope)
    assert frame.injected_facts == ["fact 29", "fact 28", "fact 27", "fact 26", "fact 25"]
    manager.settings.memory.inject_limit = 50
    assert len((await manager.inject(scope)).injected_facts) == 5  # 0.55..0.59


async def test_inject_sees_importance_decayed_by_elapsed_days(manager: MemoryManager) -> None:
    scope = Scope(user_id="carol")
    ten_days_ago = datetime.now(UTC) - timedelta(days=10)
    await add_facts(manager, scope, [("old", 0.85)], at=ten_days_ago)
    await add_facts(manager, scope, [("new", 0.6)])
    frame = await manager.inject(scope)
    assert frame.injected_facts == ["new", "old"]
    assert frame.importances[1] == pytest.approx(0.85 * 0.95**10, rel=1e-6)  # the seed's 0.51


async def test_same_fact_twice_is_one_row_reinforced(manager: MemoryManager) -> None:
    scope = Scope(user_id="dan")
    await add_facts(
        manager, scope, [("User likes tea.", 0.5)], at=datetime.now(UTC) - timedelta(days=20)
    )
    await add_facts(manager, scope, [("user likes   TEA", 0.4)])
    items = await manager.facts(scope)
    assert len(items) == 1
    # reinforced: the higher of the two (0.5 faded over 20 days is 0.18; the new 0.4) plus the
    # 0.05 boost, and the decay clock restarted at the new mention
    assert items[0].importance == pytest.approx(0.4 + 0.05)
    assert items[0].importance_at.date() == datetime.now(UTC).date()
    assert items[0].content == "user likes   TEA"
    await add_facts(manager, scope, [("User likes tea", 0.2)])
    (again,) = await manager.facts(scope)
    assert again.importance == pytest.approx(0.5)


async def test_record_then_read_back(manager: MemoryManager, db: psycopg.Connection[Any]) -> None:
    scope = Scope(user_id="erin", agent_id="support")
    episode_id = await manager.record(scope, [{"role": "user", "content": "hello"}])
    assert episode_id is not None
    row = db.execute(
        "SELECT user_id, agent_id, workflow_id, messages, consolidated FROM agent_memory.episodes"
    ).fetchone()
    assert row == ("erin", "support", None, [{"role": "user", "content": "hello"}], False)
    assert await manager.record(scope, []) is None
    assert db.execute("SELECT count(*) FROM agent_memory.episodes").fetchone() == (1,)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"user_id": ""}, "empty string"),
        ({"user_id": "x" * 300}, "300 characters"),
        ({"agent_id": "a\x00b"}, "NUL"),
        ({"workflow_id": "bad\ud800"}, "Unicode"),
        ({"user_id": 3.5}, "float"),
        ({"user_id": ["a"]}, "list"),
    ],
)
def test_bad_scope_parts_are_refused_by_name(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidScopeError, match=needle) as info:
        Scope(**kwargs)
    assert next(iter(kwargs)) in str(info.value)


def test_scope_label_and_integer_ids() -> None:
    assert Scope(user_id=42).user_id == "42"  # type: ignore[arg-type]
    assert Scope().label == "global"
    assert Scope("u", None, "w").label == "user=u workflow=w"


def test_inject_query_uses_the_scope_index(db: psycopg.Connection[Any]) -> None:
    db.execute("SET enable_seqscan = off")  # tiny tables: make the planner show its index choice
    plan = "\n".join(
        r[0]
        for r in db.execute(
            "EXPLAIN " + fact_repo.TOP,
            {**Scope("u").as_dict(), "day": 20000, "min_importance": 0.1, "limit": 20},
        ).fetchall()
    )
    assert "memory_items_current_rank_idx" in plan
    assert "Sort" not in plan


async def test_record_many_stores_every_conversation_or_none(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    yesterday = datetime.now(UTC) - timedelta(days=1)
    ids = await manager.record_many(
        [
            (Scope("ann"), [{"role": "user", "content": "one"}], None),
            (Scope("bob", "x"), [{"role": "user", "content": "two"}], yesterday),
            (Scope("ann"), [{"role": "user", "content": "three"}], None),
        ]
    )
    rows = db.execute(
        "SELECT id, user_id, agent_id, messages->0->>'content', occurred_at = %s"
        " FROM agent_memory.episodes ORDER BY id",
        (yesterday,),
    ).fetchall()
    assert [r[0] for r in rows] == ids
    assert [r[1:] for r in rows] == [
        ("ann", None, "one", False),
        ("bob", "x", "two", True),
        ("ann", None, "three", False),
    ]
    assert await manager.record_many([]) == []
    # one bad conversation (a value JSON cannot hold) stores none of them
    with pytest.raises(InvalidMessageError, match=r"messages\[0\]"):
        await manager.record_many(
            [
                (Scope("ann"), [{"role": "user", "content": "fine"}], None),
                (Scope("ann"), [{"role": "user", "content": {1, 2}}], None),
            ]
        )
    with pytest.raises(InvalidMessageError, match=r"conversations\[0\] has no messages"):
        await manager.record_many([(Scope("ann"), [], None)])
    assert db.execute("SELECT count(*) FROM agent_memory.episodes").fetchone() == (3,)


async def test_every_query_reports_the_importance_inject_ranks_by(manager: MemoryManager) -> None:
    # one definition (agent_memory.importance_on): listed, explained and injected alike, and
    # never above 1, even for a day before the fact's clock
    scope = Scope(user_id="ida")
    await add_facts(manager, scope, [("User likes tea", 0.9)])
    pool = await manager.backend.apool()
    for days in (-30, 0, 10):
        on = (datetime.now(UTC) + timedelta(days=days)).date()
        frame = await manager.inject(scope, on=on)
        async with pool.connection() as conn:
            (item,) = await fact_repo.items(conn, scope, on)
            explained = await fact_repo.get(conn, item.id, on)
        assert explained is not None
        expected = min(1.0, 0.9 * 0.95**days)
        assert frame.importances == pytest.approx([expected])
        assert item.importance == pytest.approx(expected) == explained.importance
