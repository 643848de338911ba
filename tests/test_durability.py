"""Durable facts: each kind fades at its own half-life, a fact said again in another
conversation lasts longer (its half-life grows), the half-life is in the stored expiry so decay
stays a range purge, and facts from before version 12 keep fading at 0.95 a day."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from agent_memory import MemoryManager, Scope
from agent_memory.db import facts as fact_repo
from agent_memory.db.migrations import ensure_decay_policy, load_migrations, migrate
from agent_memory.decay import DecayPolicy, day_index, importance_on, today
from agent_memory.extraction.parse import parse_operations
from agent_memory.extraction.prompt import OPERATIONS_FORMAT
from agent_memory.extraction.rules import facts_from_text
from agent_memory.models import Fact, KnownFact
from agent_memory.settings import MemorySettings, Settings
from agent_memory_flows.decay import DecayParams, decay_flow

GENERAL = math.log(2) / -math.log(0.95)


async def seed(
    manager: MemoryManager, scope: Scope, facts: list[Fact], age_days: int, mentions: int = 1
) -> None:
    pool = await manager.backend.apool()
    async with pool.connection() as conn:
        await fact_repo.upsert(
            conn,
            scope,
            facts,
            datetime.now(UTC) - timedelta(days=age_days),
            None,
            mentions=mentions,
        )


def stored(db: psycopg.Connection[Any], content: str) -> tuple[str, int, float, float]:
    row = db.execute(
        "SELECT kind, mentions, half_life, expires_day FROM agent_memory.memory_items"
        " WHERE content = %s",
        (content,),
    ).fetchone()
    assert row is not None, content
    return str(row[0]), int(row[1]), float(row[2]), float(row[3])


@pytest.mark.usefixtures("prefect_harness")
async def test_each_kind_fades_at_its_own_half_life(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    scope = Scope(user_id="kinds")
    facts = {
        "identity": "User is vegetarian.",
        "preference": "User prefers window seats.",
        "situation": "User is training for a marathon.",
        "event": "User went to a jazz concert.",
        "plan": "User has a dentist appointment on Friday.",
        "general": "User mentioned the weather.",
    }
    await seed(
        manager,
        scope,
        [Fact(content=c, importance=0.85, kind=k) for k, c in facts.items()],  # type: ignore[arg-type]
        age_days=30,
    )
    half_lives = MemorySettings().half_lives()
    on = today()
    for kind, content in facts.items():
        got_kind, mentions, half_life, expires = stored(db, content)
        assert (got_kind, mentions) == (kind, 1)
        assert half_life == pytest.approx(half_lives[kind])  # type: ignore[index]
        # what every query reports is importance halved once per half-life since the clock
        assert importance_on(expires, on, half_life, 0.05) == pytest.approx(
            0.85 * 2 ** (-30 / half_life)
        )
    # 30 days: only the plan goes (a 7-day half-life takes 0.85 below 0.05 in 29 days; the
    # general fact, at 0.95 a day, is at 0.18)
    result = await decay_flow(DecayParams())
    assert result["purged"] == 1
    left = {f.content: f for f in await manager.facts(scope)}
    assert facts["plan"] not in left
    assert left[facts["identity"]].importance == pytest.approx(0.85 * 2 ** (-30 / 365))
    assert left[facts["identity"]].kind == "identity"
    # in 30 more days the event (14 days) and the general fact (13.5) are gone too; identity,
    # preference and the situation (30 days: 0.85 -> 0.21) stay
    later = await decay_flow(DecayParams(as_of=on + timedelta(days=30)))
    assert later["purged"] == 2
    assert {f.content for f in await manager.facts(scope, on=on + timedelta(days=30))} == {
        facts["identity"],
        facts["preference"],
        facts["situation"],
    }


@pytest.mark.usefixtures("prefect_harness")
async def test_a_fact_said_in_more_conversations_lasts_longer(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    """Spacing: each further conversation that says a fact multiplies its half-life, through
    the real consolidation flow and the offline extractor (which knows each fact's source)."""
    scope = Scope(user_id="spaced")
    start = datetime.now(UTC) - timedelta(days=40)
    for day in (0, 10):
        await manager.record(
            scope,
            [HumanMessage("I am a nurse at the city hospital."), AIMessage("Good to know.")],
            occurred_at=start + timedelta(days=day),
        )
    await manager.record(scope, [HumanMessage("I went to a concert yesterday.")], occurred_at=start)
    await manager.consolidate()
    nurse = "User is a nurse at the city hospital."
    kind, mentions, half_life, _ = stored(db, nurse)
    assert (kind, mentions) == ("identity", 2)  # one batch, two conversations: two mentions
    assert half_life == pytest.approx(2 * 365)
    said = start.date().isoformat()
    concert = stored(db, f"User went to a concert yesterday (said on {said}).")
    assert concert[:3] == ("event", 1, pytest.approx(14))
    # said again later, in another run: a third mention, and the clock restarts there
    await manager.record(
        scope,
        [HumanMessage("I am a nurse at the city hospital.")],
        occurred_at=start + timedelta(days=30),
    )
    await manager.consolidate()
    kind, mentions, half_life, _ = stored(db, nurse)
    assert (mentions, half_life) == (3, pytest.approx(4 * 365))
    (item,) = [f for f in await manager.facts(scope) if f.content == nurse]
    assert item.mentions == 3 and item.half_life == pytest.approx(4 * 365)
    # the clock is the later of when it was said and when it was recorded (docs/backfill.md)
    assert item.importance_at >= start + timedelta(days=30)


async def test_growth_is_capped_and_one_is_no_growth(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    scope = Scope(user_id="cap")
    pool = await manager.backend.apool()
    async with pool.connection() as conn:
        for _ in range(3):
            await fact_repo.upsert(
                conn,
                scope,
                [Fact(content="User is left-handed.", importance=0.9, kind="identity")],
                datetime.now(UTC),
                None,
                mentions=10,
                growth=10.0,
            )
        await fact_repo.upsert(
            conn,
            scope,
            [Fact(content="User likes tea.", importance=0.9, kind="preference")],
            datetime.now(UTC),
            None,
            mentions=3,
            growth=1.0,
        )
        with pytest.raises(ValueError, match="mentions must be at least 1, got 0"):
            await fact_repo.upsert(
                conn,
                scope,
                [Fact(content="x", importance=0.5)],
                datetime.now(UTC),
                None,
                mentions=0,
            )
    assert stored(db, "User is left-handed.")[1:3] == (30, 36_500.0)
    assert stored(db, "User likes tea.")[1:3] == (3, 180.0)


async def test_a_later_mention_gives_a_general_fact_its_kind(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    scope = Scope(user_id="rekind")
    await seed(manager, scope, [Fact(content="User lives in Lyon.", importance=0.7)], 5)
    assert stored(db, "User lives in Lyon.")[:3] == ("general", 1, pytest.approx(GENERAL))
    await seed(
        manager, scope, [Fact(content="User lives in Lyon.", importance=0.7, kind="identity")], 0
    )
    # the kind the later mention gave, its half-life grown for the two mentions
    assert stored(db, "User lives in Lyon.")[:3] == ("identity", 2, pytest.approx(730))
    # a specific kind is not overwritten by a later one
    await seed(
        manager, scope, [Fact(content="User lives in Lyon.", importance=0.7, kind="event")], 0
    )
    assert stored(db, "User lives in Lyon.")[:3] == ("identity", 3, pytest.approx(1460))


@pytest.mark.usefixtures("prefect_harness")
async def test_changed_half_life_and_threshold_rescale_once_and_keep_today_s_importance(
    manager: MemoryManager, settings: Settings, db: psycopg.Connection[Any]
) -> None:
    scope = Scope(user_id="rescale")
    await seed(
        manager,
        scope,
        [
            Fact(content="User plans a trip to Oslo.", importance=0.9, kind="plan"),
            Fact(content="User is a chemist.", importance=0.9, kind="identity"),
        ],
        age_days=3,
    )
    before = {f.content: f.importance for f in await manager.facts(scope)}
    settings.memory.half_life_plan = 14.0
    first = await decay_flow(DecayParams())
    assert first["purged"] == 0
    policy = db.execute("SELECT half_lives, purge_below FROM agent_memory.decay_policy").fetchone()
    assert policy is not None and policy[0]["plan"] == 14.0
    after = {f.content: f for f in await manager.facts(scope)}
    assert {c: f.importance for c, f in after.items()} == pytest.approx(before)
    tomorrow = today() + timedelta(days=1)
    trip = {f.content: f for f in await manager.facts(scope, on=tomorrow)}
    assert trip["User plans a trip to Oslo."].importance == pytest.approx(
        before["User plans a trip to Oslo."] * 2 ** (-1 / 14)
    )
    assert stored(db, "User is a chemist.")[2] == 365.0  # another kind: not touched
    rows = db.execute("SELECT * FROM agent_memory.memory_items ORDER BY id").fetchall()
    await decay_flow(DecayParams())
    assert db.execute("SELECT * FROM agent_memory.memory_items ORDER BY id").fetchall() == rows

    # a higher threshold: the run purges at it before the policy moves to it (a threshold the
    # expiry days were not computed for is checked fact by fact), then every expiry moves
    weak = Fact(content="User once tried sushi.", importance=0.08, kind="event")
    await seed(manager, scope, [weak], age_days=0)
    settings.memory.purge_threshold = 0.1
    assert (await decay_flow(DecayParams()))["purged"] == 1
    assert db.execute("SELECT purge_below FROM agent_memory.decay_policy").fetchone() == (0.1,)
    now = {f.content: f.importance for f in await manager.facts(scope)}
    assert now == pytest.approx(before)
    assert (await decay_flow(DecayParams()))["purged"] == 0


def test_facts_from_before_version_12_keep_fading_at_0_95_a_day(
    empty_database: psycopg.Connection[Any],
) -> None:
    db = empty_database
    migrate(db, migrations=[m for m in load_migrations() if m.version <= 11])
    db.execute(
        "INSERT INTO agent_memory.decay_policy (id, factor) VALUES (true, 0.95)"
        " ON CONFLICT DO NOTHING"
    )
    made = datetime(2026, 11, 1, tzinfo=UTC)
    db.execute(
        """INSERT INTO agent_memory.memory_items
               (user_id, content, content_hash, importance, importance_at, decay_rank)
           VALUES ('old', 'User is a pilot.', '\\x01', 0.8, %(at)s,
                   ln(0.8) + agent_memory.day_index(%(at)s) * -ln(0.95))""",
        {"at": made},
    )
    assert migrate(db) == [m.name for m in load_migrations() if m.version > 11]
    ensure_decay_policy(db, DecayPolicy.of(MemorySettings()))
    row = db.execute(
        "SELECT kind, mentions, half_life, expires_day FROM agent_memory.memory_items"
    ).fetchone()
    assert row is not None
    kind, mentions, half_life, expires = row
    assert (kind, mentions) == ("general", 1) and half_life == pytest.approx(GENERAL)
    for days in (0, 10, 43, 200):
        on = made.date() + timedelta(days=days)
        assert importance_on(expires, on, half_life, 0.05) == pytest.approx(0.8 * 0.95**days)
    # 0.8 * 0.95 ** n < 0.05 from n = 55: the purge's range says the same
    assert day_index(date(2026, 11, 1)) + 54 < expires < day_index(date(2026, 11, 1)) + 55
    policy = db.execute("SELECT half_lives FROM agent_memory.decay_policy").fetchone()
    assert policy is not None and set(policy[0]) == set(MemorySettings().half_lives())
    assert policy[0]["general"] == pytest.approx(GENERAL)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("I'm a nurse.", "identity"),
        ("I'm a big fan of jazz.", "preference"),
        ("I love hiking in the Alps.", "preference"),
        ("I work at a bakery.", "identity"),
        ("I'm working on a novel.", "situation"),
        ("We use Postgres 16.", "situation"),
        ("My dentist appointment is on Friday.", "plan"),
        ("I want to learn Spanish next year.", "plan"),
        ("I visited my sister last week.", "event"),
        ("We adopted a kitten.", "event"),
        ("I went to a concert yesterday.", "event"),
        ("I'm from Porto.", "identity"),
        # a new job or home is how things are now, whenever it started
        ("Big news: I just started a new job as a nurse at St Mary's!", "identity"),
        ("We moved to Lisbon last week.", "identity"),
        # the verb says it happened; "on Sunday" is a day past, not a plan
        ("I ran the Berlin marathon on Sunday.", "event"),
    ],
)
def test_the_offline_rules_give_each_fact_a_kind(text: str, kind: str) -> None:
    (fact,) = facts_from_text(text, date(2026, 5, 4))
    assert fact.kind == kind, fact


def test_a_model_s_kind_is_read_and_a_bad_one_noted() -> None:
    known = [KnownFact(1, 41, "User lives in Lyon.", 0.7, "identity")]
    ops, repairs = parse_operations(
        """[{"op": "add", "content": "User likes tea.", "importance": 0.6, "kind": "Preference"},
            {"op": "add", "content": "User flies Monday.", "importance": 0.6, "type": "plans"},
            {"op": "add", "content": "User is tired.", "importance": 0.4, "kind": "mood"},
            {"op": "update", "id": 1, "content": "User lives in Paris.", "importance": 0.7}]""",
        known,
    )
    assert [o.kind for o in ops] == ["preference", "plan", "general", "identity"]
    assert repairs == [
        "fact 2: kind 'mood' is not one of identity, preference, situation, event, plan, general"
    ]
    item = OPERATIONS_FORMAT["json_schema"]["schema"]["properties"]["operations"]["items"]  # type: ignore[index]
    assert item["properties"]["kind"]["enum"][:-1] == list(MemorySettings().half_lives())
    assert "kind" in item["required"]
