"""Validation and repair of what a model answers."""

from __future__ import annotations

import json

import pytest

from agent_memory.errors import ExtractionError
from agent_memory.extraction.parse import MAX_FACT_CHARS, MAX_FACTS, parse_operations
from agent_memory.models import Fact


def parse_facts(text: str, *, max_facts: int = MAX_FACTS) -> tuple[list[Fact], list[str]]:
    """The facts a model's answer adds, and the repairs made to it."""
    ops, repairs = parse_operations(text, max_facts=max_facts)
    return [op.fact for op in ops if op.op == "add"], repairs


def contents(text: str) -> list[tuple[str, float]]:
    facts, _ = parse_facts(text)
    return [(f.content, f.importance) for f in facts]


GOOD = '[{"content": "User likes tea.", "importance": 0.7}]'


@pytest.mark.parametrize(
    "text",
    [
        GOOD,
        f"Here are the facts:\n{GOOD}\nHope this helps!",
        f"```json\n{GOOD}\n```",
        f"```\n{GOOD}\n```",
        '{"facts": [{"content": "User likes tea.", "importance": 0.7}]}',
        '{"content": "User likes tea.", "importance": 0.7}',
        '[{"fact": "User likes tea.", "score": 0.7}]',
        '[{"content": "User likes tea.", "importance": "0.7"}]',
        '[{"content": "  User likes\\ttea.\\u0007 ", "importance": 0.7}]',
    ],
)
def test_repairable_answers(text: str) -> None:
    assert contents(text) == [("User likes tea.", 0.7)]


def test_empty_array_means_nothing_to_keep() -> None:
    assert parse_facts("[]") == ([], [])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("high", 0.8), ("low", 0.2), (1.7, 1.0), ("85%", 0.85), (None, 0.5)],
)
def test_importance_repairs(raw: object, expected: float) -> None:
    item = {"content": "User likes tea."}
    if raw is not None:
        item["importance"] = raw  # type: ignore[assignment]
    facts, repairs = parse_facts(json.dumps([item]))
    assert facts[0].importance == expected
    assert repairs


def test_negative_importance_and_empty_content_are_dropped_with_a_note() -> None:
    facts, repairs = parse_facts(
        json.dumps(
            [
                {"content": "User is gone.", "importance": -1},
                {"content": "   ", "importance": 0.5},
                {"content": "User stays.", "importance": 0.5},
            ]
        )
    )
    assert [f.content for f in facts] == ["User stays."]
    assert any("importance" in r for r in repairs) and any("empty" in r for r in repairs)


def test_too_many_facts_keep_the_most_important() -> None:
    many = [{"content": f"Fact {i}.", "importance": (i % 100) / 100 + 0.001} for i in range(10_000)]
    facts, repairs = parse_facts(json.dumps(many))
    assert len(facts) == MAX_FACTS
    assert min(f.importance for f in facts) > 0.9
    assert any("most important" in r for r in repairs)


def test_overlong_fact_is_cut() -> None:
    facts, _ = parse_facts(json.dumps([{"content": "x" * 5000, "importance": 0.5}]))
    assert len(facts[0].content) == MAX_FACT_CHARS


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty text"),
        ("   \n ", "empty text"),
        ('[{"content": "User is', "not valid JSON"),
        ("I could not find any facts.", "not valid JSON"),
        ("42", "JSON int"),
        ('{"answer": "none"}', "expected an array"),
        ('[{"txt": "User likes tea."}]', "no 'content'"),
        ('[{"content": 5, "importance": 0.5}]', "is not text"),
        ('[{"content": "x", "importance": "very"}]', "not a number"),
        ('[{"content": "x", "importance": true}]', "not a number"),
        ('[{"content": "x", "importance": NaN}]', "not a finite number"),
        ("[[1, 2]]", "fact 0 is a list"),
    ],
)
def test_unusable_answers_fail_with_the_bad_value(text: str, needle: str) -> None:
    with pytest.raises(ExtractionError, match=needle):
        parse_facts(text)


def test_summaries_are_read_per_episode_and_bad_ones_dropped_with_a_note() -> None:
    answer = json.dumps(
        [
            {"op": "summary", "episode": 1, "summary": "User asked about  tea."},
            {"op": "summarize", "episode": "2", "text": "User  planned a trip."},
            {"op": "summary", "episode": 3, "summary": "No such episode."},
            {"op": "summary", "episode": "first", "summary": "Not a number."},
            {"op": "summary", "episode": 1},
            {"content": "User likes tea.", "importance": 0.5},
        ]
    )
    ops, repairs = parse_operations(answer, episodes=2)
    summaries = [(o.episode, o.content) for o in ops if o.op == "summary"]
    assert summaries == [(1, "User asked about tea."), (2, "User planned a trip.")]
    assert [o.content for o in ops if o.op == "add"] == ["User likes tea."]
    assert "item 2: summary dropped, there is no episode 3" in repairs
    assert "item 3: summary dropped, its episode 'first' is not a number" in repairs
    assert "item 4: summary of episode 1 dropped, it has no text" in repairs


def test_a_bad_summary_is_dropped_not_fatal_and_a_summary_needs_no_op() -> None:
    answer = json.dumps(
        [
            {"op": "summary", "episode": 1, "summary": None},
            {"episode": 2, "summary": "User asked about trains."},
            {"content": "User likes trains.", "importance": 0.6},
        ]
    )
    ops, repairs = parse_operations(answer, episodes=2)
    assert [(o.op, o.episode, o.content) for o in ops] == [
        ("summary", 2, "User asked about trains."),
        ("add", None, "User likes trains."),
    ]
    assert "item 0: summary of episode 1 dropped, it has no text" in repairs


def test_a_large_batch_asks_for_no_summaries() -> None:
    from datetime import UTC, datetime

    from agent_memory.extraction.prompt import MAX_SUMMARIZED_EPISODES, build_messages
    from agent_memory.models import Episode

    def episodes(n: int) -> list[Episode]:
        now = datetime.now(UTC)
        return [
            Episode(
                id=i,
                user_id="u",
                agent_id=None,
                workflow_id=None,
                messages=[{"role": "user", "content": f"message {i}"}],
                occurred_at=now,
                created_at=now,
                consolidated=False,
            )
            for i in range(n)
        ]

    small = build_messages(episodes(3))[1]["content"]
    assert small.endswith("Write one summary item for each of the 3 episode(s).")
    large = build_messages(episodes(MAX_SUMMARIZED_EPISODES + 1))[1]["content"]
    assert large.endswith("Write no summary items for these episodes.")


@pytest.mark.parametrize(
    ("given", "sources", "note"),
    [
        ({"episode": 2}, [2], None),
        ({"episodes": [3, "1", 3]}, [1, 3], None),
        ({"source": "2"}, [2], None),
        ({}, [], None),  # not said: the whole batch
        ({"episode": 4}, [], "fact 0: there is no episode 4; sources: the batch"),
        ({"episode": "first"}, [], "fact 0: episode 'first' is not a number; sources: the batch"),
        ({"episode": [1, True]}, [], "fact 0: episode True is not a number; sources: the batch"),
    ],
)
def test_a_fact_names_the_episodes_it_comes_from(
    given: dict[str, object], sources: list[int], note: str | None
) -> None:
    answer = json.dumps([{"content": "User likes tea.", "importance": 0.5, **given}])
    ops, repairs = parse_operations(answer, episodes=3)
    assert ops[0].sources == sources
    assert (note in repairs) if note else not repairs
