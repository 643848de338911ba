"""python -m benchmarks.ablations [--dataset FILE] [--quick] [--out FILE]

Rankings that use what conversations carry (issue 53, item 3), each an ablation of the
facts-only hybrid ranking, so one run says what each adds on a dataset. The data goes through
the recall harness's real paths in turns mode (every turn a fact: ``python -m
benchmarks.recall --mode turns``), and every column is the same questions asked on the same
memory:

* ``default`` - the default inject (facts and past messages), for reference;
* ``hybrid`` - the facts-only hybrid ranking, the base each column below changes one thing of;
* ``context`` - a turn scored with its session's context: ``s + 1/2 * max(s(previous turn),
  s(next turn))``, so a turn that answers (``Sit, stay, paw and rollover``) is found by the
  question before it that holds the question's words;
* ``speakers`` - the people a question names matched to speakers: a turn by someone else has
  its score halved when the question names a speaker, or says "I", "me" or "my" (the user);
* ``feedback`` - pseudo-relevance feedback: a second inject with the question followed by the
  first one's three best facts, ``s1 + 1/2 * s2``;
* ``dates`` - relative dates resolved against the session's date and written after them
  ("yesterday (7 May 2023)", by :func:`resolved`), the dataset rewritten before it is stored: a
  run of its own, its hybrid ranking; ``dates_default`` its default inject;
* ``context_speakers`` - those two together, and ``all`` - with feedback too.

Each is scored from one inject's facts with their scores: every fused match of the question
(``inject_limit`` raised to twice ``inject_candidates``, which leaves the ranking as it is),
re-scored, the best 20 kept. The weights (1/2) and the three feedback facts were set before any
run and are not fitted: a column says whether the idea pays at a plain setting, not how far it
could be tuned on the data that measures it. What a column does not show: the CPU of doing it in
the product (feedback is a second ranking; context reads each candidate's neighbours).
"""

from __future__ import annotations

import re
import sys
import time
from calendar import month_name
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from agent_memory import token_estimate
from agent_memory.errors import BackfillError
from agent_memory.settings import MemorySettings, Settings
from benchmarks._common import emit, parser, prefect_server
from benchmarks._recall_dataset import AGENT, load_dataset
from benchmarks._recall_llm import attributed
from benchmarks._recall_score import KS, Answer, Item, Turn, injected, summarise, turn_texts
from benchmarks.recall import RANKINGS, measure

# the weight of what a column adds, and the facts feedback reads: set before any run
WEIGHT = 0.5
FEEDBACK_FACTS = 3
TOP = max(KS)

COLUMNS = ("default", "hybrid", "context", "speakers", "context_speakers", "feedback", "all")

# ---- relative dates ---------------------------------------------------------------------------

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2,
}  # fmt: skip
_UNITS = "day|week|month|year"
_RELATIVE = re.compile(
    r"\b(?:(?P<day>yesterday|today|tonight|tomorrow|last night|this morning|this afternoon"
    r"|this evening)"
    rf"|(?P<dir>last|next|this) (?P<what>week(?:end)?|month|year|{'|'.join(_WEEKDAYS)})"
    rf"|(?P<n>\d+|{'|'.join(sorted(_NUMBERS, key=len, reverse=True))}) "
    rf"(?P<unit>{_UNITS})s? ago)\b",
    re.I,
)


def _day(d: date) -> str:
    return f"{d.day} {month_name[d.month]} {d.year}"


def _month(d: date, months: int) -> date:
    index = d.year * 12 + d.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _when(match: re.Match[str], on: date) -> str:
    """What one relative phrase said on ``on`` means, in words."""
    if match["day"]:
        said = match["day"].lower()
        shift = {"yesterday": -1, "last night": -1, "tomorrow": 1}.get(said, 0)
        return _day(on + timedelta(days=shift))
    if match["dir"]:
        way = {"last": -1, "next": 1, "this": 0}[match["dir"].lower()]
        what = match["what"].lower()
        if what in _WEEKDAYS:
            gap = (_WEEKDAYS.index(what) - on.weekday()) % 7
            if way < 0:
                gap = gap - 7 if gap else -7
            elif way > 0 and not gap:
                gap = 7
            return _day(on + timedelta(days=gap))
        if what == "week":
            monday = on - timedelta(days=on.weekday()) + timedelta(weeks=way)
            return f"the week of {_day(monday)}"
        if what == "weekend":
            saturday = on + timedelta(days=(5 - on.weekday()) % 7)  # this weekend's
            if way < 0:
                saturday -= timedelta(weeks=1)
            elif way > 0:
                saturday += timedelta(weeks=1)
            return f"the weekend of {_day(saturday)}"
        if what == "month":
            d = _month(on, way)
            return f"{month_name[d.month]} {d.year}"
        return str(on.year + way)
    n = int(match["n"]) if match["n"].isdigit() else _NUMBERS[match["n"].lower()]
    unit = match["unit"].lower()
    if unit == "day":
        return _day(on - timedelta(days=n))
    if unit == "week":
        return f"the week of {_day(on - timedelta(weeks=n))}"
    if unit == "month":
        d = _month(on, -n)
        return f"{month_name[d.month]} {d.year}"
    return str(on.year - n)


