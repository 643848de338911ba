"""The evaluation harness (benchmarks/recall.py) at a small size, through the real import,
consolidation flow and inject: the dataset is checked, every turn becomes a fact, and the
rankings are measured against each other in one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_memory.errors import BackfillError
from agent_memory.settings import LLMSettings, Settings
from benchmarks import recall, recall_set
from tests.fake_llm import FakeLLM


def test_the_built_in_set_is_what_the_issue_asks_for() -> None:
    conversations = recall.read_dataset(None)
    questions = [q for c in conversations for q in c["questions"]]
    assert len(conversations) >= 10 and len(questions) >= 300
    assert {"lexical", "paraphrase", "changed", "temporal"} <= {q["category"] for q in questions}
    turns = {t["id"]: t["text"] for c in conversations for s in c["sessions"] for t in s["turns"]}
    for q in questions:
        if q["category"] == "paraphrase":  # shares no word with its answer
            answer = turns[q["answers"][0]]
            assert not recall_set.content_words(q["question"]) & recall_set.content_words(answer)


def test_a_written_set_reads_back_the_same_and_bad_lines_are_named(tmp_path: Path) -> None:
    path = recall_set.write(tmp_path / "set.jsonl")
    assert recall.read_dataset(path) == recall.read_dataset(None)
    good = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    cases = [
        ({**good, "sessions": "none"}, "'sessions' is str"),
        ({k: v for k, v in good.items() if k != "questions"}, "missing 'questions'"),
        (
            {**good, "questions": [{**good["questions"][0], "answers": ["no-such-turn"]}]},
            "name no turn",
        ),
        (
            {**good, "sessions": [{**good["sessions"][0], "date": "2025-01-06"}]},
            "has no time zone",
        ),
    ]
    for bad, message in cases:
        path.write_text(json.dumps(bad) + "\n", encoding="utf-8")
        with pytest.raises(BackfillError, match=message):
            recall.read_dataset(path)
    path.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(BackfillError, match="line 1: not JSON"):
        recall.read_dataset(path)


@pytest.mark.usefixtures("prefect_harness")
async def test_turns_mode_ranks_every_method_in_one_run(
    settings: Settings, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.reset(recall.every_turn)
    llm = LLMSettings(model="openai/every-turn", api_base=fake_llm.api_base, api_key="x")
    conversations = recall.read_dataset(None)[:2]
    result: dict[str, Any] = await recall.evaluate(
        settings.model_copy(update={"llm": llm}), conversations, "turns", tmp_path
    )
    # one fact per distinct turn text of a conversation (a scope), each traced to its turn
    distinct = sum(
        len({t["text"] for s in c["sessions"] for t in s["turns"]}) for c in conversations
    )
    assert result["facts"] == result["facts_mapped_to_turns"] == distinct
    figures = {name: r["overall"] for name, r in result["rankings"].items()}
    assert set(figures) == set(recall.RANKINGS)
    for name, f in figures.items():
        assert f["questions"] == len([q for c in conversations for q in c["questions"]])
        assert f["recall@5"] <= f["recall@10"] <= f["recall@20"], name
        assert f["inject_p50_ms"] > 0 and f["tokens_per_question"] > 0
    # relevance finds what importance cannot; meaning finds the paraphrases full text misses
    assert figures["hybrid"]["recall@10"] > figures["importance"]["recall@10"] + 0.3
    paraphrase = {n: r["by_category"]["paraphrase"] for n, r in result["rankings"].items()}
    assert paraphrase["hybrid"]["recall@10"] > paraphrase["text"]["recall@10"]
