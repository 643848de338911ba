"""Scopes consolidated in groups: a task run per step and group, an outcome per scope."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.consolidation.groups import ScopeGroup, groups_in_flight, split
from agent_memory.errors import SettingsError
from agent_memory.settings import ConsolidationSettings, Settings, use_settings
from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
from agent_memory_flows.outcome import run_for_summary
from tests.llm_faults import key_of

USERS = [f"grouped-{i}" for i in range(1, 6)]


def scopes(n: int) -> list[Scope]:
    return [Scope(user_id=f"u{i:02d}") for i in range(n)]


def test_scopes_split_into_even_groups_in_order() -> None:
    groups = split(scopes(7), 3)
    assert [len(g.members) for g in groups] == [3, 2, 2]
    assert [m.scope for g in groups for m in g.members] == scopes(7)  # none lost, none twice
    assert [len(g.members) for g in split(scopes(50), 40)] == [25, 25]
    assert [len(g.members) for g in split(scopes(4), 50)] == [4]
    assert split([], 50) == []
    assert ScopeGroup.of(scopes(1)).label == "user=u00"
    assert ScopeGroup.of(scopes(3)).label == "3 scopes: user=u00 \u2026 user=u02"


def test_enough_groups_run_at_once_to_keep_every_llm_slot_busy() -> None:
    assert groups_in_flight(50, 16) == 3  # 150 scopes in flight for 16 calls
    assert groups_in_flight(1, 16) == 64
    assert groups_in_flight(10_000, 1) == 3


def test_a_bad_group_size_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_MEMORY_CONSOLIDATION_GROUP_SIZE", "0")
    with pytest.raises(SettingsError, match="AGENT_MEMORY_CONSOLIDATION_GROUP_SIZE='0'"):
        ConsolidationSettings()


def grouped(settings: Settings, size: int) -> Settings:
    s = settings.model_copy(update={"consolidation": ConsolidationSettings(group_size=size)})
    use_settings(s)
    return s


def task_runs(caplog: pytest.LogCaptureFixture) -> dict[str, list[str]]:
    """The run's task runs by name, with the lines each one logged (in this process)."""
    runs: dict[str, list[str]] = {}
    for record in caplog.records:
        name = getattr(record, "task_run_name", None)
        if name:
            runs.setdefault(str(name), []).append(record.getMessage())
    return runs


@pytest.mark.usefixtures("prefect_harness")
async def test_a_task_run_per_step_and_group_and_every_scope_s_outcome_kept(
    manager: MemoryManager,
    settings: Settings,
    db: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="prefect.task_runs")
    grouped(settings, 2)
    for user in USERS:
        await manager.record(Scope(user_id=user), [{"role": "user", "content": "I use Rust."}])

    summary = await run_for_summary(consolidation_flow, ConsolidationParams())

    # five scopes in groups of at most two: three groups, each step once per group
    runs = task_runs(caplog)
    # named by the scopes' keys: Prefect is never told user ids
    k = {u: key_of(Scope(user_id=u)) for u in USERS}
    groups = [
        f"2 scopes: {k['grouped-1']} \u2026 {k['grouped-2']}",
        f"2 scopes: {k['grouped-3']} \u2026 {k['grouped-4']}",
        k["grouped-5"],
    ]
    for step in ("load", "extract", "write"):
        assert sorted(n for n in runs if n.startswith(f"{step} [")) == sorted(
            f"{step} [{g}]" for g in groups
        )
    # every scope's outcome: its row in the summary, its job row, its line in the run's log
    assert [(r["scope"], r["outcome"]) for r in summary["results"]] == [
        (f"user={u}", "completed") for u in USERS
    ]
    jobs = db.execute(
        "SELECT user_id, status, facts_created FROM agent_memory.consolidation_jobs"
        " ORDER BY user_id"
    ).fetchall()
    assert jobs == [(u, "completed", 1) for u in USERS]
    written = [line for name, lines in runs.items() if name.startswith("write [") for line in lines]
    for user in USERS:
        assert (
            sum(
                line.startswith(f"{k[user]}: job ") and " completed: 1 episode(s)" in line
                for line in written
            )
            == 1
        )


@pytest.mark.usefixtures("prefect_harness")
async def test_a_step_whose_task_itself_breaks_fails_its_group_s_scopes_and_the_run_ends(
    manager: MemoryManager,
    settings: Settings,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import agent_memory_tasks.consolidation as consolidation_tasks

    grouped(settings, 2)
    for user in USERS[:3]:
        await manager.record(Scope(user_id=user), [{"role": "user", "content": "I use Go."}])
    real = consolidation_tasks.groups.run_step

    async def broken(members: Any, step: Any, retryable: Any, limit: Any = None) -> Any:
        if any(m.stage == "loaded" for m in members):  # the extract step
            raise RuntimeError("the extract task broke before any scope's call")
        return await real(members, step, retryable, limit)

    monkeypatch.setattr(consolidation_tasks.groups, "run_step", broken)

    summary = await run_for_summary(consolidation_flow, ConsolidationParams())

    assert (summary["scopes"], summary["failed"]) == (3, 3)
    assert all("the extract task broke" in r["error"] for r in summary["results"])
    rows = db.execute(
        "SELECT status, error FROM agent_memory.consolidation_jobs ORDER BY user_id"
    ).fetchall()
    assert [r[0] for r in rows] == ["failed"] * 3
    assert all("RuntimeError: the extract task broke" in r[1] for r in rows)
    assert db.execute(
        "SELECT count(*) FROM agent_memory.episodes WHERE NOT consolidated"
    ).fetchone() == (3,)
