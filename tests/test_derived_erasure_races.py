"""An erasure racing a consolidation of the same person (issue 51, item 5), in two processes on
one PostgreSQL: a child runs the consolidation flow and stops inside its write's transaction
(its facts and sources written, not committed) until the test says go; meanwhile the test's
process erases. Neither order loses a fact a surviving conversation supports, nor lets a fact
of the erased conversations outlive them. The interleaving is fixed by locks and files, never
by the clock: the test waits until the erasure is seen waiting for a lock."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.erasure import ErasureSummary
from agent_memory.settings import Settings
from tests import faults
from tests.processes import start_python
from tests.test_erasure import holding

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.system]

MARK = "gnumarker64"
BAR, SUPPORT = Scope("race", "bar"), Scope("race", "support")
TEA = f"User prefers {MARK} tea."
CONSOLIDATE = (
    "import asyncio\n"
    "from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow\n"
    "asyncio.run(consolidation_flow(ConsolidationParams()))\n"
)
DEADLINE_S = 240.0  # for a loaded machine; each wait ends as soon as its condition holds
WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
"""


def said(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def until(check: Any, what: str, child: subprocess.Popen[str]) -> None:
    """Wait until ``check()`` holds (the child still running), or fail naming ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not check():
        if child.poll() is not None:
            _, err = child.communicate()
            pytest.fail(f"the consolidation ended before {what}: {err[-2000:]}")
        if loop.time() > deadline:
            pytest.fail(f"no {what} in {DEADLINE_S} s")
        await asyncio.sleep(0.02)


async def race(
    manager: MemoryManager, settings: Settings, db: psycopg.Connection[Any], folder: Path
) -> ErasureSummary:
    """The child consolidates what is pending and pauses in its write; the erasure of the
    person's bar agent starts, waits for the child's locks; the child goes on and commits;
    the erasure finishes."""
    child = start_python(
        CONSOLIDATE, settings, **{faults.PAUSE_AT: "in_write", faults.PAUSE_DIR: str(folder)}
    )
    try:
        await until((folder / "paused").exists, "pause in the write", child)
        erasure = asyncio.create_task(manager.erase_user("race", agent_id="bar"))
        await until(lambda: db.execute(WAITING).fetchone() != (0,), "erasure waiting", child)
        assert not erasure.done()
        (folder / "go").touch()
        summary = await asyncio.wait_for(erasure, DEADLINE_S)
        _, err = child.communicate(timeout=DEADLINE_S)
        assert child.returncode == 0, err[-2000:]
        return summary
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def sources(db: psycopg.Connection[Any], content: str) -> list[tuple[str | None, str | None]]:
    """The exact scopes of the episodes a fact of the person's level comes from."""
    rows = db.execute(
        "SELECT e.user_id, e.agent_id FROM agent_memory.memory_items m"
        " JOIN agent_memory.fact_sources s ON s.fact_id = m.id"
        " JOIN agent_memory.episodes e ON e.id = s.episode_id"
        " WHERE m.content = %s AND m.agent_id IS NULL",
        (content,),
    ).fetchall()
    return [tuple(r) for r in rows]  # type: ignore[misc]


async def test_a_source_added_while_the_erasure_runs_keeps_the_fact(
    manager: MemoryManager, settings: Settings, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    await manager.record(BAR, said(f"I prefer {MARK} tea."))
    assert not (await manager.consolidate())["failed"]
    assert sources(db, TEA) == [("race", "bar")]
    # support hears the same; its consolidation holds the fact when the erasure comes for it
    await manager.record(SUPPORT, said(f"I prefer {MARK} tea."))

    summary = await race(manager, settings, db, tmp_path)

    assert sources(db, TEA) == [("race", "support")]  # not lost
    assert [f.content for f in summary.derived.kept] == [TEA]


async def test_a_consolidation_of_the_erased_conversations_cannot_bring_their_facts_back(
    manager: MemoryManager, settings: Settings, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # bar's conversation is consolidated in the child while the erasure comes for it
    await manager.record(BAR, said(f"I prefer {MARK} tea."))
    await manager.record(Scope("other", "bar"), said("I prefer green tea."))

    summary = await race(manager, settings, db, tmp_path)

    assert holding(db, MARK) == {}  # its facts went with it, once written
    assert [f.content for f in summary.derived.gone] == [TEA]
    assert holding(db, "green tea")  # the other person's, written by the same run
