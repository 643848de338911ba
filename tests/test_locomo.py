"""The LoCoMo converter (benchmarks/locomo.py): a sample shaped as the published file becomes a
conversation the recall harness reads unchanged, with its sessions dated, its photos' captions
kept, adversarial and malformed questions left out, and bad input named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_memory.errors import BackfillError
from benchmarks import locomo, recall


def _sample() -> dict[str, Any]:
    return {
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a support group."},
                {
                    "speaker": "Melanie",
                    "dia_id": "D1:2",
                    "text": "Look at this!",
                    "blip_caption": "a photo of a sunrise painting",
                },
            ],
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [{"speaker": "Melanie", "dia_id": "D2:1", "text": "We went camping."}],
            "session_3_date_time": "",
            "session_3": [],
        },
        "qa": [
            {
                "question": "When did Caroline go?",
                "answer": "7 May",
                "evidence": ["D1:1"],
                "category": 2,
            },
            {"question": "What did Melanie paint?", "evidence": ["D1:2; D2:1"], "category": 4},
            {
                "question": "What did Caroline realise?",
                "evidence": ["D1:1"],
                "category": 5,
                "adversarial_answer": "x",
            },
            {"question": "Broken evidence?", "evidence": ["D"], "category": 1},
        ],
    }


def test_a_sample_becomes_a_conversation_the_harness_reads(tmp_path: Path) -> None:
    source = tmp_path / "locomo10.json"
    source.write_text(json.dumps([_sample()]), encoding="utf-8")
    out = tmp_path / "locomo.jsonl"
    assert locomo.main([str(source), str(out)]) == 0
    [conversation] = recall.read_dataset(out)
    assert conversation["user"] == "Caroline"
    assert [s["date"] for s in conversation["sessions"]] == [
        "2023-05-08T13:56:00+00:00",
        "2023-06-27T10:37:00+00:00",
    ]
    texts = [t["text"] for s in conversation["sessions"] for t in s["turns"]]
    assert texts[1] == "Look at this! [shares a photo of a sunrise painting]"
    questions = conversation["questions"]
    assert [(q["category"], q["answers"]) for q in questions] == [
        ("temporal", ["D1:1"]),
        ("single-hop", ["D1:2", "D2:1"]),
    ]
    assert {q["asked"] for q in questions} == {"2023-06-28"}


def test_bad_input_is_named(tmp_path: Path) -> None:
    bad_date = _sample()
    bad_date["conversation"]["session_2_date_time"] = "sometime in June"
    with pytest.raises(BackfillError, match="'sometime in June'"):
        locomo.convert(bad_date)
    source = tmp_path / "not.json"
    source.write_text("{not json", encoding="utf-8")
    with pytest.raises(SystemExit, match="not a LoCoMo JSON file"):
        locomo.main([str(source), str(tmp_path / "out.jsonl")])
