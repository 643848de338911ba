"""The offline extractor: deterministic rules, no model, no network.

It reads what the *user* said, sentence by sentence, and keeps first-person statements about
themselves ("I'm a ...", "I prefer ...", "we use ...", "my ... keeps timing out"), rewritten in
the third person. Its rules are English: a sentence that full text reads as another language
(agent_memory.languages, the database's rule) makes no fact, and what it says stays in its
episode, whose messages are searched in their own language. It is far less clever than a
model, but the same input always gives the same facts, so the whole pipeline runs and can be
tested with no LLM configured.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import UTC, date

from agent_memory import token_estimate
from agent_memory.extraction.base import Extraction
from agent_memory.extraction.rules import GREETING, facts_from_text, third_person
from agent_memory.extraction.summary import SENTENCE, episode_summary
from agent_memory.languages import is_english
from agent_memory.messages import role_and_text
from agent_memory.models import Episode, KnownFact, Level, Operation
from agent_memory.usage import Usage

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
    for raw in SENTENCE.split(text):
        sentence = GREETING.sub("", raw.strip()).strip().rstrip(".!?").strip()
        sentence = re.sub(r"^(?:actually|now|so),?\s+", "", sentence, flags=re.I)
        # the rules are English sentences: another language's sentence is left to the
        # episode (its messages are searched in their language), never read by them
        if len(sentence) < 6 or sentence.endswith("?") or not is_english(sentence):
            continue
        changed = _changes(sentence, known)
        ops.extend(changed if changed is not None else _stated(sentence, known, said_on))
    return ops


def _update(k: KnownFact, content: str, importance: float | None = None) -> Operation:
    """``k`` said anew as ``content``, keeping its kind (and its importance unless given)."""
    weight = k.importance if importance is None else importance
    return Operation(op="update", target=k.fact_id, content=content, importance=weight, kind=k.kind)


def _changes(sentence: str, known: Sequence[KnownFact]) -> list[Operation] | None:
    """What a sentence that says something changed does to the known facts (a switch from
    one thing to another, a thing no longer used); None when it says no such change."""
    switched = _SWITCHED.match(sentence)
    if switched:
        old, new = switched["old"].strip(), third_person(switched["new"].strip())
        targets = _mentioning(known, old)
        if not targets:
            return [
                Operation(op="add", content=f"User uses {new}.", importance=0.75, kind="situation")
            ]
        return [_update(k, re.sub(re.escape(old), new, k.content, flags=re.I)) for k in targets]
    switched_to = _SWITCHED_TO.match(sentence)
    if switched_to and _mentioning(known, switched_to["old"]):
        new, old = third_person(switched_to["new"].strip()), switched_to["old"].strip()
        content = f"User has switched to {new} instead of their old {old}."
        return [_update(k, content) for k in _mentioning(known, old)]
    stopped = _STOPPED.match(sentence)
    if stopped and _mentioning(known, stopped["x"]):
        return [Operation(op="delete", target=k.fact_id) for k in _mentioning(known, stopped["x"])]
    return None


def _stated(sentence: str, known: Sequence[KnownFact], said_on: date | None) -> list[Operation]:
    """The facts a sentence states: a new value of a known thing updates it (keeping its
    kind, and so its half-life), anything else is added."""
    ops = []
    for fact in facts_from_text(sentence, said_on):
        key = _key(fact.content)
        same = [k for k in known if key is not None and _key(k.content) == key]
        if same and same[0].content != fact.content:
            ops.append(
                _update(same[0], fact.content).model_copy(update={"importance": fact.importance})
            )
        else:
            ops.append(
                Operation(
                    op="add", content=fact.content, importance=fact.importance, kind=fact.kind
                )
            )
    return ops


class OfflineExtractor:
    """Rule-based extraction with no model; named ``offline-rules`` in logs, jobs and artifacts.

    It follows the same operation contract as the LLM extractor (add, update, delete).
    """

    name = "offline-rules"
    prompt_version = "rules-v8"

    def warm(self) -> None:
        """Nothing to load: the rules are compiled at import."""

    def count_tokens(self, text: str) -> int:
        """No model, no tokenizer: estimated by each character's script."""
        return token_estimate.count(text)

    async def extract(
        self,
        episodes: Sequence[Episode],
        known: Sequence[KnownFact] = (),
        levels: Sequence[Level] = (),
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
