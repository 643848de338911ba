"""The evaluation set written for agent-memory (docs/evaluation.md): ten people, each talking
with an assistant over dated sessions, and questions with the ids of the turns that answer.

It is built by :func:`conversations` from the tables in benchmarks/_recall_tables.py, the
same every time (a seeded generator picks fillers and dates), rather than kept as a data file.
Each person gets other values for the same kinds of fact, told in their own sessions among small
talk and the assistant's replies (which often repeat the fact's words, so full text alone finds
distractors). Questions come in four kinds:

* ``lexical``: shares words with its answer ("What is my dog called?");
* ``paraphrase``: shares no word (after stop words and stemming) with its answer; checked here;
* ``changed``: the fact changed in a later session; only the latest turn counts;
* ``temporal``: when something happened; the answer turn's session carries the date.

Every question is asked on the day after the person's last session.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks._recall_tables import (
    CHANGES,
    DOINGS,
    FEELINGS,
    KINDS,
    OTHERS,
    PEOPLE,
    REPLIES,
    SMALL_TALK,
    WHENS,
)

_STOP_WORDS = (
    "a an the and or but if of to in on at for with by from as is are was were be been am i "
    "me my we our you your it its this that these those do does did what which who when where "
    "how why is any anyone so up out about into over after before now lately soon every all "
    "have has had would could should will can get got getting made make there their them they "
    "he she his her here just than too very some"
)
_STOP = set(_STOP_WORDS.split())


def _stem(word: str) -> str:
    word = word.lower().strip("'’")
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    """The stems of a text's words, stop words left out (what "shares no word" is checked on)."""
    return {_stem(w) for w in re.findall(r"[\w']+", text.lower()) if w not in _STOP}


def _questions(kind: str) -> list[tuple[str, str]]:
    return KINDS[kind][1] if kind in KINDS else CHANGES[kind][2]


def _echo(statement: str) -> str:
    """The assistant repeating a statement back, in the second person."""
    text = re.sub(r"\bI'm\b", "you're", statement)
    text = re.sub(r"\bI've\b", "you've", text)
    text = re.sub(r"\bI\b", "you", text)
    text = re.sub(r"\b[Mm]y\b", "your", text)
    text = re.sub(r"\bWe\b", "you", text)
    return f"Got it, {text[0].lower()}{text[1:]}"


@dataclass
class _Turn:
    id: str
    speaker: str
    text: str


def _conversation(index: int, person: dict[str, str], rng: random.Random) -> dict[str, Any]:
    cid = f"c{index + 1:02d}"
    stories = _stories(person, rng)
    per_session = 3
    start = datetime(2025, 1, 6, 18, 30, tzinfo=UTC) + timedelta(days=3 * index)
    sessions: list[dict[str, Any]] = []
    said: dict[tuple[str, str], str] = {}  # (kind, part) -> turn id
    when = start
    for s, first in enumerate(range(0, len(stories), per_session)):
        sid = f"{cid}-s{s + 1:02d}"
        turns = _session(sid, person, stories[first : first + per_session], said, rng)
        sessions.append(
            {
                "id": sid,
                "date": when.isoformat(),
                "turns": [{"id": t.id, "speaker": t.speaker, "text": t.text} for t in turns],
            }
        )
        when += timedelta(days=rng.randint(6, 16), hours=rng.randint(-3, 3))
    last = datetime.fromisoformat(sessions[-1]["date"])
    return {
        "id": cid,
        "user": person["name"],
        "sessions": sessions,
        "questions": _asked(cid, person, said, asked=last.date() + timedelta(days=1)),
    }


