"""The library's consolidation runner without Prefect: the same steps, run in this process by
:class:`DirectSteps`, against a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from agent_memory import MemoryManager, Scope
from agent_memory.consolidation import ScopeClaims
from agent_memory.consolidation.groups import BatchPlan, Limits, split
from agent_memory.consolidation.runner import DirectSteps, Run, consolidate_groups
from agent_memory.db.connection import resolve
from agent_memory.errors import ExtractionError
from agent_memory.extraction import OfflineExtractor
from agent_memory.extraction.base import Extraction
from agent_memory.models import Episode, KnownFact, Level
from agent_memory.settings import Settings

USERS = ("direct-a", "direct-b", "direct-c")


class Refusing(OfflineExtractor):
    """The offline rules, refusing the conversations that mention a marker."""

    async def extract(
        self,
        episodes: Sequence[Episode],
        known: Sequence[KnownFact] = (),
        levels: Sequence[Level] = (),
    ) -> Extraction:
        if any("REFUSE" in str(m.get("content")) for e in episodes for m in e.messages):
            raise ExtractionError("this extractor refuses the marker")
        return await super().extract(episodes, known, levels)


async def run(settings: Settings, manager: MemoryManager, extractor: Any) -> dict[str, str]:
    pool = await manager.backend.apool()
    plan = BatchPlan(flow_run_id=None, max_episodes=100, max_batches=10)
    steps = DirectSteps(pool, extractor, plan, Limits.of(2, 2))
    claims = await ScopeClaims.open(resolve(settings.db))
    try:
        scopes = [Scope(user_id=u) for u in USERS]
        results = await consolidate_groups(Run(claims, steps, plan, []), split(scopes, 2), 2)
    finally:
        await claims.close()
    return {r.scope.user_id or "": r.outcome for r in results}


async def test_the_runner_consolidates_every_scope_without_prefect(
    settings: Settings, manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    for user in USERS:
        await manager.record(Scope(user_id=user), [{"role": "user", "content": "I love tea."}])
    assert await run(settings, manager, OfflineExtractor()) == dict.fromkeys(USERS, "completed")
    assert db.execute(
        "SELECT count(*) FROM agent_memory.episodes WHERE NOT consolidated"
    ).fetchone() == (0,)
    for user in USERS:
        assert [f.content for f in await manager.facts(Scope(user_id=user))] == [
            "User prefers tea."
        ]


async def test_a_scope_whose_step_fails_is_recorded_failed_and_the_others_complete(
    settings: Settings, manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    for user in USERS:
        text = "REFUSE this" if user == "direct-b" else "I love tea."
        await manager.record(Scope(user_id=user), [{"role": "user", "content": text}])
    outcomes = await run(settings, manager, Refusing())
    assert outcomes == {"direct-a": "completed", "direct-b": "failed", "direct-c": "completed"}
    job = db.execute(
        "SELECT status, error FROM agent_memory.consolidation_jobs WHERE user_id = 'direct-b'"
    ).fetchone()
    assert job is not None and job[0] == "failed" and "refuses the marker" in job[1]
    assert db.execute(
        "SELECT user_id FROM agent_memory.episodes WHERE NOT consolidated"
    ).fetchall() == [("direct-b",)]
