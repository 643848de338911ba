"""An episode's deterministic one-sentence summary (when the model gives none, or no model is
configured), and the sentence split the offline rules share."""

from __future__ import annotations

import re

from agent_memory.messages import role_and_text
from agent_memory.models import Episode

# where a user's message is cut into the statements the rules read one by one
# (Chinese and Japanese end a sentence with a full-width mark and no space)
SENTENCE = re.compile(
    r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n+|;\s*|,?\s+and\s+(?=(?:I|we|my|our)\b)", re.I
)

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
        for x in SENTENCE.split(" ".join(said[1].split()))
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
