"""The offline extractor's sentence rules: which of the user's statements are facts about them,
of which kind, rewritten in the third person (and dated, when they date themselves relative to
the day they were said)."""

from __future__ import annotations

import re
from datetime import date

from agent_memory.extraction.parse import MAX_FACT_CHARS
from agent_memory.extraction.summary import SENTENCE
from agent_memory.models import Fact, FactKind

GREETING = re.compile(
    r"^(?:(?:hi|hello|hey|thanks|thank you|ok|okay)\b[\s!,.]*|(?:\w+ ){0,2}\w+:\s+)", re.I
)

# What people put before the subject of a statement: a discourse marker ("by the way", "also",
# "guess what"), an interjection, or when it happened ("last Friday", "two days ago"). The
# statement is the rest; the time stays in the sentence for its kind and its date.
_WHEN = (
    r"(?:yesterday|today|tonight|earlier today|this morning|recently|lately|finally|"
    r"(?:last|this|over the) (?:week|weekend|month|year|night|summer|winter|spring|fall|"
    r"(?:mon|tues|wednes|thurs|fri|satur|sun)day)|"
    r"(?:just )?(?:a|an|one|two|three|four|five|a few|several|\d+) (?:days?|weeks?|months?|"
    r"years?) ago)"
)
_LEAD = re.compile(
    rf"^(?:(?:by the way|btw|also|plus|and|but|so|well|oh|anyway|actually|honestly|guess what|"
    rf"yeah|yep|yes|yup|wow|luckily|fortunately|unfortunately|{_WHEN})\b[\s,!.-]*)+",
    re.I,
)

# What a thing is called, said after it ("a used car, a Toyota Corolla"; "a dog, Pixel"): part
# of the answer, kept with it. A clause after a comma ("it was lovely") is not.
_APPOSITIVE = (
    r"(?:,\s*(?:an?|the)\s(?:(?!\b(?:is|was|were|are|has|had|have|will|would)\b)[^,])+"
    r"|,\s*(?-i:[A-Z])[\w'-]*(?:\s(?:and\s)?(?-i:[A-Z])[\w'-]*)*)*"
)

# A dash between spaces starts another clause ("I went to a reading - it was powerful").
_DASH = r" [-\u2013\u2014] "

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
            # a new job said outright, or a clause of a longer sentence ("I got an offer and
            # started as ..."): what one works as now, not a past event
            r"^(?:I|we) (?:[^,]*? and )?(?:just |recently |finally |now )?(?:"
            r"(?:started|began|got|landed|took|accepted) (?:a |my |the )?new (?:role|job|position)"
            r" (?=as |at )|(?:started|began) (?:working |work )?(?=as )"
            r"|(?:started|began) working (?=at |for ))(?P<x>(?:as|at|for) .+)$",
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
            r"^(?:I|we) (?:just |finally |recently |also )?(?P<v>(?!(?:need|feed|speed|seed|"
            r"bleed|proceed|exceed|succeed|indeed|used|loved|liked|hoped|wished|wanted|needed|"
            r"decided|planned|started)\b)[a-z]{2,}ed|went|saw|met|ran|won|took|got|made|found|"
            r"bought|built|wrote|read|gave|held|began|caught|taught|sold|drove|flew|swam|rode|"
            rf"ate|drew|sang) (?P<x>(?:(?!{_DASH})[^,])+{_APPOSITIVE})(?:(?:,|{_DASH}).*)?$",
            re.I,
        ),
        "User {v} {x}",
        0.6,
        "event",
    ),
    (
        re.compile(
            r"^(?:I'?m|I am|we'?re|we are) (?:currently |still |now |also )?(?P<x>(?!going\b|"
            r"gonna\b|doing\b|feeling\b|getting\b|having\b|looking forward\b|thinking\b|planning\b|"
            r"trying\b|hoping\b|wondering\b|glad\b)[a-z]{2,}ing .+)$",
            re.I,
        ),
        "User is {x}",
        0.6,
        "situation",
    ),
    (
        re.compile(
            r"^(?:(?:I|we) (?:need|want|plan|am planning|are planning)|(?:I'?m|we'?re) planning)"
            r" to (?P<x>.+)$",
            re.I,
        ),
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
_DEICTIC = re.compile(
    r"^(?:it|this|that|these|those|them|there|(?:go|leave|run|head out|get going|sign off)"
    r"(?: now)?$)\b",
    re.I,
)
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


# Where one works or lives is how things are now, whenever the move or the new job happened:
# "I just started a new job as ..." or "we moved to ... last week" is not an event that fades
# in weeks, it replaces the job or home memory held.
_HOLDS_NOW = re.compile(r"^User (?:works|lives|rents|owns|shares|is (?:based|living|located))\b")


def _kind_of(kind: FactKind, sentence: str, content: str = "") -> FactKind:
    """The kind of a fact from a rule of ``kind``, corrected by the words of its sentence
    (unless the fact says where the user works or lives now, or the rule's verb already says it
    happened: "I ran the marathon on Sunday" is past, whatever "on Sunday" says elsewhere)."""
    if _HOLDS_NOW.match(content) or kind == "event":
        return kind
    if _AHEAD.search(sentence):
        return "plan"
    if _PAST.search(sentence):
        return "event"
    if kind == "identity" and _TASTE.search(sentence):
        return "preference"
    return kind


def third_person(text: str) -> str:
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
    for raw in SENTENCE.split(text):
        sentence = GREETING.sub("", raw.strip()).strip().rstrip(".!?").strip()
        sentence = _INTERJECTION.sub("", sentence).rstrip(".!?").strip()
        lead = _LEAD.match(sentence)
        when = re.search(_WHEN, lead.group(0), re.I) if lead else None
        sentence = sentence[lead.end() :].strip() if lead else sentence
        if len(sentence) < 6 or sentence.endswith("?"):
            continue
        for pattern, template, importance, kind in _RULES:
            match = pattern.match(sentence)
            if match and _SECOND_PERSON.search(sentence):
                break  # about the other party as much as the user: not a fact about the user
            if match and _DEICTIC.match(match.groupdict().get("x", "")):
                break  # about something said before: not a fact on its own
            if match:
                parts = {k: third_person(v.strip()) for k, v in match.groupdict().items()}
                content = template.format(**parts).strip()
                if when and not _RELATIVE_TIME.search(content):
                    phrase = when.group(0)  # when it happened, said first
                    content += f" {phrase[0].lower()}{phrase[1:]}"
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
                        kind=_kind_of(kind, f"{sentence} {when.group(0) if when else ''}", content),
                    )
                )
                break
    return facts