def resolved(text: str, on: date) -> str:
    """``text`` said on ``on`` with each relative date it holds followed by what it means:
    "I went yesterday" on 8 May 2023 is "I went yesterday (7 May 2023)"."""
    return _RELATIVE.sub(lambda m: f"{m[0]} ({_when(m, on)})", text)


def with_dates(conversations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversations with every turn's relative dates resolved against its session's day."""
    out = []
    for c in conversations:
        sessions = []
        for s in c["sessions"]:
            on = datetime.fromisoformat(s["date"]).date()
            turns = [{**t, "text": resolved(t["text"], on)} for t in s["turns"]]
            sessions.append({**s, "turns": turns})
        out.append({**c, "sessions": sessions})
    return out


# ---- the re-scorings ----------------------------------------------------------------------------

_FIRST_PERSON = re.compile(r"\b(?:I|[Mm]e|[Mm]y|[Mm]ine|[Mm]yself)\b")


class Conversation:
    """One conversation's turns as memory holds them: each turn's fact, speaker and
    neighbours in its session."""

    def __init__(self, c: dict[str, Any], facts: dict[int, set[Turn]]) -> None:
        self.user = c["user"]
        self.speaker: dict[Turn, str] = {}
        self.neighbours: dict[Turn, list[Turn]] = {}
        self.text: dict[Turn, str] = {}
        for s in c["sessions"]:
            keys = [(c["id"], t["id"]) for t in s["turns"]]
            for i, t in enumerate(s["turns"]):
                key = keys[i]
                self.speaker[key] = t["speaker"]
                self.text[key] = " ".join(attributed(t).split())
                self.neighbours[key] = keys[max(0, i - 1) : i] + keys[i + 1 : i + 2]
        self.speakers = set(self.speaker.values())
        self.fact_of: dict[Turn, int] = {}
        for fact_id, turns in facts.items():
            for turn in turns:
                if turn in self.speaker:
                    self.fact_of[turn] = fact_id
        self.turns_of = {f: {t for t in ts if t in self.speaker} for f, ts in facts.items()}

    def said(self, fact_id: int) -> str:
        """A fact's text: its turn attributed ("Speaker: text"), "" for a fact of no turn."""
        return next((self.text[t] for t in self.turns_of.get(fact_id, ())), "")

    def named(self, question: str) -> set[str]:
        """The speakers ``question`` names: by name, or the user by "I", "me" or "my"."""
        names = {s for s in self.speakers if re.search(rf"\b{re.escape(s)}\b", question, re.I)}
        if _FIRST_PERSON.search(question):
            names.add(self.user)
        return names


Scores = dict[int, float]  # fact id: score


def _scores(frame: Any) -> Scores:
    return dict(zip(frame.fact_ids, frame.scores, strict=True))


def in_context(conv: Conversation, s: Scores) -> Scores:
    """Each fact scored with its turn's neighbours in the session (see the module), the
    neighbours of the pool's facts included: their context may speak for them."""

    def near(fact_id: int) -> set[int]:
        turns = conv.turns_of.get(fact_id, set())
        found = {conv.fact_of.get(o) for t in turns for o in conv.neighbours[t]}
        return {f for f in found if f is not None and f != fact_id}

    candidates = set(s).union(*(near(f) for f in s))
    return {
        f: s.get(f, 0.0) + WEIGHT * max((s.get(n, 0.0) for n in near(f)), default=0.0)
        for f in candidates
    }


def by_speakers(conv: Conversation, s: Scores, named: set[str]) -> Scores:
    """Facts by a speaker the question does not name, halved (when it names any)."""
    if not named:
        return s
    return {
        f: v if any(conv.speaker[t] in named for t in conv.turns_of.get(f, ())) else v * WEIGHT
        for f, v in s.items()
    }


def with_feedback(first: Scores, second: Scores) -> Scores:
    """The first ranking plus half the feedback ranking's."""
    return {f: first.get(f, 0.0) + WEIGHT * second.get(f, 0.0) for f in first.keys() | second}


def _items(conv: Conversation, s: Scores, facts: dict[int, set[Turn]]) -> list[Item]:
    best = sorted((f for f, v in s.items() if v > 0), key=lambda f: (-s[f], f))[:TOP]
    out: list[Item] = []
    for f in best:
        out.append((facts.get(f, set()), conv.said(f)))
    return out


def _row(q: dict[str, Any], answer: Answer, items: list[Item], ms: float) -> dict[str, Any]:
    return {
        "category": q["category"],
        "rank": answer.rank(items),
        "message_rank": answer.rank(items, whole_message=True),
        "inferred": answer.inferred,
        "stale": None,
        "dated": None,
        "ms": ms,
        "tokens": sum(token_estimate.tokens(text) for _, text in items[:10]),
    }


async def ask_ablations(
    settings: Settings,
    conversations: list[dict[str, Any]],
    facts: dict[int, set[Turn]],
    snippets: dict[tuple[int, int], Turn],
    rankings: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Every question asked once by the default inject and once (twice, with feedback) by
    the facts-only hybrid over every fused match, each column scored from those (``rankings``
    is not read: the columns are this module's)."""
    from agent_memory.manager import MemoryManager
    from agent_memory.models import Scope

    def manager(overrides: dict[str, Any], pool: int | None = None) -> Any:
        memory = MemorySettings(
            **{**settings.memory.model_dump(), "inject_min_importance": 0.0, **overrides}
        )
        if pool is not None:
            # more facts than candidates, which the settings refuse (the ranking would inject
            # fewer than asked): here, every fused match of the two rankings is what is asked
            memory = memory.model_copy(update={"inject_limit": pool})
        return MemoryManager.create(
            settings=settings.model_copy(update={"memory": memory}), migrate=False
        )

    m = settings.memory
    default = await manager({**RANKINGS["hybrid_snippets"], "inject_limit": TOP})
    pool = await manager(RANKINGS["hybrid"], 2 * m.inject_candidates)
    texts = turn_texts(conversations)
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in COLUMNS}
    try:
        for c in conversations:
            conv = Conversation(c, facts)
            scope = Scope(c["id"], AGENT)
            for q in c["questions"]:
                answer = Answer(c["id"], q, texts)
                on = date.fromisoformat(q["asked"][:10])
                started = time.perf_counter()
                frame = await default.inject(scope, query=q["question"], on=on)
                ms = (time.perf_counter() - started) * 1000
                rows["default"].append(_row(q, answer, injected(frame, facts, snippets), ms))
                started = time.perf_counter()
                first = _scores(await pool.inject(scope, query=q["question"], on=on))
                ms = (time.perf_counter() - started) * 1000
                best = sorted(first, key=lambda f: (-first[f], f))[:FEEDBACK_FACTS]
                # the feedback is what was said, without who said it
                said = (conv.said(f).split(": ", 1)[-1] for f in best)
                expanded = " ".join([q["question"], *said])
                started = time.perf_counter()
                second = _scores(await pool.inject(scope, query=expanded, on=on))
                feedback_ms = ms + (time.perf_counter() - started) * 1000
                named = conv.named(q["question"])
                scored: dict[str, tuple[Scores, float]] = {
                    "hybrid": (first, ms),
                    "context": (in_context(conv, first), ms),
                    "speakers": (by_speakers(conv, first, named), ms),
                    "context_speakers": (by_speakers(conv, in_context(conv, first), named), ms),
                    "feedback": (with_feedback(first, second), feedback_ms),
                    "all": (
                        by_speakers(conv, in_context(conv, with_feedback(first, second)), named),
                        feedback_ms,
                    ),
                }
                for column, (s, took) in scored.items():
                    rows[column].append(_row(q, answer, _items(conv, s, facts), took))
    finally:
        await default.close()
        await pool.close()
    return {column: summarise(r) for column, r in rows.items()}


# ---- the run ------------------------------------------------------------------------------------


def run(conversations: list[dict[str, Any]]) -> dict[str, Any]:
    """Both runs (the data as it is, and with its relative dates resolved), one table."""
    with prefect_server():
        plain = measure(conversations, ask=ask_ablations)
        dated = measure(with_dates(conversations), ask=ask_ablations)
    columns = dict(plain["rankings"])
    columns["dates"] = dated["rankings"]["hybrid"]
    columns["dates_default"] = dated["rankings"]["default"]
    return {**plain, "rankings": columns, "weight": WEIGHT, "feedback_facts": FEEDBACK_FACTS}


def main(argv: list[str] | None = None) -> int:
    from benchmarks._recall_score import table

    cli = parser("ablations", __doc__, quick="the first two conversations")
    cli.add_argument("--dataset", type=Path, help="JSON Lines (default: the built-in set)")
    cli.add_argument("--out", type=Path, help="also write the JSON here")
    args = cli.parse_args(argv)
    try:
        conversations, handled = load_dataset(args.dataset)
    except BackfillError as exc:
        print(f"benchmarks.ablations: {exc}", file=sys.stderr)
        return 2
    if args.quick:
        conversations = conversations[:2]
    result = run(conversations)
    result["dataset"] = handled
    print(table(result) + "\n")
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
