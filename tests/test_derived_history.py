"""The history of the facts an erasure takes (issue 51, item 1; agent_memory.db.derived): what
an erased conversation had changed is as if it had never been said. A fact it superseded or
invalidated is true again; one whose successor was later superseded by a conversation that
stays points at that one; the history of an erased fact that rests on nothing goes with it; a
fact forgotten by hand stays forgotten. The rows are written by the repository functions the
pipeline uses, so each case is set up exactly."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.db import facts as fact_repo
from agent_memory.models import Fact

pytestmark = pytest.mark.usefixtures("prefect_harness")

PERSON, BAR, SUPPORT = Scope("hist"), Scope("hist", "bar"), Scope("hist", "support")
JOB = """
INSERT INTO agent_memory.consolidation_jobs (user_id, agent_id, status, finished_at)
VALUES (%s, %s, 'completed', now()) RETURNING id
"""


def state(db: psycopg.Connection[Any]) -> dict[str, tuple[bool, str | None]]:
    """Each of the person's facts: current?, and the content of what supersedes it."""
    rows = db.execute(
        "SELECT m.content, m.superseded_at IS NULL, b.content FROM agent_memory.memory_items m"
        " LEFT JOIN agent_memory.memory_items b ON b.id = m.superseded_by"
        " WHERE m.user_id = 'hist'"
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


async def test_what_an_erased_conversation_changed_is_undone(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    pool = await manager.backend.apool()
    async with pool.connection() as conn:
        episodes = {}
        for scope, text in ((SUPPORT, "support chat"), (BAR, "bar chat")):
            cur = await conn.execute(
                "INSERT INTO agent_memory.episodes (user_id, agent_id, messages, message_count)"
                " VALUES (%s, %s, %s::jsonb, 1) RETURNING id",
                (scope.user_id, scope.agent_id, f'[{{"role": "user", "content": "{text}"}}]'),
            )
            episodes[scope] = int((await cur.fetchone() or [0])[0])
        jobs = {}
        for scope in (SUPPORT, BAR):
            cur = await conn.execute(JOB, (scope.user_id, scope.agent_id))
            jobs[scope] = int((await cur.fetchone() or [0])[0])
        now = datetime.now(UTC)

        async def fact(text: str, by: Scope | None) -> int:
            """A fact at the person's level, learned in ``by``'s conversation (None: from a
            job, with no source left: an earlier erasure's orphan)."""
            written = await fact_repo.upsert(
                conn,
                PERSON,
                [Fact(content=text, importance=0.8, kind="preference")],
                now,
                jobs[by or SUPPORT],
                [episodes[by]] if by else [],
            )
            return next(iter(written.ids.values()))

        tea, coffee = await fact("Likes tea.", SUPPORT), await fact("Likes coffee.", BAR)
        await fact_repo.supersede(conn, PERSON, tea, coffee, jobs[BAR])
        oslo, bergen = await fact("Lives in Oslo.", SUPPORT), await fact("Lives in Bergen.", BAR)
        tromso = await fact("Lives in Tromso.", SUPPORT)
        await fact_repo.supersede(conn, PERSON, oslo, bergen, jobs[BAR])
        await fact_repo.supersede(conn, PERSON, bergen, tromso, jobs[SUPPORT])
        bike = await fact("Owns a bike.", SUPPORT)
        await fact_repo.supersede(conn, PERSON, bike, None, jobs[BAR])  # bar said: not any more
        van = await fact("Drives a van.", None)
        await fact_repo.supersede(conn, PERSON, van, coffee, jobs[BAR])
        cat = await fact("Has a cat.", SUPPORT)
        await fact_repo.supersede(conn, PERSON, cat, None, None)  # forgotten by hand

    summary = await manager.erase_user("hist", agent_id="bar")

    assert state(db) == {
        "Likes tea.": (True, None),  # bar's coffee is gone: tea is true again
        "Lives in Oslo.": (False, "Lives in Tromso."),  # support's move still replaces it
        "Lives in Tromso.": (True, None),
        "Owns a bike.": (True, None),  # invalidated by bar's conversation only
        "Has a cat.": (False, None),  # forgotten by hand: stays forgotten
    }
    derived = summary.derived
    assert {f.content for f in derived.gone} == {"Likes coffee.", "Lives in Bergen."}
    assert {f.content for f in derived.history} == {"Drives a van."}
    assert {f.content for f in derived.revived} == {"Likes tea.", "Owns a bike."}
    assert {f.id for f in derived.revived} == {tea, bike}
    # inject finds what is true again
    frame = await manager.inject(SUPPORT, query="which drink does the user like, tea?")
    assert "Likes tea." in frame.injected_facts
