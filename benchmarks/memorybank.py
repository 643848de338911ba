"""Convert MemoryBank's evaluation data (Zhong et al., 2023: ``eval_data`` of
zhongwanjun/MemoryBank-SiliconFriend, MIT licence) to the recall harness's JSON Lines format
(docs/evaluation.md): the same fifteen users' ten days of talk with an AI companion, in Chinese
and in English, turn for turn, each user with five to seven probing questions.

    python -m benchmarks.memorybank eval_data memorybank      # memorybank_cn.jsonl, _en.jsonl
    python -m benchmarks.recall --dataset memorybank_cn.jsonl --simple-reference

The dataset names no answering turn: ``benchmarks/data/memorybank_evidence.json`` does, one
list per question, labelled by reading each user's whole history before any run (never changed
after a figure was seen). A user is a conversation, a day a session (at 20:00, China's time),
an exchange two turns: the user's words (their name as speaker) and the companion's reply
("AI"). Questions are asked the day after the last session. A question whose answering turns a
language's file lacks (one English user has no talk on a day the Chinese has) is left out of
that language, and counted.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from agent_memory.errors import BackfillError

EVIDENCE = Path(__file__).parent / "data" / "memorybank_evidence.json"
LANGUAGES = ("cn", "en")
COMPANION = "AI"
CATEGORY = "probing"


def turn_id(day: int, index: int, side: str) -> str:
    """A turn's id: ``d3-1q`` for what the user said in the day's second exchange."""
    return f"d{day}-{index}{side}"


def _ref(ref: str) -> str:
    """An evidence reference (``3.1q``) as a turn id."""
    day, rest = ref.split(".")
    return turn_id(int(day), int(rest[:-1]), rest[-1])


def convert(
    number: int, name: str, user: dict[str, Any], questions: list[str], evidence: list[list[str]]
) -> tuple[dict[str, Any], int]:
    """One user as a conversation of the harness's format, and how many of their questions
    were left out for naming a turn this language's file lacks."""
    if len(questions) != len(evidence):
        raise BackfillError(
            f"MemoryBank user {name!r}: {len(questions)} questions but {len(evidence)} "
            "evidence lists"
        )
    cid = f"mb{number:02d}"
    speaker = name.strip()
    sessions = []
    ids: set[str] = set()
    days: list[date] = []
    for day, (when, exchanges) in enumerate(user["history"].items()):
        turns = []
        for index, exchange in enumerate(exchanges):
            for side, who, key in (("q", speaker, "query"), ("r", COMPANION, "response")):
                turns.append({"id": turn_id(day, index, side), "speaker": who,
                              "text": str(exchange[key])})  # fmt: skip
        if not turns:
            continue
        ids.update(t["id"] for t in turns)
        days.append(date.fromisoformat(when))
        sessions.append({"id": f"{cid}-{when}", "date": f"{when}T20:00:00+08:00", "turns": turns})
    if not sessions:
        raise BackfillError(f"MemoryBank user {name!r} has no history")
    asked = (max(days) + timedelta(days=1)).isoformat()
    kept = []
    dropped = 0
    for n, (question, refs) in enumerate(zip(questions, evidence, strict=True)):
        answers = [_ref(r) for r in refs]
        if not answers or any(a not in ids for a in answers):
            dropped += 1
            continue
        kept.append({"id": f"{cid}-q{n}", "question": question, "answers": answers,
                     "answer": "", "category": CATEGORY, "asked": asked})  # fmt: skip
    return {"id": cid, "user": speaker, "sessions": sessions, "questions": kept}, dropped


def read(source: Path, language: str) -> tuple[dict[str, Any], list[list[str]]]:
    """A language's users (by name, in the file's order) and their probing questions."""
    folder = source / language
    try:
        users = json.loads((folder / f"memory_bank_{language}.json").read_text(encoding="utf-8"))
        lines = (folder / f"probing_questions_{language}.jsonl").read_text(encoding="utf-8")
    except (OSError, json.JSONDecodeError) as exc:
        raise BackfillError(f"{folder}: not MemoryBank's eval_data ({exc})") from None
    rows = [json.loads(line) for line in lines.splitlines() if line.strip()]
    questions = [next(iter(row.values())) for row in rows]
    if len(questions) != len(users):
        raise BackfillError(f"{folder}: {len(users)} users but questions for {len(questions)}")
    return users, questions


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m benchmarks.memorybank", description=__doc__)
    cli.add_argument("source", type=Path, help="MemoryBank's eval_data folder (cn/, en/)")
    cli.add_argument("out", type=Path, help="the prefix of the files to write")
    args = cli.parse_args(argv)
    evidence = json.loads(EVIDENCE.read_text(encoding="utf-8"))["evidence"]
    try:
        for language in LANGUAGES:
            users, questions = read(args.source, language)
            if len(users) != len(evidence):
                raise BackfillError(f"{len(users)} users but evidence for {len(evidence)}")
            path = args.out.with_name(f"{args.out.name}_{language}.jsonl")
            kept = dropped = 0
            with path.open("w", encoding="utf-8") as out:
                for n, (name, user) in enumerate(users.items()):
                    conversation, lost = convert(n, name, user, questions[n], evidence[n])
                    kept += len(conversation["questions"])
                    dropped += lost
                    out.write(json.dumps(conversation, ensure_ascii=False) + "\n")
            print(f"{path}: {len(users)} conversations, {kept} questions ({dropped} left out: "
                  "their answering turns are not in this language's file)")  # fmt: skip
    except BackfillError as exc:
        print(f"benchmarks.memorybank: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
