"""Backfill: importing history (JSON Lines) and consolidating it in the order it happened."""

from __future__ import annotations

import json
import logging
import subprocess
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactCollectionFilter, ArtifactCollectionFilterKey

from agent_memory.backfill import import_jsonl, parse_line
from agent_memory.errors import BackfillError, InvalidScopeError
from agent_memory.models import Window
from agent_memory.settings import Settings
from agent_memory_flows.backfill import PROGRESS_KEY, BackfillParams, backfill_flow
from agent_memory_flows.outcome import run_for_summary
from tests import faults
from tests.fake_llm import FakeLLM, facts_answer
from tests.processes import run_python

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "examples" / "history.jsonl"
MAX = 8 * 1024 * 1024


def line(**record: Any) -> str:
    base: dict[str, Any] = {
        "user_id": "u1",
        "occurred_at": "2026-02-01T10:00:00+00:00",
        "messages": [{"role": "user", "content": "I prefer tea."}],
    }
    base.update(record)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def count(db: psycopg.Connection[Any], consolidated: bool | None = None) -> int:
    row = db.execute(
        "SELECT count(*) FROM agent_memory.episodes"
        " WHERE %(c)s::boolean IS NULL OR consolidated = %(c)s",
        {"c": consolidated},
    ).fetchone()
    assert row is not None
    return int(row[0])


# ---- import -------------------------------------------------------------------------------


def test_sample_file_imports_with_its_times_and_again_adds_nothing(
    db: psycopg.Connection[Any],
) -> None:
    first = import_jsonl(db, SAMPLE)
    assert (first.lines, first.inserted, first.duplicates, first.bad) == (3, 3, 0, [])
    rows = db.execute(
        "SELECT user_id, agent_id, occurred_at, source_key, message_count, messages, metadata"
        " FROM agent_memory.episodes ORDER BY occurred_at"
    ).fetchall()
    assert [(r[0], r[1]) for r in rows] == [("alice", "travel"), ("bob", None), ("alice", "travel")]
    assert rows[0][2] == datetime(2026, 3, 2, 9, 15, tzinfo=UTC)
    assert [r[3] for r in rows] == ["id:conv-0001", "id:conv-0003", "id:conv-0002"]
    # a LangChain messages_to_dict dump is stored like a recorded LangChain message
    assert rows[1][5][0]["role"] == "user"
    assert rows[1][5][0]["content"] == "My name is Bob. I prefer decaf coffee."
    assert rows[1][6]["channel"] == "email"
    again = import_jsonl(db, SAMPLE)
    assert (again.inserted, again.duplicates) == (0, 3)
    assert count(db) == 3


def test_without_an_id_the_content_and_time_are_the_key(
    db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    path = write(tmp_path, line(), line(occurred_at="2026-02-02T10:00:00+00:00"), line())
    report = import_jsonl(db, path)
    assert (report.inserted, report.duplicates) == (2, 1)  # the third line repeats the first
    assert import_jsonl(db, path).inserted == 0
    # the same conversation in another scope is another episode
    assert import_jsonl(db, write(tmp_path, line(user_id="u2"))).inserted == 1


def test_a_bad_line_rejects_the_whole_file_by_default(
    db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    path = write(tmp_path, line(), line(occurred_at="2026-02-03T10:00:00"), line(user_id="u3"))
    with pytest.raises(BackfillError, match=r"line 2: occurred_at .* has no time zone") as bad:
        import_jsonl(db, path)
    assert count(db) == 0  # nothing half-imported, not even line 1
    # a library user is told the library's words for skipping
    assert str(bad.value).endswith("(use on_error='skip' to import the other lines)")


BAD_LINES = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "a list, not an object"),
    (line(user_id=None), "no scope: give at least one of user_id"),
    (line(user_id=""), "user_id"),
    (line(occurred_at="yesterday"), "'yesterday' is not an ISO 8601 time"),
    (line(occurred_at="2999-01-01T00:00:00+00:00"), "in the future"),
    (line(occurred_at=...), "no 'occurred_at'"),
    (line(messages=[]), "'messages' must be a non-empty list"),
    (line(messages=[{"role": "robot", "content": "x"}]), "messages[0] has role 'robot'"),
    (line(messages=[{"role": "user"}]), "messages[0] has no 'content'"),
    (line(messages=["hello"]), "messages[0] is a str"),
    (line(speaker="u1"), "unknown field(s) 'speaker'"),
    (line(id=[1]), "'id' must be a string or an integer"),
    (line(metadata=[1]), "'metadata' must be an object"),
]


