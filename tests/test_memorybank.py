"""Memory in Chinese measured (issue 54, item 4): MemoryBank's evaluation data converted to the
recall harness's format (benchmarks/memorybank.py), and its Chinese sample run through the
real import, consolidation flow and inject, against full text as `simple` parses it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_memory.errors import BackfillError
from agent_memory.settings import Settings
from benchmarks import memorybank, recall
from tests.fake_llm import FakeLLM
from tests.recall_runs import every_turn_settings

DATA = Path(__file__).parent / "data"


def _user(days: dict[str, list[tuple[str, str]]]) -> dict[str, Any]:
    return {
        "name": "x",
        "history": {
            day: [{"query": q, "response": r} for q, r in talk] for day, talk in days.items()
        },
    }


def _write(folder: Path, language: str, users: dict[str, Any], questions: list[Any]) -> None:
    (folder / language).mkdir(parents=True)
    (folder / language / f"memory_bank_{language}.json").write_text(
        json.dumps(users, ensure_ascii=False), encoding="utf-8"
    )
    (folder / language / f"probing_questions_{language}.jsonl").write_text(
        "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions), encoding="utf-8"
    )


def test_a_user_becomes_a_conversation_with_its_answering_turns() -> None:
    user = _user(
        {
            "2023-04-27": [("我叫小林。", "你好！"), ("我养了一只猫。", "它叫什么？")],
            "2023-04-28": [],  # a day with no talk: no session
            "2023-04-29": [("它叫团子。", "好可爱的名字。")],
        }
    )
    conversation, dropped = memorybank.convert(
        3, " 小林 ", user, ["我的猫叫什么？", "谁是我的朋友？"], [["2.0q", "0.1q"], ["5.0r"]]
    )
    assert dropped == 1  # the second names a turn the file lacks
    assert conversation["id"] == "mb03" and conversation["user"] == "小林"
    sessions = conversation["sessions"]
    assert [s["date"] for s in sessions] == [
        "2023-04-27T20:00:00+08:00",
        "2023-04-29T20:00:00+08:00",
    ]
    assert [(t["id"], t["speaker"]) for t in sessions[1]["turns"]] == [
        ("d2-0q", "小林"),
        ("d2-0r", "AI"),
    ]
    (question,) = conversation["questions"]
    assert question["answers"] == ["d2-0q", "d0-1q"]
    assert question["asked"] == "2023-04-30"  # the day after the last session


def test_the_command_writes_both_languages_and_refuses_what_does_not_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    evidence = tmp_path / "evidence.json"
    evidence.write_text(json.dumps({"evidence": [[["0.0q"]]]}), encoding="utf-8")
    monkeypatch.setattr(memorybank, "EVIDENCE", evidence)
    source = tmp_path / "eval_data"
    _write(source, "cn", {"小林": _user({"2023-04-27": [("我住在杭州。", "好地方。")]})},
           [{"小林": ["我住在哪里？"]}])  # fmt: skip
    _write(source, "en", {"Lin": _user({"2023-04-27": [("I live in Hangzhou.", "Nice.")]})},
           [{"Lin": ["Where do I live?"]}])  # fmt: skip
    assert memorybank.main([str(source), str(tmp_path / "mb")]) == 0
    for language, question in (("cn", "我住在哪里？"), ("en", "Where do I live?")):
        (line,) = (tmp_path / f"mb_{language}.jsonl").read_text(encoding="utf-8").splitlines()
        assert json.loads(line)["questions"][0]["question"] == question
    # a question list per user that does not match the users: refused, naming the folder
    _write(tmp_path / "bad", "cn", {"a": _user({}), "b": _user({})}, [{"a": []}])
    assert memorybank.main([str(tmp_path / "bad"), str(tmp_path / "mb")]) == 2
    assert "2 users but questions for 1" in capsys.readouterr().err
    with pytest.raises(BackfillError, match="2 questions but 1 evidence lists"):
        memorybank.convert(0, "a", _user({"2023-04-27": [("q", "r")]}), ["1", "2"], [["0.0q"]])


def test_the_shipped_samples_and_evidence_agree() -> None:
    for language in ("cn", "en"):
        conversations = recall.read_dataset(DATA / f"memorybank_{language}_sample.jsonl")
        assert len(conversations) == 3
        assert sum(len(c["questions"]) for c in conversations) == 21
    evidence = json.loads(memorybank.EVIDENCE.read_text(encoding="utf-8"))["evidence"]
    assert len(evidence) == 15 and sum(len(u) for u in evidence) == 100


@pytest.mark.usefixtures("prefect_harness")
async def test_chinese_memory_is_found_by_its_words_where_simple_full_text_finds_little(
    settings: Settings, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    conversations = recall.read_dataset(DATA / "memorybank_cn_sample.jsonl")
    result = await recall.evaluate(
        every_turn_settings(settings, fake_llm, conversations),
        conversations,
        "turns",
        tmp_path,
        {name: recall.RANKINGS[name] for name in recall.SIMPLE_RANKINGS},
        recall.ask_with_simple_reference,
    )
    figures = {name: r["overall"] for name, r in result["rankings"].items()}
    assert set(figures) == {"text", "hybrid_snippets", "text_simple", "hybrid_snippets_simple"}
    # a run of Chinese characters is one word to `simple`: a question matches it only by
    # repeating it whole; cut into characters and pairs, the question's words find it
    assert figures["text"]["recall@10"] > figures["text_simple"]["recall@10"]
    assert figures["hybrid_snippets"]["recall@10"] > figures["hybrid_snippets_simple"]["recall@10"]
