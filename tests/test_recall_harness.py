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
from benchmarks import _recall_score as _score
from benchmarks import recall, recall_set
from tests.fake_llm import FakeLLM
from tests.recall_runs import every_turn_settings


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
            {**good, "sessions": [{**good["sessions"][0], "date": "early 2025"}]},
            "is not ISO 8601",
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
    conversations = recall.read_dataset(None)[:2]
    result: dict[str, Any] = await recall.evaluate(
        every_turn_settings(settings, fake_llm, conversations), conversations, "turns", tmp_path
    )
    # one fact per distinct attributed turn of a conversation (a scope), each traced to it
    distinct = sum(
        len({(t["speaker"], t["text"]) for s in c["sessions"] for t in s["turns"]})
        for c in conversations
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


# ---- counting right ------------------------------------------------------------------------


def _conversation(cid: str, turns: list[tuple[str, str]], questions: list[dict[str, Any]]) -> Any:
    """A conversation of one session whose turn ids (``t1``, ``t2``...) every other reuses."""
    return {
        "id": cid,
        "user": "Ann",
        "sessions": [
            {
                "id": f"{cid}-s1",
                "date": "2025-03-01T10:00:00+00:00",
                "turns": [
                    {"id": f"t{i}", "speaker": who, "text": text}
                    for i, (who, text) in enumerate(turns, start=1)
                ],
            }
        ],
        "questions": [{"category": "c", "asked": "2025-03-02", **q} for q in questions],
    }


_LONG = "I keep a diary. " * 80 + "My bike is a red Gazelle."  # past the fact length limit


def _small_set() -> list[dict[str, Any]]:
    first = _conversation(
        "a",
        [
            ("Ann", "Can my dog do any tricks?"),
            ("Bob", "It rained all day.\nAnyway, your dog Rex can sit, stay and roll over!"),
            ("Ann", _LONG),
            ("Bob", "Nice."),
        ],
        [
            {"id": "q1", "question": "Which tricks can Rex do?", "answers": ["t2"],
             "answer": "sit, stay and roll over"},
            {"id": "q2", "question": "What bike do I ride?", "answers": ["t3"],
             "answer": "a red Gazelle"},
        ],
    )  # fmt: skip
    # the same turn ids, other words: a turn id names a turn of its own conversation only
    second = _conversation(
        "b",
        [("Ann", "I moved to Porto in May."), ("Bob", "Porto is lovely.")],
        [{"id": "q1", "question": "Where did I move?", "answers": ["t1"], "answer": "Porto"}],
    )
    return [first, second]


def _read_back(conversations: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """The conversations written as a dataset file and read back, checked, as the harness reads
    one."""
    path = folder / "set.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in conversations), encoding="utf-8")
    return recall.read_dataset(path)


@pytest.mark.usefixtures("prefect_harness")
async def test_turns_mode_stores_whole_turns_of_each_conversation_and_counts_every_ranking(
    settings: Settings, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    conversations = _read_back(_small_set(), tmp_path)
    fake_llm.reset(recall.every_turn(conversations))
    llm = LLMSettings(model="openai/every-turn", api_base=fake_llm.api_base, api_key="x")
    result = await recall.evaluate(
        settings.model_copy(update={"llm": llm}),
        conversations,
        "turns",
        tmp_path,
        rankings={k: recall.RANKINGS[k] for k in ("importance", "text", "hybrid_snippets")},
    )
    # every turn a fact, the multi-line one whole and the long one as the pipeline cuts it
    assert result["facts"] == result["facts_mapped_to_turns"] == 6
    figures = {name: r["overall"] for name, r in result["rankings"].items()}
    # importance gives no scores; its facts still count, in their order (all fit in 20). The
    # long turn's fact stands for it but was cut before "a red Gazelle": it does not hold that
    assert figures["importance"]["message_recall@20"] == 1.0
    assert figures["importance"]["recall@20"] == figures["text"]["recall@5"] == 0.667
    # the sentence of that turn that says it is a snippet of its own, and holds it
    assert figures["hybrid_snippets"]["recall@5"] == 1.0, figures["hybrid_snippets"]
    assert "hybrid_snippets" in recall.table(result).splitlines()[-1]


@pytest.mark.usefixtures("prefect_harness")
async def test_the_oracle_adds_each_conversations_answers_to_that_conversation_only(
    settings: Settings, fake_llm: FakeLLM, tmp_path: Path, db: Any
) -> None:
    conversations = _read_back(_small_set(), tmp_path)
    fake_llm.reset(recall.oracle(conversations))
    llm = LLMSettings(model="openai/oracle", api_base=fake_llm.api_base, api_key="x")
    await recall.evaluate(
        settings.model_copy(update={"llm": llm}), conversations, "facts", tmp_path, {"d": {}}
    )
    rows = db.execute(
        "SELECT user_id, count(*) FROM agent_memory.memory_items GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert rows == [("a", 2), ("b", 1)]  # t2, t3 of a; t1 of b (not a's t1)


class _Snippet:
    def __init__(self, episode: int, position: int, content: str, score: float) -> None:
        self.episode_id, self.position, self.content, self.score = (
            episode, position, content, score)  # fmt: skip


class _Frame:
    def __init__(self, facts: list[tuple[int, str]], scores: list[float], snippets: Any) -> None:
        self.fact_ids = [f for f, _ in facts]
        self.injected_facts = [c for _, c in facts]
        self.scores = scores
        self.snippets = snippets


def test_a_snippet_counts_for_what_its_own_sentence_holds() -> None:
    [first, _] = _small_set()
    texts = {("a", t["id"]): t["text"] for t in first["sessions"][0]["turns"]}
    tricks = _score.Answer("a", first["questions"][0], texts)
    snippets = {(1, 1): ("a", "t2")}
    rain = _Snippet(1, 1, "It rained all day.", 0.9)
    sit = _Snippet(1, 1, "Anyway, your dog Rex can sit, stay and roll over!", 0.5)
    items = _score.injected(_Frame([], [], [rain, sit]), {}, snippets)
    # the sentence about the rain is of the answering message, but does not answer
    assert tricks.rank(items) == 2 and tricks.rank(items, whole_message=True) == 1
    # an answer its turn does not say in words is held by any sentence of the turn
    inferred = _score.Answer("a", {**first["questions"][0], "answer": "yes"}, texts)
    assert inferred.inferred and inferred.rank(items) == 1


def test_facts_and_snippets_merge_by_score_and_unscored_facts_keep_their_order() -> None:
    facts = {7: {("a", "t2")}, 8: {("a", "t4")}}
    snippet = _Snippet(1, 3, "Nice.", 0.6)
    scored = _score.injected(
        _Frame([(8, "Nice."), (7, "x")], [0.9, 0.1], [snippet]), facts, {(1, 3): ("a", "t4")}
    )
    assert [text for _, text in scored] == ["Nice.", "Nice.", "x"]
    unscored = _score.injected(_Frame([(7, "x"), (8, "Nice.")], [], []), facts, {})
    assert [turns for turns, _ in unscored] == [{("a", "t2")}, {("a", "t4")}]


def test_a_fact_is_stale_only_when_it_says_the_old_answer() -> None:
    texts = {("a", "t1"): "I work as a nurse at Mercy and I love hiking.",
             ("a", "t2"): "I just started as a pilot at Aerion."}  # fmt: skip
    question = {"answers": ["t2"], "answer": "pilot Aerion", "superseded": ["t1"]}
    old = _score.superseded("a", {**question, "superseded_answer": "nurse Mercy"}, texts)
    assert old is not None
    facts = {1: {("a", "t1")}, 2: {("a", "t1")}, 3: {("a", "t2")}}
    hiking = _Frame([(2, "User loves hiking."), (3, "User works as a pilot at Aerion.")], [], [])
    nurse = _Frame([(1, "User works as a nurse at Mercy.")], [], [])
    # another fact of the superseded message is no stale answer; the old job is
    assert not old.given(hiking, facts) and old.given(nurse, facts)
    # without the old answer's words, any fact of a superseded turn counts (an upper bound)
    coarse = _score.superseded("a", question, texts)
    assert coarse is not None and coarse.given(hiking, facts)
    assert _score.superseded("a", {"answers": ["t2"]}, texts) is None


def test_data_that_breaks_an_assumption_stops_the_run(tmp_path: Path) -> None:
    [first, second] = _small_set()
    path = tmp_path / "set.jsonl"
    cases = [
        ([first, {**second, "id": "a"}], "conversation id 'a' is used twice"),
        (  # its one turn has no text: skipped (tests/test_data_as_it_comes.py), none left
            [{**second, "sessions": [{**second["sessions"][0], "turns": [
                {"id": "t1", "speaker": "Ann", "text": "  "}]}]}],
            r"\(b\): no turns",
        ),
        ([{**second, "questions": [{**second["questions"][0], "answer": 3}]}], "answer 3"),
        (
            [{**second, "questions": [{**second["questions"][0], "superseded_answer": ["x"]}]}],
            r"superseded_answer \['x'\] is not a string",
        ),
    ]  # fmt: skip
    for conversations, message in cases:
        path.write_text("".join(json.dumps(c) + "\n" for c in conversations), encoding="utf-8")
        with pytest.raises(BackfillError, match=message):
            recall.read_dataset(path)


def test_a_figure_below_its_recorded_floor_fails_the_run(tmp_path: Path) -> None:
    floors = tmp_path / "floors.json"
    floors.write_text(
        json.dumps(
            {"turns": {"quick": {"hybrid": {"recall@10": 0.8, "mrr": 0.4}, "text": {"mrr": 0.3}}}}
        )
    )
    result: dict[str, Any] = {
        "rankings": {"hybrid": {"overall": {"recall@10": 0.8, "mrr": 0.39}}, "vector": {}}
    }
    # a figure at its floor passes; one below it, and a ranking the run lacks, are named
    assert recall.below_floors(result, "quick", floors) == [
        "hybrid mrr: 0.39 < 0.4",
        "text mrr: missing < 0.3",
    ]
    result["rankings"]["hybrid"]["overall"]["mrr"] = 0.41
    result["rankings"]["text"] = {"overall": {"mrr": 0.3}}
    assert recall.below_floors(result, "quick", floors) == []


def test_the_recorded_floors_name_rankings_and_metrics_the_harness_reports() -> None:
    recorded = json.loads(recall.FLOORS.read_text())["turns"]
    assert set(recorded) == {"quick", "full"}
    for size in recorded.values():
        assert "hybrid_snippets" in size  # the default inject
        for metrics in size.values():
            assert set(metrics) <= {"recall@5", "recall@10", "message_recall@10", "mrr"}
            assert all(0 < floor <= 1 for floor in metrics.values())