def _stories(person: dict[str, str], rng: random.Random) -> list[tuple[str, str, str]]:
    """(kind, part, template) of each story, in the order they are told; a change's second
    half ("new") comes later than its first ("old"); "other" stories are about other people."""
    stories: list[tuple[str, str, str]] = [(k, "fact", KINDS[k][0]) for k in KINDS]
    rng.shuffle(stories)
    changes = list(CHANGES)
    for k in changes:  # the first half early, the second in the last third
        stories.insert(rng.randrange(0, len(stories) // 3 + 1), (k, "old", CHANGES[k][0]))
    for k in changes:
        stories.insert(
            rng.randrange(2 * len(stories) // 3, len(stories) + 1), (k, "new", CHANGES[k][1])
        )
    for k, template in OTHERS.items():
        stories.insert(rng.randrange(len(stories) + 1), (k, "other", template))
    return stories


def _session(
    sid: str,
    person: dict[str, str],
    told: list[tuple[str, str, str]],
    said: dict[tuple[str, str], str],
    rng: random.Random,
) -> list[_Turn]:
    """The turns of one session telling ``told`` among small talk; the id of the turn that
    tells each story's fact goes into ``said``."""
    name = person["name"]
    others = [p for p in PEOPLE if p is not person]
    turns: list[_Turn] = []

    def add(speaker: str, text: str) -> str:
        turn = _Turn(f"{sid}-t{len(turns) + 1:02d}", speaker, text)
        turns.append(turn)
        return turn.id

    add(name, rng.choice(["Hi!", "Hey, it's me again.", "Good evening!", "Hello there."]))
    add("Assistant", rng.choice(["Hi! Good to hear from you.", "Hello! How have you been?"]))
    for kind, part, template in told:
        for _ in range(rng.randint(1, 4)):
            chat = rng.choice(
                [
                    rng.choice(SMALL_TALK),
                    f"I {rng.choice(DOINGS)} {rng.choice(WHENS)}. {rng.choice(FEELINGS)}",
                ]
            ).strip()
            add(name, chat)
            add("Assistant", rng.choice(REPLIES))
        if part == "other":
            add(name, template.format(**rng.choice(others)))
            add("Assistant", rng.choice(REPLIES))
            continue
        statement = template.format(**person)
        said[(kind, part)] = add(name, _told(statement, kind, person, rng))
        # the reply echoes the fact's words: a distractor for full text
        add("Assistant", _echo(statement))
    add(name, rng.choice(["Thanks, talk soon.", "That's all for today.", "Bye for now!"]))
    return turns


def _told(statement: str, kind: str, person: dict[str, str], rng: random.Random) -> str:
    """The message that tells ``statement``: most of the time inside a longer one, as people
    talk (asides that share no word with the questions, so a paraphrase stays one)."""
    asked_words = set().union(*(content_words(q.format(**person)) for q, _ in _questions(kind)))
    asides = [t for t in SMALL_TALK if not content_words(t) & asked_words]
    aside, aside2 = rng.choice(asides), rng.choice(asides)
    return rng.choice(
        [statement, f"{aside} {statement}", f"{statement} {aside}", f"{aside} {statement} {aside2}"]
    )


def _asked(
    cid: str, person: dict[str, str], said: dict[tuple[str, str], str], *, asked: date
) -> list[dict[str, Any]]:
    """The questions of a conversation, each with the turn that answers it, asked on ``asked``;
    a paraphrase that shares a word with its statement, or a lexical question that shares
    none, is an error in the tables."""
    questions: list[dict[str, Any]] = []

    def ask(
        text: str, category: str, turn: str, said: str, superseded: tuple[str, str] | None = None
    ) -> None:
        questions.append(
            {
                "id": f"{cid}-q{len(questions) + 1:02d}",
                "question": text.format(**person),
                "answers": [turn],
                "answer": _answer(said, person),
                "category": category,
                "asked": asked.isoformat(),
                **(
                    {
                        "superseded": [superseded[0]],
                        "superseded_answer": _answer(superseded[1], person),
                    }
                    if superseded
                    else {}
                ),
            }
        )

    for kind, (statement, asks) in KINDS.items():
        for text, category in asks:
            shared = content_words(text.format(**person)) & content_words(
                statement.format(**person)
            )
            if category == "paraphrase" and shared:
                raise ValueError(f"paraphrase {text!r} shares {shared} with {statement!r}")
            if category == "lexical" and not shared:
                raise ValueError(f"lexical {text!r} shares no word with {statement!r}")
            ask(text, category, said[(kind, "fact")], statement)
    for kind, (before, now, asks) in CHANGES.items():
        for text, category in asks:
            # what the answer used to be: inject must not give it back as current
            old = (said[(kind, "old")], before) if category == "changed" else None
            ask(text, category, said[(kind, "new")], now, old)
    return questions


def _answer(statement: str, person: dict[str, str]) -> str:
    """What a question about a statement is answered with: the person's values the statement
    names ("border collie Pixel"), or the statement itself when it names none."""
    slots = [name for _, name, _, _ in string.Formatter().parse(statement) if name]
    return " ".join(person[name] for name in slots) or statement


def conversations(seed: int = 20261201) -> Iterator[dict[str, Any]]:
    """The set, one conversation (a line of the JSON Lines format) at a time."""
    rng = random.Random(seed)
    for index, person in enumerate(PEOPLE):
        yield _conversation(index, person, rng)


def write(path: Path) -> Path:
    """The set as a JSON Lines file (``python -m benchmarks.recall --write-dataset FILE``)."""
    with path.open("w", encoding="utf-8") as out:
        for conversation in conversations():
            out.write(json.dumps(conversation, ensure_ascii=False) + "\n")
    return path
