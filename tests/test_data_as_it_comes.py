"""Issue 53, item 1: the recall harness takes data as real exports hold it. A dataset with every
defect of the issue (empty and null turns, a session repeated within a conversation and across
conversations, a session id used twice, a session too long for one consolidation answer, a
turn of thousands of words, content parts with an image, characters a database cannot hold,
dates without a time zone) runs through the whole harness, on real PostgreSQL, the Prefect flow
and the loopback model: each defect is handled and counted in the run's summary, every turn that
has text becomes a fact, and what cannot be read is refused in one line before any setup."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_memory.settings import LLMSettings, Settings
from benchmarks import _recall_dataset, recall
from benchmarks._recall_prepare import MAX_SESSION_TURNS
from tests.fake_llm import FakeLLM
from tests.recall_runs import every_turn_settings

LONG_TURN = " ".join(f"word{n}" for n in range(3000)) + " My boat is called Tern."


def _turns(prefix: str, said: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{n}", "speaker": who, "text": text}
        for n, (who, text) in enumerate(said, start=1)
    ]


PORTO = [("Ann", "I moved to Porto in May."), ("Bob", "Porto is lovely.")]


def _dataset() -> list[dict[str, Any]]:
    a = {
        "id": "a",
        "user": "Ann",
        "sessions": [
            {"id": "a-s1", "date": "2025-03-01T10:00:00+00:00", "turns": _turns("p", PORTO)},
            # the same session again, as an export that repeats history does
            {"id": "a-s1", "date": "2025-03-01T10:00:00+00:00", "turns": _turns("r", PORTO)},
            {
                "id": "a-s2",
                "date": "2025-03-03T09:00:00",  # no time zone
                "turns": [
                    {"id": "e1", "speaker": "Ann", "text": "   "},
                    {"id": "e2", "speaker": "Bob", "text": None},
                    {
                        "id": "c1",
                        "speaker": "Ann",
                        "text": [
                            {"type": "text", "text": "My cat is called Miso."},
                            {
                                "type": "image_url",
                                "image_url": {"url": "data:image/png;base64,AAAA"},
                            },
                        ],
                    },
                    {"id": "n1", "speaker": "Bob", "text": "Miso\x00 is a fine\x07 name."},
                ],
            },
            {
                "id": "a-s3",
                "date": "2025-03-04",  # a bare day
                "turns": _turns("l", [("Ann", f"Note {n} about the garden.") for n in range(130)]),
            },
            {
                "id": "a-s4",
                "date": "2025-03-05T08:00:00Z",
                "turns": _turns("w", [("Ann", LONG_TURN), ("Bob", "That is a long story.")]),
            },
            # a session id used again, for other turns
            {
                "id": "a-s2",
                "date": "2025-03-06T08:00:00Z",
                "turns": _turns(
                    "u", [("Ann", "I started learning the cello."), ("Bob", "Good luck with it.")]
                ),
            },
            {
                "id": "a-s5",
                "date": "2025-03-07T08:00:00Z",
                "turns": [{"id": "x1", "speaker": "Ann", "text": ""}],
            },  # nothing but an empty turn
        ],
        "questions": [
            # names the repeated session's turn: the first session's is the answer
            {"id": "q1", "question": "Where did I move?", "answers": ["r1"]},
            {"id": "q2", "question": "What is my cat called?", "answers": ["c1"]},
            {"id": "q3", "question": "What did I note about the garden?", "answers": ["l120"]},
            {"id": "q4", "question": "What is my boat called?", "answers": ["w1"]},
            {"id": "q5", "question": "Which instrument am I learning?", "answers": ["u1"]},
            {"id": "q6", "question": "What did I say?", "answers": ["e1", "x1"]},  # no text
        ],
    }
    # three sessions of 100 short turns: in one batch's token budget, more turns (each a fact)
    # than one answer may write
    short = [
        {
            "id": f"s-s{n}",
            "date": f"2025-02-0{n}T10:00:00+00:00",
            "turns": _turns(
                f"k{n}-",
                [("Bob" if i % 2 else "Ann", f"ok {n}{i}") for i in range(100)],
            ),
        }
        for n in range(1, 4)
    ]
    a["sessions"] = [*a["sessions"], *short]
    # another person's memory holds the same session as a's first: kept in both
    b = {
        "id": "b",
        "user": "Ann",
        "sessions": [
            {"id": "b-s1", "date": "2025-04-01T10:00:00+00:00", "turns": _turns("t", PORTO)},
        ],
        "questions": [{"id": "q1", "question": "Where did I move?", "answers": ["t1"]}],
    }
    for c in (a, b):
        for q in c["questions"]:
            q.update(category="c", asked="2025-05-01", answer="")
    return [a, b]


def _write(conversations: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in conversations), encoding="utf-8")
    return path


def test_each_defect_is_handled_and_counted(tmp_path: Path) -> None:
    conversations, handled = _recall_dataset.load_dataset(
        _write(_dataset(), tmp_path / "set.jsonl")
    )
    assert {k: v for k, v in handled.items() if k != "said"} == {
        "empty_turns_skipped": 3,
        "empty_sessions_skipped": 1,
        "content_part_turns_joined": 1,
        "turns_cleaned": 1,
        "repeated_sessions_stored_once": 1,
        "session_ids_made_unique": 1,
        "long_sessions_split": 1,
        "dates_taken_as_utc": 2,
        "questions_without_evidence_dropped": 1,
    }
    assert handled["said"].startswith("3 turns with no text, skipped; 1 sessions left with no")
    a = conversations[0]
    turns = {t["id"]: t for s in a["sessions"] for t in s["turns"]}
    assert turns["c1"]["text"] == "My cat is called Miso.\n[image_url]"
    assert turns["n1"]["text"] == "Miso\ufffd is a fine name."
    assert [s["id"] for s in a["sessions"]] == [
        "a-s1", "a-s2", "a-s3", "a-s3#part2", "a-s4", "a-s2#2", "s-s1", "s-s2", "s-s3"]  # fmt: skip
    assert [len(s["turns"]) for s in a["sessions"]][2:4] == [MAX_SESSION_TURNS, 30]
    assert a["sessions"][1]["date"] == "2025-03-03T09:00:00+00:00"
    assert a["sessions"][2]["date"] == "2025-03-04T00:00:00+00:00"
    assert [q["answers"] for q in a["questions"]] == [["p1"], ["c1"], ["l120"], ["w1"], ["u1"]]
    # a dataset with none of these says so
    _, clean = _recall_dataset.load_dataset(None)
    assert clean["said"] == "nothing to handle"


def test_what_cannot_be_read_is_refused_in_one_line_before_any_setup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _dataset()
    bad[0]["sessions"][0]["date"] = "last Tuesday"
    path = _write(bad, tmp_path / "bad.jsonl")
    assert recall.main(["--dataset", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("benchmarks.recall: line 1 (a) sessions[0]: date 'last Tuesday' is not ISO 8601")


@pytest.mark.usefixtures("prefect_harness")
async def test_a_dataset_of_every_defect_runs_through_the_whole_harness(
    settings: Settings, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    conversations, handled = _recall_dataset.load_dataset(
        _write(_dataset(), tmp_path / "set.jsonl")
    )
    # the harness's own batch budget: the long turn's session is cut for its prompt
    result = await recall.evaluate(
        every_turn_settings(settings, fake_llm, conversations),
        conversations,
        "turns",
        tmp_path,
        rankings={k: recall.RANKINGS[k] for k in ("text", "hybrid_snippets")},
    )
    stored_turns = sum(len(s["turns"]) for c in conversations for s in c["sessions"])
    # a: s1, s2, s3 (split), s4, s2#2, three sessions of short turns; b: s1
    assert stored_turns == 2 + 2 + 130 + 2 + 2 + 3 * 100 + 2
    # every turn with text a fact of its own conversation, the long one as the pipeline cuts it
    assert result["facts"] == result["facts_mapped_to_turns"] == stored_turns
    assert result["sessions"] == 10 and result["sessions_already_there"] == 0
    assert result["questions"] == 6
    hybrid = result["rankings"]["hybrid_snippets"]["overall"]
    assert hybrid["questions"] == 6 and hybrid["recall@10"] > 0.5, hybrid
    result["dataset"] = handled
    assert "data as it came: 3 turns with no text, skipped" in recall.table(result)


def test_a_message_of_tool_calls_alone_is_said_as_the_tools_called() -> None:
    from agent_memory.messages import role_and_text

    openai = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ],
    }
    langchain = {"role": "assistant", "content": "", "tool_calls": [{"name": "search", "args": {}}]}
    assert role_and_text(openai) == ("assistant", "[called tools: get_weather]")
    assert role_and_text(langchain) == ("assistant", "[called tools: search]")
    assert role_and_text({"role": "user", "content": None}) == ("user", "")
    images = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    assert role_and_text(images) == ("user", "")


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("DATABASE_URL", database_url)
    return database_url


def test_backfill_import_counts_what_says_nothing_and_what_is_there_already(
    cli_env: str, db: Any, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from agent_memory_deployments.cli import app

    record = {
        "user_id": "ann",
        "agent_id": "eval",
        "occurred_at": "2025-03-01T10:00:00Z",
        "messages": [
            {"role": "user", "content": "I moved to Porto in May."},
            {"role": "assistant", "content": "   "},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "note", "arguments": ""}}]},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
        ],
    }  # fmt: skip
    path = tmp_path / "export.jsonl"
    # the same conversation twice, as an export that repeats history has it
    path.write_text((json.dumps(record) + "\n") * 2, encoding="utf-8")
    result = CliRunner().invoke(app, ["backfill", "import", str(path)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert (
        "2 conversation(s) read: 1 imported, 1 already there, 0 bad line(s) skipped;"
        " 4 message(s) with no text, kept in their conversations"
    ) in said
    rows = db.execute("SELECT message_count FROM agent_memory.episodes").fetchall()
    assert rows == [(4,)]  # stored whole, once


@pytest.mark.usefixtures("prefect_harness")
async def test_a_prompt_the_loopback_model_cannot_place_fails_the_run_saying_why(
    settings: Settings, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    conversations, _ = _recall_dataset.load_dataset(_write(_dataset()[1:], tmp_path / "b.jsonl"))
    other = [{**conversations[0], "sessions": [{**conversations[0]["sessions"][0], "turns": [
        {"id": "t1", "speaker": "Ann", "text": "Something else entirely."}]}]}]  # fmt: skip
    fake_llm.reset(recall.every_turn(other))  # a model that knows another dataset
    llm = LLMSettings(model="openai/every-turn", api_base=fake_llm.api_base, api_key="x")
    with pytest.raises(RuntimeError) as failed:
        await recall.evaluate(
            settings.model_copy(update={"llm": llm}),
            conversations,
            "turns",
            tmp_path,
            rankings={"text": recall.RANKINGS["text"]},
        )
    assert (
        "the loopback model failed: ValueError: episode 1 of a prompt is no session of the"
        " dataset (it starts 'I moved ')"
    ) in str(failed.value)
