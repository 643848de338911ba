"""The ablations of issue 53, item 3 (benchmarks/ablations.py): relative dates resolved against
the day they were said, the re-scorings each column makes, and a run through the real import,
consolidation flow and inject whose base column is the harness's own hybrid ranking."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from agent_memory.settings import Settings
from benchmarks import ablations, recall
from tests.fake_llm import FakeLLM
from tests.recall_runs import every_turn_settings

MONDAY = date(2024, 1, 8)


@pytest.mark.parametrize(
    ("said", "meant"),
    [
        ("I went yesterday.", "I went yesterday (7 January 2024)."),
        ("Tonight we eat out", "Tonight (8 January 2024) we eat out"),
        ("tomorrow", "tomorrow (9 January 2024)"),
        ("last Friday", "last Friday (5 January 2024)"),
        ("last Monday", "last Monday (1 January 2024)"),  # the day itself is not "last"
        ("next Monday", "next Monday (15 January 2024)"),
        ("this Wednesday", "this Wednesday (10 January 2024)"),
        ("last week", "last week (the week of 1 January 2024)"),
        ("last weekend", "last weekend (the weekend of 6 January 2024)"),
        ("last month", "last month (December 2023)"),  # across a year
        ("next month", "next month (February 2024)"),
        ("last year", "last year (2023)"),
        ("3 days ago", "3 days ago (5 January 2024)"),
        ("a couple of months ago", "a couple of months ago (November 2023)"),
        ("two weeks ago", "two weeks ago (the week of 25 December 2023)"),
        ("On Friday I", "On Friday I"),  # which Friday is not said: left as it is
        ("the lastweek", "the lastweek"),
    ],
)
def test_relative_dates_are_resolved_against_the_day_said(said: str, meant: str) -> None:
    assert ablations.resolved(said, MONDAY) == meant


def test_with_dates_rewrites_each_turn_by_its_own_session_day() -> None:
    conversation: dict[str, Any] = {
        "id": "c",
        "user": "Ann",
        "sessions": [
            {"id": "s1", "date": "2024-01-08T09:00:00+00:00",
             "turns": [{"id": "t1", "speaker": "Ann", "text": "I moved yesterday."}]},
            {"id": "s2", "date": "2024-03-01T09:00:00+00:00",
             "turns": [{"id": "t2", "speaker": "Ann", "text": "I moved yesterday."}]},
        ],
        "questions": [],
    }  # fmt: skip
    out = ablations.with_dates([conversation])[0]
    texts = [t["text"] for s in out["sessions"] for t in s["turns"]]
    assert texts == ["I moved yesterday (7 January 2024).", "I moved yesterday (29 February 2024)."]
    assert conversation["sessions"][0]["turns"][0]["text"] == "I moved yesterday."  # a copy


def _conversation() -> dict[str, Any]:
    turns = [
        ("Ann", "Can my dog do any tricks?"),
        ("Bob", "Sit, stay and roll over."),
        ("Ann", "My sister Eve lives in Lyon."),
        ("Bob", "Eve told me she lives in Lyon."),
    ]
    return {
        "id": "c",
        "user": "Ann",
        "sessions": [
            {
                "id": "s1",
                "date": "2024-01-08T09:00:00+00:00",
                "turns": [
                    {"id": f"t{i}", "speaker": who, "text": text}
                    for i, (who, text) in enumerate(turns, start=1)
                ],
            }
        ],
        "questions": [],
    }


FACTS = {10 + i: {("c", f"t{i}")} for i in range(1, 5)}  # fact 11 is turn t1, and so on


def test_context_lifts_the_turn_after_a_match_even_from_outside_the_pool() -> None:
    conv = ablations.Conversation(_conversation(), FACTS)
    # the question matched the dog question (t1) only: its answer (t2) was not in the pool
    scored = ablations.in_context(conv, {11: 0.8})
    assert scored[12] == pytest.approx(0.4)  # half its neighbour's
    assert scored[11] == pytest.approx(0.8)  # its own: no neighbour matched
    assert 13 not in scored  # two turns away: no context of a match
    both = ablations.in_context(conv, {11: 0.8, 12: 0.2})
    assert both[12] == pytest.approx(0.2 + 0.4) and both[11] == pytest.approx(0.8 + 0.1)


def test_speakers_named_by_name_or_by_the_first_person() -> None:
    conv = ablations.Conversation(_conversation(), FACTS)
    assert conv.named("Where does Bob's friend live?") == {"Bob"}
    assert conv.named("Where does my sister live?") == {"Ann"}
    assert conv.named("Where does Eve live?") == set()  # not a speaker
    assert conv.named("What did Bobby say?") == set()  # a whole name only
    s = {13: 0.5, 14: 0.6}
    assert ablations.by_speakers(conv, s, {"Ann"}) == {13: 0.5, 14: 0.3}
    assert ablations.by_speakers(conv, s, set()) == s  # no one named: as it was


def test_feedback_adds_half_the_second_ranking() -> None:
    assert ablations.with_feedback({1: 0.5, 2: 0.4}, {2: 0.4, 3: 0.2}) == pytest.approx(
        {1: 0.5, 2: 0.6, 3: 0.1}
    )


@pytest.mark.usefixtures("prefect_harness")
async def test_a_run_scores_every_column_and_its_base_is_the_harness_hybrid(
    settings: Settings, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    conversations = recall.read_dataset(None)[:2]
    both: dict[str, Any] = {}

    async def ask(*args: Any) -> dict[str, Any]:
        both["ablations"] = await ablations.ask_ablations(*args)
        both["harness"] = await recall.ask_all(*args)
        return {}

    await recall.evaluate(
        every_turn_settings(settings, fake_llm, conversations),
        conversations,
        "turns",
        tmp_path,
        {k: recall.RANKINGS[k] for k in ("hybrid", "hybrid_snippets")},
        ask,
    )
    columns = {name: r["overall"] for name, r in both["ablations"].items()}
    assert set(columns) == set(ablations.COLUMNS)
    harness = {name: r["overall"] for name, r in both["harness"].items()}
    # every fused match re-ranked as it came is the hybrid ranking; the default is the default
    for k in ("recall@1", "recall@5", "recall@10", "recall@20"):
        assert columns["hybrid"][k] == harness["hybrid"][k], k
        assert columns["default"][k] == harness["hybrid_snippets"][k], k
    # the built-in set's user speaks in the first person, and the assistant echoes them:
    # the user's own turn first is what the speakers column is for
    assert columns["speakers"]["recall@1"] > columns["hybrid"]["recall@1"]
