"""The offline extractor's measure on public conversations (benchmarks/extraction_labels.py):
the hand labels are the fixed 150 turns, the matcher is the documented lenient one, and the
figures count what they say on turns written here (LoCoMo's text is not shipped)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from benchmarks import extraction_labels as labels
from benchmarks import locomo

DAY = date(2026, 5, 4)


def test_the_labels_are_the_fixed_150_turns_of_the_ten_conversations() -> None:
    data = json.loads(labels.LABELS.read_text(encoding="utf-8"))
    turns = data["turns"]
    assert len(turns) == 150 and data["seed"] == 36
    by_conversation = {t["conversation"] for t in turns}
    assert len(by_conversation) == 10
    assert len({(t["conversation"], t["turn"]) for t in turns}) == 150
    assert all(locomo._TURN.fullmatch(t["turn"]) for t in turns)
    assert sum(len(t["facts"]) for t in turns) >= 100


def test_a_fact_matches_a_label_that_shares_half_its_words() -> None:
    assert labels.matches(
        "User adopted a guinea pig called Oscar.", "has a guinea pig called Oscar"
    )
    assert labels.matches("User went to a poetry reading.", "went to a poetry reading last Friday")
    assert not labels.matches("User went to the park.", "went to a poetry reading last Friday")
    assert not labels.matches("User likes tea.", "")


def test_the_figures_count_facts_labels_and_what_is_left() -> None:
    figures = labels.score(
        [
            ("I work as a nurse at St Mary's.", DAY, ["works as a nurse at St Mary's"]),
            ("I love hiking. Nice weather!", DAY, ["loves hiking", "likes the weather"]),
            ("Thanks, see you!", DAY, []),
            ("I'm a fan of jazz.", DAY, []),  # a fact no label asks for
        ]
    )
    assert (figures["user_turns"], figures["labels"], figures["facts"]) == (4, 3, 3)
    assert figures["facts_per_100_user_turns"] == 75.0
    assert figures["precision"] == figures["recall"] == round(2 / 3, 3)
    assert [u["labels_missed"] for u in figures["unmatched"]] == [["likes the weather"], []]
    assert figures["unmatched"][1]["facts_unmatched"] == ["User is a fan of jazz."]


def test_a_label_naming_a_turn_the_dataset_lacks_stops_the_run(tmp_path: Path) -> None:
    conversation = {
        "id": "conv-26",
        "user": "Ann",
        "sessions": [
            {
                "id": "s1",
                "date": "2023-05-08T13:56:00+00:00",
                "turns": [{"id": "D1:1", "speaker": "Ann", "text": "I love hiking."}],
            }
        ],
        "questions": [],
    }
    dataset = tmp_path / "set.jsonl"
    dataset.write_text(json.dumps(conversation) + "\n", encoding="utf-8")
    small = tmp_path / "labels.json"
    small.write_text(
        json.dumps(
            {"turns": [{"conversation": "conv-26", "turn": "D1:1", "facts": ["loves hiking"]}]}
        ),
        encoding="utf-8",
    )
    assert labels.labelled_turns(dataset, small) == [
        ("I love hiking.", date(2023, 5, 8), ["loves hiking"])
    ]
    with pytest.raises(SystemExit, match="no turn 'D1:11' in conversation 'conv-26'"):
        labels.labelled_turns(dataset)
