"""Dated facts: a fact knows since when it is true (the conversation that said it) and, once
superseded, until when; ``manager.facts(scope, as_of=day)`` is what was true on a day; inject
gives the dates where a question is about time."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from agent_memory import MemoryManager, Scope
from agent_memory.backfill import import_jsonl
from agent_memory.settings import MemorySettings, Settings
from tests.fake_llm import FakeLLM, Reply

ALICE = Scope("alice", "travel")
# where her home and her preferences are filed: the person's level (issue 39), read by ALICE
PERSON = Scope("alice")
MARCH = datetime(2026, 3, 2, 9, 15, tzinfo=UTC)
MAY = datetime(2026, 5, 20, 18, 40, tzinfo=UTC)


def history(tmp_path: Path) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(
                {
                    "user_id": "alice",
                    "agent_id": "travel",
                    "occurred_at": when.isoformat(),
                    "messages": [{"role": "user", "content": text}],
                }
            )
            for when, text in [
                (MARCH, "My home city is Paris. I prefer window seats."),
                (MAY, "Actually, my home city is Lyon."),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    return path


async def tuned(settings: Settings, **memory: Any) -> MemoryManager:
    changed = settings.model_copy(
        update={"memory": MemorySettings(**{**settings.memory.model_dump(), **memory})}
    )
    return await MemoryManager.create(settings=changed, migrate=False)


@pytest.mark.usefixtures("prefect_harness")
async def test_a_superseded_fact_keeps_when_it_was_true(
    manager: MemoryManager, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    import_jsonl(db, history(tmp_path))
    await manager.consolidate()
    facts = {f.content: f for f in await manager.facts(PERSON, history=True)}
    paris, lyon = facts["User's home city is Paris."], facts["User's home city is Lyon."]
    assert (paris.valid_from, paris.valid_to) == (MARCH, MAY)  # the conversations' times
    assert (lyon.valid_from, lyon.valid_to) == (MAY, None)
    assert paris.superseded_at is not None and paris.superseded_at > MAY  # when it was written

    def true_on(day: date) -> set[str]:
        return {f.content for f in facts_on[day]}

    facts_on = {
        day: await manager.facts(PERSON, as_of=day)
        for day in (date(2026, 3, 1), date(2026, 3, 2), date(2026, 4, 15), date(2026, 6, 1))
    }
    assert true_on(date(2026, 3, 1)) == set()  # nothing was known yet
    assert true_on(date(2026, 3, 2)) == {
        "User's home city is Paris.",
        "User prefers window seats.",
    }
    assert true_on(date(2026, 4, 15)) == true_on(date(2026, 3, 2))
    assert true_on(date(2026, 6, 1)) == {"User's home city is Lyon.", "User prefers window seats."}
    # said again later: true again from then, and no longer superseded
    await manager.record(ALICE, [HumanMessage("My home city is Paris.")], occurred_at=MAY)
    await manager.consolidate()
    again = {f.content: f for f in await manager.facts(PERSON)}
    assert again["User's home city is Paris."].valid_to is None


@pytest.mark.usefixtures("prefect_harness")
async def test_inject_dates_the_facts_for_a_question_about_time(
    settings: Settings, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    import_jsonl(db, history(tmp_path))
    manager = await tuned(settings)
    try:
        await manager.consolidate()
        about_time = await manager.inject(ALICE, query="Since when is Lyon my home city?")
        assert "- User's home city is Lyon. (since 2026-05-20)" in about_time.context
        assert (
            about_time.fact_dates[about_time.injected_facts.index("User's home city is Lyon.")]
            == "since 2026-05-20"
        )
        plain = await manager.inject(ALICE, query="Which seat do I like?")
        assert plain.fact_dates == []
        assert "(since" not in plain.context
    finally:
        await manager.close()
    for setting, dated in (("always", True), ("never", False)):
        manager = await tuned(settings, inject_dates=setting)
        try:
            frame = await manager.inject(ALICE, query="Which seat do I like?")
            assert ("(since 2026-03-02)" in frame.context) is dated, setting
            frame = await manager.inject(ALICE, query="When did I move?")
            assert ("(since 2026-05-20)" in frame.context) is dated, setting
        finally:
            await manager.close()


def test_inject_dates_setting_is_validated() -> None:
    with pytest.raises(ValueError, match="inject_dates"):
        MemorySettings(inject_dates="sometimes")  # type: ignore[arg-type]


@pytest.mark.usefixtures("prefect_harness")
async def test_a_model_s_update_ends_the_old_fact_at_the_conversation_that_said_so(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any]
) -> None:
    def handler(request: dict[str, Any]) -> Reply:
        prompt = request["messages"][-1]["content"]
        known = {m[2]: int(m[1]) for m in re.finditer(r"\[(\d+)\] (.+?) \(\w+, importance", prompt)}
        if not known:
            return Reply(
                json.dumps(
                    [
                        {
                            "op": "add",
                            "content": "User works at Acme.",
                            "importance": 0.8,
                            "kind": "identity",
                            "episode": 1,
                        }
                    ]
                )
            )
        return Reply(
            json.dumps(
                [
                    {
                        "op": "update",
                        "id": known["User works at Acme."],
                        "content": "User works at Globex.",
                        "kind": "identity",
                        "episode": 2,
                    },
                ]
            )
        )

    fake_llm.reset(handler)
    manager = await MemoryManager.create(settings=llm_settings, migrate=False)
    scope = Scope("worker")
    try:
        await manager.record(scope, [HumanMessage("I work at Acme.")], occurred_at=MARCH)
        await manager.consolidate()
        await manager.record(
            scope, [HumanMessage("Hello!")], occurred_at=datetime(2026, 5, 1, tzinfo=UTC)
        )
        await manager.record(scope, [HumanMessage("I joined Globex.")], occurred_at=MAY)
        await manager.consolidate()
        facts = {f.content: f for f in await manager.facts(scope, history=True)}
        assert facts["User works at Acme."].valid_to == MAY  # episode 2 of the batch, not 1
        assert facts["User works at Globex."].valid_from == MAY
        frame = await manager.inject(scope, query="Where do I work now?")
        assert frame.injected_facts == ["User works at Globex."]
    finally:
        await manager.close()


def test_facts_from_before_version_13_are_dated_by_their_sources(
    empty_database: psycopg.Connection[Any],
) -> None:
    from agent_memory.db.migrations import load_migrations, migrate

    db = empty_database
    migrate(db, migrations=[m for m in load_migrations() if m.version <= 12])
    episode = db.execute(
        "INSERT INTO agent_memory.episodes (user_id, messages, message_count, occurred_at)"
        " VALUES ('old', '[]', 0, %s) RETURNING id",
        (MARCH,),
    ).fetchone()
    assert episode is not None
    facts = [
        db.execute(
            "INSERT INTO agent_memory.memory_items (user_id, content, content_hash, importance,"
            " importance_at, half_life, expires_day, superseded_at)"
            " VALUES ('old', %s, %s, 0.8, now(), 13.5, 20000, %s) RETURNING id",
            (content, content.encode(), superseded),
        ).fetchone()
        for content, superseded in [("sourced", MAY), ("unsourced", None)]
    ]
    db.execute(
        "INSERT INTO agent_memory.fact_sources (fact_id, episode_id) VALUES (%s, %s)",
        (facts[0][0], episode[0]),  # type: ignore[index]
    )
    assert migrate(db) == [m.name for m in load_migrations() if m.version > 12]
    rows = dict(
        (content, (start, end, created))
        for content, start, end, created in db.execute(
            "SELECT content, valid_from, valid_to, created_at FROM agent_memory.memory_items"
        )
    )
    assert rows["sourced"][:2] == (MARCH, MAY)  # its conversation's time; superseded then
    assert rows["unsourced"][:2] == (rows["unsourced"][2], None)  # when it was stored
