"""Backfill and levels of memory (issue 39, item 4): backfilled conversations' facts are filed by
the rules live consolidation follows, unless ``--level`` names one level for all of them; the
cached extraction stays the model's answer, so a later run files the same content by the
rules again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_memory.backfill import import_jsonl
from agent_memory.models import Level
from agent_memory.settings import Settings
from agent_memory_deployments.cli.backfill import LevelOption
from agent_memory_flows.backfill import BackfillParams, backfill_flow
from agent_memory_flows.outcome import run_for_summary
from tests.test_backfill import line, write

pytestmark = pytest.mark.usefixtures("prefect_harness")

SAID = ["I prefer answers by email.", "I'm migrating the billing database this week."]
EMAIL, MIGRATING = "User prefers answers by email.", "migrating"
WORKFLOW = ("support", "w1")


def _import(db: psycopg.Connection[Any], tmp_path: Path, *users: str) -> None:
    lines = [
        line(
            user_id=user,
            agent_id="support",
            workflow_id="w1",
            messages=[{"role": "user", "content": text} for text in SAID],
        )
        for user in users
    ]
    assert import_jsonl(db, write(tmp_path, *lines)).inserted == len(users)


def _filed(db: psycopg.Connection[Any], user: str) -> dict[str, tuple[str | None, str | None]]:
    rows = db.execute(
        "SELECT content, agent_id, workflow_id FROM agent_memory.memory_items"
        " WHERE user_id = %s AND superseded_at IS NULL",
        (user,),
    ).fetchall()
    return {
        (EMAIL if content == EMAIL else MIGRATING if MIGRATING in content else content): (
            agent,
            workflow,
        )
        for content, agent, workflow in rows
    }


@pytest.mark.parametrize(
    ("level", "email", "migrating"),
    [
        (None, (None, None), WORKFLOW),  # by the rules: the preference is about the person
        ("user", (None, None), (None, None)),
        ("user_agent", ("support", None), ("support", None)),
        ("scope", WORKFLOW, WORKFLOW),  # --level exact
        ("agent", WORKFLOW, WORKFLOW),  # a level the scope does not read (share=user): stays
    ],
)
async def test_backfill_files_by_the_rules_or_at_the_level_named(
    settings: Settings,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    level: Level | None,
    email: tuple[str | None, str | None],
    migrating: tuple[str | None, str | None],
) -> None:
    _import(db, tmp_path, "alice", "bob")
    summary = await run_for_summary(backfill_flow, BackfillParams(users=["alice"], level=level))
    assert not summary["failed"], summary
    assert _filed(db, "alice") == {EMAIL: email, MIGRATING: migrating}
    # the same conversation of another user, consolidated by the rules from the cached answer
    summary = await run_for_summary(backfill_flow, BackfillParams(users=["bob"]))
    assert not summary["failed"], summary
    assert _filed(db, "bob") == {EMAIL: (None, None), MIGRATING: WORKFLOW}


def test_the_commands_level_names_map_to_levels() -> None:
    assert [option.level() for option in LevelOption] == [
        None,
        "user",
        "user_agent",
        "agent",
        "scope",
    ]
