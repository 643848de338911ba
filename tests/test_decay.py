"""Decay: the seed's numbers, idempotence within a day, scoped runs, analytics, factor change."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.db import facts as fact_repo
from agent_memory.decay import days_to_purge, today
from agent_memory.models import Fact
from agent_memory.settings import Settings
from agent_memory_flows.decay import DecayParams, decay_flow
from tests.llm_faults import key_of

GENERAL = math.log(2) / -math.log(0.95)  # the half-life of 0.95 a day


async def seed(manager: MemoryManager, scope: Scope, facts: list[tuple[str, float, int]]) -> None:
    """Facts (content, importance, age in days)."""
    pool = await manager.backend.apool()
    async with pool.connection() as conn:
        for content, importance, age in facts:
            await fact_repo.upsert(
                conn,
                scope,
                [Fact(content=content, importance=importance)],
                datetime.now(UTC) - timedelta(days=age),
                None,
            )


def snapshot(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT id, importance, importance_at, half_life, expires_day, updated_at "
        "FROM agent_memory.memory_items ORDER BY id"
    ).fetchall()


def test_seed_table() -> None:
    # the seed: 0.85 at day 0, 0.51 at day 10, 0.18 at day 30, 0.06 at day 50, gone at 55-56
    seed_table = {0: 0.85, 10: 0.51, 30: 0.18, 50: 0.06}
    assert {d: 0.85 * 0.95**d for d in seed_table} == pytest.approx(seed_table, abs=0.01)
    assert days_to_purge(0.85, GENERAL, 0.05) == 56
    assert 0.85 * 0.95**55 >= 0.05 > 0.85 * 0.95**56
    assert days_to_purge(0.04, GENERAL, 0.05) == 0


@pytest.mark.usefixtures("prefect_harness")
async def test_decay_twice_in_a_day_changes_nothing_the_second_time(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    scope = Scope(user_id="fade")
    await seed(
        manager,
        scope,
        [("fresh", 0.9, 0), ("old", 0.85, 56), ("edge", 0.85, 55), ("ancient", 0.99, 400)],
    )
    first = await decay_flow(DecayParams())
    assert first["purged"] == 2  # 'old' (day 56) and 'ancient'
    assert [f.content for f in await manager.facts(scope)] == ["fresh", "edge"]
    before = snapshot(db)
    second = await decay_flow(DecayParams())
    assert second["purged"] == 0
    assert snapshot(db) == before  # not a single row rewritten
    assert second["facts"] == 2
    assert db.execute(
        "SELECT count(*), sum(facts_purged) FROM agent_memory.decay_runs"
    ).fetchone() == (2, 2)


@pytest.mark.usefixtures("prefect_harness")
async def test_decay_of_one_scope_leaves_others(manager: MemoryManager) -> None:
    a, b = Scope(user_id="a"), Scope(user_id="a", agent_id="x")
    await seed(manager, a, [("old a", 0.5, 100)])
    await seed(manager, b, [("old b", 0.5, 100)])
    result = await manager.decay(b)
    assert result["purged"] == 1
    assert [f.content for f in await manager.facts(a)] == ["old a"]
    assert await manager.facts(b) == []


@pytest.mark.usefixtures("prefect_harness")
async def test_decay_as_of_a_later_day_and_analytics(manager: MemoryManager) -> None:
    scope = Scope(user_id="future")
    await seed(manager, scope, [("f1", 0.9, 0), ("f2", 0.8, 0), ("f3", 0.3, 0), ("f4", 0.06, 0)])
    later = today() + timedelta(days=10)
    report = await manager.decay(as_of=later)
    assert report["purged"] == 1  # f4: 0.06 * 0.95^10 = 0.036; f3: 0.3 * 0.95^10 = 0.18 stays
    remaining = {f.content: f.importance for f in await manager.facts(scope, on=later)}
    assert remaining.keys() == {"f1", "f2", "f3"}
    assert remaining["f1"] == pytest.approx(0.9 * 0.95**10)
    dist = {r["importance"]: r["facts"] for r in report["distribution"]}
    assert sum(dist.values()) == report["facts"] == 3
    assert dist["0.50-0.60"] == 1 and dist["0.40-0.50"] == 1 and dist["0.10-0.20"] == 1
    expiry = {r["within_days"]: r["expiring"] for r in report["expiry"]}
    assert expiry[30] == 1  # f3: 0.18 -> below 0.05 in 25 more days
    assert report["scopes"] == [
        {  # by the scope's key: the same table is the run's artifact, kept by Prefect
            "scope": key_of(Scope(user_id="future")),
            "facts": 3,
            "mean_importance": pytest.approx((0.9 + 0.8 + 0.3) * 0.95**10 / 3, abs=1e-3),
            "expiring_7d": 0,
            "next_expiry_days": days_to_purge(0.3 * 0.95**10, GENERAL, 0.05),
        }
    ]


@pytest.mark.usefixtures("prefect_harness")
async def test_changed_factor_rebases_once_and_keeps_today_s_importance(
    manager: MemoryManager, settings: Settings, db: psycopg.Connection[Any]
) -> None:
    scope = Scope(user_id="rebase")
    await seed(manager, scope, [("f", 0.8, 10)])
    (before,) = await manager.facts(scope)
    settings.memory.decay_factor = 0.9
    await manager.decay()
    assert db.execute("SELECT factor FROM agent_memory.decay_policy").fetchone() == (0.9,)
    (after,) = await manager.facts(scope)
    assert after.importance == pytest.approx(before.importance)
    tomorrow = today() + timedelta(days=1)
    (next_day,) = await manager.facts(scope, on=tomorrow)
    assert next_day.importance == pytest.approx(before.importance * 0.9)
    rows = snapshot(db)
    await manager.decay()
    assert snapshot(db) == rows  # the second run with the same factor rebases nothing


def test_decay_params_are_validated() -> None:
    with pytest.raises(ValueError, match="purge_below"):
        DecayParams(purge_below=1.5)
    with pytest.raises(ValueError, match="extra"):
        DecayParams(scop={"user_id": "typo"})  # type: ignore[call-arg]
    assert DecayParams(as_of=date(2026, 1, 1)).as_of == date(2026, 1, 1)
