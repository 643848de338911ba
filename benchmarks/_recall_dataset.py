"""The dataset of the recall benchmark (benchmarks/recall.py; the format is in
docs/evaluation.md): conversations read from JSON Lines (or the built-in set,
benchmarks/recall_set.py) and checked, and their sessions written in the backfill import's
format."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from datetime import date, datetime
from pathlib import Path
from typing import Any

from agent_memory.errors import BackfillError
from benchmarks import recall_set
from benchmarks._recall_prepare import prepare, summary

AGENT = "eval"  # the agent of every conversation's scope


def _need(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise BackfillError(f"{where}: missing {key!r}")
    if not isinstance(obj[key], kind):
        raise BackfillError(f"{where}: {key!r} is {type(obj[key]).__name__}, not {kind}")
    return obj[key]


def check(conversation: Any, line: int) -> dict[str, Any]:
    """A conversation line as the format says, or an error naming the line and the field."""
    where = f"line {line}"
    cid = _need(conversation, "id", str, where)
    sessions = _need(conversation, "sessions", list, where)
    turn_ids: set[str] = set()
    speakers: list[str] = []
    for s, session in enumerate(sessions):
        at = f"{where} ({cid}) sessions[{s}]"
        _need(session, "id", str, at)
        when = _need(session, "date", str, at)
        try:
            moment = datetime.fromisoformat(when)
        except ValueError:
            raise BackfillError(f"{at}: date {when!r} is not ISO 8601") from None
        if moment.tzinfo is None:
            raise BackfillError(f"{at}: date {when!r} has no time zone")
        for t, turn in enumerate(_need(session, "turns", list, at)):
            tid = _need(turn, "id", str, f"{at} turns[{t}]")
            speakers.append(_need(turn, "speaker", str, f"{at} turns[{t}]"))
            # prepare() skips a turn with no text: one that reaches here was not prepared
            if not _need(turn, "text", str, f"{at} turns[{t}]").strip():
                raise BackfillError(f"{at} turns[{t}]: turn {tid!r} has no text")
            if tid in turn_ids:
                raise BackfillError(f"{at} turns[{t}]: turn id {tid!r} is used twice")
            turn_ids.add(tid)
    if not speakers:
        raise BackfillError(f"{where} ({cid}): no turns")
    user = conversation.get("user") or speakers[0]
    for q, question in enumerate(_need(conversation, "questions", list, where)):
        at = f"{where} ({cid}) questions[{q}]"
        _need(question, "id", str, at)
        _need(question, "question", str, at)
        answers = _need(question, "answers", list, at)
        unknown = [a for a in answers if a not in turn_ids]
        if not answers or unknown:
            raise BackfillError(f"{at}: answers {answers!r} name no turn of {cid}: {unknown}")
        _need(question, "category", str, at)
        for field in ("answer", "superseded_answer"):
            if not isinstance(question.get(field, ""), str):
                raise BackfillError(f"{at}: {field} {question[field]!r} is not a string")
        stale = question.get("superseded", [])
        if not isinstance(stale, list) or any(s not in turn_ids for s in stale):
            raise BackfillError(f"{at}: superseded {stale!r} names no turn of {cid}")
        try:
            date.fromisoformat(_need(question, "asked", str, at)[:10])
        except ValueError:
            raise BackfillError(f"{at}: asked {question['asked']!r} is not a date") from None
    return {**conversation, "user": user}


def read_dataset(path: Path | None) -> list[dict[str, Any]]:
    """The conversations of a JSON Lines file (or the built-in set), checked."""
    return load_dataset(path)[0]


def load_dataset(path: Path | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The conversations of a JSON Lines file (or the built-in set), as the harness measures
    them (:mod:`benchmarks._recall_prepare`: data as it comes) and checked, with what was
    handled and how often; a line that cannot be read is refused, naming it."""
    lines: Iterable[tuple[int, Any]]
    if path is None:
        lines = enumerate(recall_set.conversations(), start=1)
    else:
        with path.open(encoding="utf-8") as f:
            raw = [(n, line) for n, line in enumerate(f, start=1) if line.strip()]
        parsed = []
        for n, line in raw:
            try:
                parsed.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise BackfillError(f"{path} line {n}: not JSON ({exc})") from None
        lines = parsed
    counts: Counter[str] = Counter()
    conversations = [check(prepare(conversation, counts), n) for n, conversation in lines]
    seen: set[str] = set()
    for conversation in conversations:
        # a conversation is a scope: two of one id would be scored as one
        if conversation["id"] in seen:
            raise BackfillError(f"conversation id {conversation['id']!r} is used twice")
        seen.add(conversation["id"])
    return conversations, summary(counts)


def episodes_jsonl(conversations: list[dict[str, Any]], path: Path) -> Path:
    """The sessions in the backfill import's format: one episode each, the turn ids kept."""
    with path.open("w", encoding="utf-8") as out:
        for c in conversations:
            for session in c["sessions"]:
                turns = session["turns"]
                record = {
                    "user_id": c["id"],
                    "agent_id": AGENT,
                    "occurred_at": session["date"],
                    "id": session["id"],
                    "messages": [
                        {
                            "role": "user" if t["speaker"] == c["user"] else "assistant",
                            "content": t["text"],
                            # who said it, as a chat application names a message's author
                            "name": t["speaker"],
                        }
                        for t in turns
                    ],
                    "metadata": {"turn_ids": [t["id"] for t in turns]},
                }
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path