def test_skip_reports_each_bad_line_by_number_and_imports_the_rest(
    db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    lines = [line(id="good-1")] + [bad for bad, _ in BAD_LINES] + ["", line(id="good-2")]
    path = write(tmp_path, *lines)
    (tmp_path / "bytes.jsonl").write_bytes(b'{"user_id": "\xff"}\n')
    report = import_jsonl(db, path, on_error="skip")
    assert report.inserted == 2
    assert [b.line for b in report.bad] == list(range(2, 2 + len(BAD_LINES)))
    for bad, (_, expected) in zip(report.bad, BAD_LINES, strict=True):
        assert expected in bad.error, (bad, expected)
    bytes_report = import_jsonl(db, tmp_path / "bytes.jsonl", on_error="skip")
    assert [str(b) for b in bytes_report.bad] == ["line 1: not UTF-8 (byte 13)"]


def test_bad_arguments_are_named(db: psycopg.Connection[Any], tmp_path: Path) -> None:
    with pytest.raises(BackfillError, match="'maybe' is not 'skip' or 'reject'"):
        import_jsonl(db, SAMPLE, on_error="maybe")  # type: ignore[arg-type]
    with pytest.raises(BackfillError, match=r"missing\.jsonl is not a file"):
        import_jsonl(db, tmp_path / "missing.jsonl")


def test_large_files_go_in_chunks_and_count_right(
    db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    lines = [
        line(user_id=f"u{i % 7}", occurred_at=(start + timedelta(minutes=i)).isoformat())
        for i in range(1234)
    ]
    seen: list[int] = []
    report = import_jsonl(db, write(tmp_path, *lines), progress=seen.append)
    assert (report.inserted, report.duplicates) == (1234, 0)
    assert seen == sorted(seen) and seen[-1] == (tmp_path / "history.jsonl").stat().st_size
    assert count(db) == 1234


def test_parse_line_keeps_what_it_replaced() -> None:
    conversation = parse_line(
        line(messages=[{"role": "user", "content": "a\u0000b"}]), 7, max_bytes=MAX
    )
    assert conversation.messages[0]["content"] == "a\ufffdb"
    assert conversation.metadata["replaced"] and conversation.metadata["imported_from_line"] == 7


def test_window_refuses_bad_bounds() -> None:
    with pytest.raises(InvalidScopeError, match=r"since .* is not before until"):
        Window(datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidScopeError, match="has no time zone"):
        Window(since=datetime(2026, 2, 1))
    with pytest.raises(InvalidScopeError, match=r"users \[''\]"):
        Window(users=[""])


# ---- the backfill flow --------------------------------------------------------------------


@pytest.mark.usefixtures("prefect_harness")
async def test_backfill_consolidates_the_window_in_time_order(
    settings: Settings, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # written newest first: the flow must still go in the order the conversations happened
    path = write(
        tmp_path,
        line(
            user_id="alice",
            occurred_at="2026-05-20T18:40:00+00:00",
            messages=[{"role": "user", "content": "Actually, my home city is Lyon."}],
        ),
        line(
            user_id="alice",
            occurred_at="2026-03-02T09:15:00+00:00",
            messages=[{"role": "user", "content": "My home city is Paris."}],
        ),
        line(user_id="bob", occurred_at="2026-03-05T09:00:00+00:00"),
        line(user_id="alice", occurred_at="2026-01-10T09:00:00+00:00"),  # before the window
    )
    import_jsonl(db, path)
    summary = await run_for_summary(
        backfill_flow,
        BackfillParams(
            since=datetime(2026, 2, 1, tzinfo=UTC),
            until=datetime(2026, 6, 1, tzinfo=UTC),
            users=["alice"],
            max_episodes_per_scope=1,  # one conversation per batch: each sees the last's facts
            decay_from="conversation",
        ),
    )
    assert summary["pending_before"] == 2
    assert (summary["episodes"], summary["failed"]) == (2, 0)
    # later conversations update what earlier ones taught
    current = db.execute(
        "SELECT content, importance_at FROM agent_memory.memory_items"
        " WHERE user_id = 'alice' AND superseded_at IS NULL"
    ).fetchall()
    assert [c for c, _ in current] == ["User's home city is Lyon."]
    # from the conversation, the decay clock starts when the conversation happened
    assert current[0][1].date() == date(2026, 5, 20)
    old = db.execute(
        "SELECT content FROM agent_memory.memory_items WHERE superseded_at IS NOT NULL"
    ).fetchall()
    assert old == [("User's home city is Paris.",)]
    # outside the window (January; bob) stays pending
    assert count(db, consolidated=False) == 2
    async with get_client() as client:
        progress = await client.read_latest_artifacts(
            artifact_filter=ArtifactCollectionFilter(
                key=ArtifactCollectionFilterKey(any_=[PROGRESS_KEY])
            )
        )
    assert [a.data for a in progress] == [100.0]
    assert progress[0].description == "2 of 2 episode(s) consolidated"


@pytest.mark.usefixtures("prefect_harness")
async def test_history_from_a_year_ago_backfilled_today_is_injected_and_survives_decay(
    settings: Settings, db: psycopg.Connection[Any], tmp_path: Path, caplog: Any
) -> None:
    from agent_memory import MemoryManager
    from agent_memory.models import Scope
    from agent_memory_flows.decay import DecayParams, decay_flow

    a_year_ago = datetime.now(UTC) - timedelta(days=365)
    said = [
        "I'm a vegetarian.",  # identity: a year's half-life
        "I prefer answers by email.",  # preference: half a year
        "My dentist appointment is on Friday.",  # plan: a week
    ]
    path = write(
        tmp_path,
        *[
            line(
                user_id=user,
                occurred_at=(a_year_ago + timedelta(days=n)).isoformat(),
                messages=[{"role": "user", "content": text}],
            )
            for user in ("ines", "olaf")
            for n, text in enumerate(said)
        ],
    )
    import_jsonl(db, path)
    # by default the clock starts at the import: the whole history is useful now
    kept = await run_for_summary(backfill_flow, BackfillParams(users=["ines"]))
    assert (kept["episodes"], kept["facts_created"]) == (3, 3)
    assert kept["facts_below_purge_threshold"] == 0
    clocks = db.execute(
        "SELECT importance_at FROM agent_memory.memory_items WHERE user_id = 'ines'"
    ).fetchall()
    assert {c.date() for (c,) in clocks} == {datetime.now(UTC).date()}
    # from the conversation, a year leaves who olaf is and what he likes, but the plan of a
    # year ago has faded: the run says so
    with caplog.at_level(logging.WARNING):
        faded = await run_for_summary(
            backfill_flow, BackfillParams(users=["olaf"], decay_from="conversation")
        )
    assert (faded["facts_created"], faded["facts_below_purge_threshold"]) == (3, 1)
    assert "1 fact(s) of the backfilled scopes are already below the purge threshold" in (
        caplog.text
    )
    # today's decay purges olaf's plan and keeps the durable facts, which inject gives back
    await decay_flow(DecayParams())
    left = db.execute(
        "SELECT user_id, count(*) FROM agent_memory.memory_items GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert left == [("ines", 3), ("olaf", 2)]
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        for user in ("ines", "olaf"):
            frame = await manager.inject(Scope(user), query="What should I cook for them?")
            assert "User is a vegetarian." in frame.injected_facts
            assert "User prefers answers by email." in frame.injected_facts
        (vegetarian,) = [
            f for f in await manager.facts(Scope("olaf")) if f.content == "User is a vegetarian."
        ]
        assert vegetarian.kind == "identity"
        assert vegetarian.importance == pytest.approx(0.9 * 2 ** (-365 / 365), rel=0.01)
    finally:
        await manager.close()


BACKFILL = (
    "import asyncio\n"
    "from agent_memory_flows.backfill import BackfillParams, backfill_flow\n"
    "asyncio.run(backfill_flow(BackfillParams(max_episodes_per_scope=2)))\n"
)


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.system
def test_an_interrupted_backfill_resumes_without_redoing_work(
    llm_settings: Settings, fake_llm: FakeLLM, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    lines = [
        line(
            occurred_at=(start + timedelta(days=i)).isoformat(),
            messages=[{"role": "user", "content": f"fact number {i}"}],
        )
        for i in range(6)
    ]
    import_jsonl(db, write(tmp_path, *lines))
    fake_llm.reset(facts_answer)

    def backfill(**extra: str) -> subprocess.CompletedProcess[str]:
        return run_python(BACKFILL, llm_settings, **extra)

    # killed (SIGKILL) right after its first batch of two episodes committed
    killed = backfill(**{faults.KILL_AT: "after_commit"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert count(db, consolidated=True) == 2
    assert fake_llm.calls == 1
    done = backfill()
    assert done.returncode == 0, done.stderr[-2000:]
    assert count(db, consolidated=False) == 0
    # the two remaining batches, and no call again for the first one
    assert fake_llm.calls == 3
    said = [r[0] for r in db.execute("SELECT content FROM agent_memory.memory_items ORDER BY id")]
    assert said == [f"User said fact number {i}" for i in range(6)]


@pytest.mark.usefixtures("prefect_harness")
async def test_a_backfill_with_no_window_is_named_for_all_time(settings: Settings) -> None:
    from prefect import get_client
    from prefect.client.schemas.sorting import FlowRunSort

    from agent_memory_flows.backfill import BackfillParams, backfill_flow
    from agent_memory_flows.outcome import run_for_summary

    await run_for_summary(backfill_flow, BackfillParams())
    async with get_client() as client:
        [run] = await client.read_flow_runs(sort=FlowRunSort.START_TIME_DESC, limit=1)
    assert run.name == "backfill [all time, all scopes]"
