"""The offline extractor: deterministic rules, no model, no network.

It reads what the *user* said, sentence by sentence, and keeps first-person statements about
themselves ("I'm a ...", "I prefer ...", "we use ...", "my ... keeps timing out"), rewritten in
the third person. It is far less clever than a model, but the same input always gives the same
facts, so the whole pipeline runs and can be tested with no LLM configured.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import UTC, date

from agent_memory.extraction.base import Extraction, Usage
from agent_memory.extraction.parse import MAX_FACT_CHARS
from agent_memory.messages import role_and_text
from agent_memory.models import Episode, Fact, FactKind, KnownFact, Operation

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+|;\s*|,?\s+and\s+(?=(?:I|we|my|our)\b)", re.I)
_GREETING = re.compile(
    r"^(?:(?:hi|hello|hey|thanks|thank you|ok|okay)\b[\s!,.]*|(?:\w+ ){0,2}\w+:\s+)", re.I
)

# (pattern, template, importance, kind). Templates use the named groups; order matters. The
# kind is what such a statement usually is; _kind_of corrects it by what the sentence says.
_RULES: list[tuple[re.Pattern[str], str, float, FactKind]] = [
    (re.compile(r"^(?:I'?m|I am) (?P<x>(?:an?|the) .+)$", re.I), "User is {x}", 0.9, "identity"),
    (
        re.compile(r"^(?:I|we) (?:prefer|like|love|enjoy) (?P<x>.+)$", re.I),
        "User prefers {x}",
        0.8,
        "preference",
    ),
    (
        re.compile(r"^(?:I|we) (?:hate|dislike|don'?t like|avoid) (?P<x>.+)$", re.I),
        "User dislikes {x}",
        0.75,
        "preference",
    ),
    (
        re.compile(r"^(?:I'?m|we'?re|I am|we are) (?:using|running|on) (?P<x>.+)$", re.I),
        "User uses {x}",
        0.75,
        "situation",
    ),
    (
        re.compile(r"^(?:I|we) (?:use|run|deploy on|work with) (?P<x>.+)$", re.I),
        "User uses {x}",
        0.75,
        "situation",
    ),
    (
        re.compile(
            r"^(?:I|we) (?:work|am working|are working) (?P<x>(?:at|for|on|in|as) .+)$", re.I
        ),
        "User works {x}",
        0.8,
        "identity",
    ),
    (
        re.compile(r"^(?:I'?m|I am|we'?re|we are) working (?P<x>(?:at|for|on|in) .+)$", re.I),
        "User is working {x}",
        0.8,
        "situation",
    ),
    (
        re.compile(r"^(?:I'?m|I am) (?P<x>(?:based|located|from|living) .+)$", re.I),
        "User is {x}",
        0.6,
        "identity",
    ),
    (
        re.compile(r"^(?:my|our) (?P<k>[\w\s-]{1,40}?) (?P<v>is|are) (?P<x>.+)$", re.I),
        "User's {k} {v} {x}",
        0.7,
        "identity",
    ),
    (
        re.compile(
            r"^(?:my|our) (?P<x>.+ (?:keeps|kept|is|are) (?:failing|timing out|crashing|"
            r"slow|broken|down).*)$",
            re.I,
        ),
        "User reported that their {x}",
        0.7,
        "situation",
    ),
    (
        re.compile(r"^(?:please )?(?:always )?(?P<x>(?:send|email|reply|contact|call) .+)$", re.I),
        "User asked: {x}",
        0.6,
        "preference",
    ),
    (
        re.compile(
            r"^(?:I|we) (?:just |recently |finally )?(?:started|began|got|landed|took|accepted) "
            r"(?:a |my |the )?new (?:role|job|position) (?P<x>(?:as|at) .+)$",
            re.I,
        ),
        "User works {x}",
        0.8,
        "identity",
    ),
    (
        re.compile(
            r"^(?:I|we)(?: have|'ve)? (?:just |recently |finally )?(?:moved|relocated) to "
            r"(?P<x>[^,]+?)(?:\s+(?:last|this) (?:week|month|year|weekend)|\s+\w+ ago|"
            r"\s+yesterday)?(?:,.*)?$",
            re.I,
        ),
        "User lives in {x}",
        0.8,
        "identity",
    ),
    (
        re.compile(r"^(?:I|we) (?P<v>live|rent|own|share) (?P<x>.+)$", re.I),
        "User {v}s {x}",
        0.8,
        "identity",
    ),
    (
        re.compile(
            r"^(?:I|we) (?:just )?(?P<v>went|visited|attended|saw|met|finished|adopted|bought|"
            r"ran|won|graduated|celebrated) (?P<x>[^,]+)(?:,.*)?$",
            re.I,
        ),
        "User {v} {x}",
        0.6,
        "event",
    ),
    (
        re.compile(r"^(?:I|we) (?:need|want|plan|am planning|are planning) to (?P<x>.+)$", re.I),
        "User wants to {x}",
        0.6,
        "plan",
    ),
]

_PRONOUNS = [
    (re.compile(r"\bI'm\b"), "they are"),
    (re.compile(r"\bI am\b"), "they are"),
    (re.compile(r"\bI\b"), "they"),
    (re.compile(r"\bmy\b", re.I), "their"),
    (re.compile(r"\bme\b", re.I), "them"),
    (re.compile(r"\bmine\b", re.I), "theirs"),
]


# "you" in what the user says is the other party (the assistant, a friend in a chat): the rules
# cannot rewrite it without knowing who that is, so such a statement is not kept as a fact
# ("User prefers that you chose pottery for your art." says nothing true about the user).
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|yourselves|ya|u)\b", re.I)


# An object that points back into the conversation ("I like it", "we love that place") makes a
# fact that cannot stand on its own; chat interjections at the end are not part of a fact.
_DEICTIC = re.compile(r"^(?:it|this|that|these|those|them|there)\b", re.I)
_INTERJECTION = re.compile(r"(?:[\s,]+(?:lol|haha+|hehe+|xd|lmao|:\)|:d))+$", re.I)


# Words that date a statement: an appointment or intention ahead, or something that happened.
_WEEKDAY = "(?:mon|tues|wednes|thurs|fri|satur|sun)day"
_AHEAD = re.compile(
    r"\b(?:tomorrow|tonight|next (?:week|month|year|weekend|\w+day)|this (?:weekend|evening|"
    rf"afternoon|coming)|on {_WEEKDAY}|in (?:a|two|three|\d+) "
    r"(?:days?|weeks?|months?)|appointment|going to|upcoming|planning|plan to)\b",
    re.I,
)
_PAST = re.compile(
    r"\b(?:yesterday|last (?:week|month|year|weekend|night|\w+day)|ago|just (?:got|came|went|"
    r"finished|started|had)|earlier today|this morning|went|visited|attended|finished|had a)\b",
    re.I,
)
# Preferences said as "I'm a fan of", "I'm into": not who the user is, what they like.
_TASTE = re.compile(r"\b(?:fan of|into|keen on|fond of|crazy about|obsessed with)\b", re.I)


def _kind_of(kind: FactKind, sentence: str) -> FactKind:
    """The kind of a fact from a rule of ``kind``, corrected by the words of its sentence."""
    if _AHEAD.search(sentence):
        return "plan"
    if _PAST.search(sentence):
        return "event"
    if kind == "identity" and _TASTE.search(sentence):
        return "preference"
    return kind


def _third_person(text: str) -> str:
    for pattern, replacement in _PRONOUNS:
        text = pattern.sub(replacement, text)
    return text


# A time said relative to when it was said ("yesterday", "next week", "on Friday"): true only
# with that day, so such a fact carries it ("(said on 2026-05-03)"), or is not kept without it.
_RELATIVE_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|earlier today|"
    r"(?:this|last|next) (?:morning|afternoon|evening|night|week|weekend|month|year|"
    rf"{_WEEKDAY})|on {_WEEKDAY}|"
    r"(?:\d+|an?|one|two|three|a few|several) (?:days?|weeks?|months?|years?) ago|"
    r"in (?:\d+|an?|one|two|three|a few) (?:days?|weeks?|months?))\b",
    re.I,
)


def facts_from_text(text: str, said_on: date | None = None) -> list[Fact]:
    """The facts the rules find in one user message, said on ``said_on`` (a fact that dates
    itself relative to that day says the day; without it, such a fact is not kept)."""
    facts: list[Fact] = []
    for raw in _SENTENCE.split(text):
        sentence = _GREETING.sub("", raw.strip()).strip().rstrip(".!?").strip()
        sentence = _INTERJECTION.sub("", sentence).rstrip(".!?").strip()
        if len(sentence) < 6 or sentence.endswith("?"):
            continue
        for pattern, template, importance, kind in _RULES:
            match = pattern.match(sentence)
            if match and _SECOND_PERSON.search(sentence):
                break  # about the other party as much as the user: not a fact about the user
            if match and _DEICTIC.match(match.groupdict().get("x", "")):
                break  # about something said before: not a fact on its own
            if match:
                parts = {k: _third_person(v.strip()) for k, v in match.groupdict().items()}
                content = template.format(**parts).strip()
                if _RELATIVE_TIME.search(content):
                    if said_on is None:
                        break  # "yesterday" of which day: not a fact on its own
                    content += f" (said on {said_on.isoformat()})"
                if len(content) > MAX_FACT_CHARS:  # a fact is a sentence, not a transcript
                    content = content[: MAX_FACT_CHARS - 4].rstrip() + "..."
                facts.append(
                    Fact(
                        content=content[0].upper() + content[1:] + ".",
                        importance=importance,
                        kind=_kind_of(kind, sentence),
                    )
                )
                break
    return facts


_STOPPED = re.compile(
    r"^(?:I|we) (?:no longer|don'?t|do not|stopped|quit|gave up)\s+(?:use|using|run|running|"
    r"work with|working with|like|prefer)?\s*(?P<x>.+?)(?:\s+any ?more)?$",
    re.I,
)
_SWITCHED = re.compile(
    r"^(?:I|we)(?: have|'ve)? (?:switched|moved|migrated|changed) "
    r"from (?P<old>.+?) to (?P<new>.+)$",
    re.I,
)
_ATTRIBUTE = re.compile(r"^User's (?P<k>.+?) (?:is|are) ", re.I)
_SWITCHED_TO = re.compile(
    r"^(?:these days,? |nowadays,? |now,? )?(?:I|we)(?: have|'ve)? (?:switched|changed|moved) "
    r"to (?P<new>.+?) instead of (?:my |our )?(?:old |usual |former )?(?P<old>.+)$",
    re.I,
)
# Facts that hold one value at a time: a new one replaces the known one of the same key.
_SINGLE = [
    ("job", re.compile(r"^User (?:works|is working) (?:as|at|for)\b", re.I)),
    (
        "home",
        re.compile(
            r"^User (?:lives|(?:rents|owns|shares) (?:an? |the |their )?(?:\w+ )?"
            r"(?:flat|apartment|house|home|place|room|studio|condo|cottage)) (?:.+ )?in\b",
            re.I,
        ),
    ),
    ("home", re.compile(r"^User is (?:based|living|located) in\b", re.I)),
]


def _key(content: str) -> str | None:
    """What single-valued attribute a fact gives (its key), if any."""
    attribute = _ATTRIBUTE.match(content)
    if attribute:
        return "attribute:" + attribute["k"].lower()
    return next((key for key, pattern in _SINGLE if pattern.match(content)), None)


def _mentioning(known: Sequence[KnownFact], thing: str) -> list[KnownFact]:
    thing = thing.strip().lower()
    return [k for k in known if len(thing) >= 3 and thing in k.content.lower()]


def operations_from_text(
    text: str, known: Sequence[KnownFact] = (), said_on: date | None = None
) -> list[Operation]:
    """The memory changes the rules find in one user message, given the scope's facts.

    "we switched from X to Y" and "I've switched to Y instead of X" update the facts that
    mention X; "I no longer use X" invalidates them; "my K is V" updates a known "User's K is
    ...", and a new job or home the known one; everything else the rules recognise is added (a
    fact already known is reinforced when it is written).
    """
    ops: list[Operation] = []
    for raw in _SENTENCE.split(text):
        sentence = _GREETING.sub("", raw.strip()).strip().rstrip(".!?").strip()
        sentence = re.sub(r"^(?:actually|now|so),?\s+", "", sentence, flags=re.I)
        if len(sentence) < 6 or sentence.endswith("?"):
            continue
        switched = _SWITCHED.match(sentence)
        if switched:
            old, new = switched["old"].strip(), _third_person(switched["new"].strip())
            targets = _mentioning(known, old)
            for k in targets:
                updated = re.sub(re.escape(old), new, k.content, flags=re.I)
                ops.append(
                    Operation(
                        op="update",
                        target=k.fact_id,
                        content=updated,
                        importance=k.importance,
                        kind=k.kind,
                    )
                )
            if not targets:
                ops.append(
                    Operation(
                        op="add", content=f"User uses {new}.", importance=0.75, kind="situation"
                    )
                )
            continue
        switched_to = _SWITCHED_TO.match(sentence)
        if switched_to and _mentioning(known, switched_to["old"]):
            new, old = _third_person(switched_to["new"].strip()), switched_to["old"].strip()
            content = f"User has switched to {new} instead of their old {old}."
            for k in _mentioning(known, old):
                ops.append(
                    Operation(
                        op="update",
                        target=k.fact_id,
                        content=content,
                        importance=k.importance,
                        kind=k.kind,
                    )
                )
            continue
        stopped = _STOPPED.match(sentence)
        if stopped and _mentioning(known, stopped["x"]):
            ops.extend(
                Operation(op="delete", target=k.fact_id) for k in _mentioning(known, stopped["x"])
            )
            continue
        for fact in facts_from_text(sentence, said_on):
            key = _key(fact.content)
            same = [k for k in known if key is not None and _key(k.content) == key]
            if same and same[0].content != fact.content:
                ops.append(
                    Operation(
                        op="update",
                        target=same[0].fact_id,
                        content=fact.content,
                        importance=fact.importance,
                        kind=fact.kind,
                    )
                )
            else:
                ops.append(
                    Operation(
                        op="add", content=fact.content, importance=fact.importance, kind=fact.kind
                    )
                )
    return ops


SUMMARY_CHARS = 160

# Words that make a sentence phatic ("Good to see you again!", "How have you been doing?"):
# they open and close conversations and say nothing about what one was about.
_PHATIC = frozenset(
    (  # noqa: SIM905 - a word list reads best as words
        "good great nice glad lovely morning evening afternoon night thanks thank hello there "
        "doing well hope been long time again today soon talk chat catch later bye goodbye "
        "cheers okay sure right yeah just what about have your with that this"
    ).split()
)
_WORD = re.compile(r"[^\W\d_]{4,}")


def _substance(sentence: str) -> int:
    """How many words of a sentence say something: four letters or more, not phatic."""
    return sum(1 for w in _WORD.findall(sentence.lower()) if w not in _PHATIC)


def episode_summary(episode: Episode) -> str:
    """A deterministic one-sentence summary: the first thing the user said that says what the
    conversation was about (a greeting or a pleasantry never is), and how long it was."""
    sentences = [
        x.strip()
        for message in episode.messages
        if (said := role_and_text(message))[0] in ("user", "human")
        for x in _SENTENCE.split(" ".join(said[1].split()))
        if x.strip()
    ]
    if not sentences:
        return f"A conversation of {len(episode.messages)} message(s) with no text from the user."
    # the first statement of substance, else the first question of substance, else the first
    first = next(
        (x for x in sentences if _substance(x) >= 2 and not x.endswith("?")),
        next((x for x in sentences if _substance(x) >= 2), sentences[0]),
    )
    if len(first) > SUMMARY_CHARS:
        first = first[: SUMMARY_CHARS - 3].rstrip() + "..."
    more = len(episode.messages) - 1
    tail = f" ({more} more message{'s' if more != 1 else ''})" if more else ""
    end = "" if first.endswith((".", "!", "?")) and not tail else "."
    return f'User said "{first}"{tail}{end}'


class OfflineExtractor:
    """Rule-based extraction with no model; named ``offline-rules`` in logs, jobs and artifacts.

    It follows the same operation contract as the LLM extractor (add, update, delete).
    """

    name = "offline-rules"
    prompt_version = "rules-v5"

    def warm(self) -> None:
        """Nothing to load: the rules are compiled at import."""

    def count_tokens(self, text: str) -> int:
        """No model, no tokenizer: about four characters a token, as for English text."""
        return max(1, len(text) // 4)

    async def extract(
        self, episodes: Sequence[Episode], known: Sequence[KnownFact] = ()
    ) -> Extraction:
        started = time.perf_counter()
        ops: list[Operation] = []
        # what earlier messages of the batch said, as facts a later one may change: they have
        # no id yet, so they go by negative numbers here and by their content in the answer
        said: dict[int, KnownFact] = {}
        for number, episode in enumerate(episodes, start=1):
            for message in episode.messages:
                role, text = role_and_text(message)
                if role not in ("user", "human"):
                    continue
                # the rules read one message at a time: each fact knows its episode
                day = episode.occurred_at.astimezone(UTC).date()
                for op in operations_from_text(text, [*known, *said.values()], day):
                    earlier = said.get(op.target) if op.target is not None else None
                    if earlier is not None:
                        op = op.model_copy(update={"target": None, "replaces": earlier.content})
                        del said[earlier.fact_id]
                    if (content := op.content) is not None:
                        op = op.model_copy(update={"sources": [number]})
                        fake = -(len(ops) + 1)
                        said[fake] = KnownFact(0, fake, content, op.importance, op.kind)
                    ops.append(op)
            ops.append(Operation(op="summary", content=episode_summary(episode), episode=number))
        return Extraction(
            operations=ops,
            extractor=self.name,
            usage=Usage(latency_s=time.perf_counter() - started),
        )
