"""Convert LoCoMo (Maharana et al., 2024: ``data/locomo10.json`` of snap-research/LoCoMo) to the
recall harness's JSON Lines format (docs/evaluation.md), so that the real multi-session
conversations issue 12 was measured on run through ``python -m benchmarks.recall`` unchanged.

    python -m benchmarks.locomo locomo10.json locomo.jsonl
    python -m benchmarks.recall --dataset locomo.jsonl

The data is not shipped (its licence is CC BY-NC 4.0); bring your own copy. Each conversation
keeps its sessions, dates and turn ids (``D3:12``); a shared photo's caption is kept after the
turn's words, as the dataset's own baselines read it. Its questions are asked the day after the
conversation's last session, with the categories named as the dataset's paper names them.
Adversarial questions (category 5) are left out: they have no answer in the conversation, so
recall says nothing of them. So is any question whose evidence names no turn of its
conversation (a handful are malformed in the published file); the count is printed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent_memory.errors import BackfillError

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_TURN = re.compile(r"D\d+:\d+")
_SESSION = re.compile(r"session_(\d+)")


def session_date(text: str) -> datetime:
    """A LoCoMo session time ("1:56 pm on 8 May, 2023") as a UTC moment."""
    try:
        moment = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    except ValueError:
        raise BackfillError(f"session date {text!r} is not like '1:56 pm on 8 May, 2023'") from None
    return moment.replace(tzinfo=UTC)


def _turn_text(turn: dict[str, Any]) -> str:
    caption = turn.get("blip_caption")
    text = str(turn.get("text", ""))
    return f"{text} [shares {caption}]" if caption else text


def convert(sample: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """One LoCoMo sample as a conversation of the harness's format, and how many of its
    answerable questions were dropped for naming no turn."""
    cid = str(sample.get("sample_id") or "locomo")
    talk = sample["conversation"]
    numbers = sorted(
        int(m.group(1)) for key in talk if (m := _SESSION.fullmatch(key)) and talk[key]
    )
    sessions: list[dict[str, Any]] = []
    turn_ids: set[str] = set()
    moments: list[datetime] = []
    for n in numbers:
        when = session_date(talk[f"session_{n}_date_time"])
        turns = [
            {"id": t["dia_id"], "speaker": t["speaker"], "text": _turn_text(t)}
            for t in talk[f"session_{n}"]
        ]
        turn_ids.update(t["id"] for t in turns)
        moments.append(when)
        sessions.append({"id": f"{cid}-s{n:02d}", "date": when.isoformat(), "turns": turns})
    if not sessions:
        raise BackfillError(f"LoCoMo sample {cid!r} has no sessions")
    asked = (max(moments) + timedelta(days=1)).date()
    questions = []
    dropped = 0
    for i, qa in enumerate(sample.get("qa", [])):
        category = CATEGORIES.get(qa.get("category"))
        if category is None:
            continue
        answers = sorted(
            {t for e in qa.get("evidence", []) for t in _TURN.findall(str(e)) if t in turn_ids}
        )
        if not answers:
            dropped += 1
            continue
        questions.append(
            {
                "id": f"{cid}-q{i:04d}",
                "question": str(qa["question"]),
                "answers": answers,
                # what the harness's sentence-level credit looks for (a number in a few)
                "answer": str(qa.get("answer", "")),
                "category": category,
                "asked": asked.isoformat(),
            }
        )
    first = str(talk.get("speaker_a") or sessions[0]["turns"][0]["speaker"])
    return {"id": cid, "user": first, "sessions": sessions, "questions": questions}, dropped


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m benchmarks.locomo", description=__doc__)
    cli.add_argument("source", type=Path, help="LoCoMo's locomo10.json")
    cli.add_argument("out", type=Path, help="the JSON Lines file to write")
    args = cli.parse_args(argv)
    try:
        samples = json.loads(args.source.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"{args.source}: not a LoCoMo JSON file ({exc})") from None
    if not isinstance(samples, list):
        raise SystemExit(f"{args.source}: a list of LoCoMo samples was expected")
    dropped = 0
    questions = 0
    with args.out.open("w", encoding="utf-8") as out:
        for sample in samples:
            conversation, lost = convert(sample)
            dropped += lost
            questions += len(conversation["questions"])
            out.write(json.dumps(conversation, ensure_ascii=False) + "\n")
    print(
        f"{args.out}: {len(samples)} conversations, {questions} questions "
        f"({dropped} dropped: their evidence names no turn)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
