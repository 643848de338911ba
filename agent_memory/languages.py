"""A text's language by the rule full text uses in the database, for code that reads text in
the client (the offline extractor, whose rules are English sentences).

The rule is `agent_memory.text_config` (sql/0034_text_in_its_language.sql), written again in
Python so that a sentence needs no round trip: the language whose stop words (PostgreSQL's own
Snowball lists, ``stop_words.json``, word for word the migration's) the text's first 64 words
hold most, English first on a tie and otherwise the first by name; with none of them, its
script (Greek, Arabic, Armenian, Tamil, Devanagari as Hindi); else English for plain ASCII and
``simple`` (no language) for anything else. tests/test_languages.py checks both against the
server's, list for list and text for text.

What the database returns differs in one way: it names the configuration it parses with, which
is ``simple`` for a language the server has no configuration of; this names the language.
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import cache, lru_cache
from importlib import resources
from itertools import groupby

ENGLISH = "english"
SIMPLE = "simple"

_WORDS_READ = 64
# with no stop word, the script, in the database's order
_SCRIPTS = (
    ("greek", re.compile(r"[\u0370-\u03ff]")),
    ("arabic", re.compile(r"[\u0600-\u06ff]")),
    ("armenian", re.compile(r"[\u0530-\u058f]")),
    ("tamil", re.compile(r"[\u0b80-\u0bff]")),
    ("hindi", re.compile(r"[\u0900-\u097f]")),
)


@cache
def stop_words() -> dict[str, frozenset[str]]:
    """Each language's stop words, by the language's name."""
    text = resources.files("agent_memory").joinpath("stop_words.json").read_text("utf-8")
    return {language: frozenset(words.split()) for language, words in json.loads(text).items()}


@cache
def _languages_of() -> dict[str, tuple[str, ...]]:
    """Each stop word with the languages it is one of, by name."""
    found: dict[str, list[str]] = {}
    for language, words in sorted(stop_words().items()):
        for word in words:
            found.setdefault(word, []).append(language)
    return {word: tuple(languages) for word, languages in found.items()}


# control characters that are [:space:] (the other controls are neither space nor punctuation)
_SPACE_CONTROLS = frozenset("\t\n\x0b\x0c\r")
# a letter, a digit, a letter-like number: part of a word
_WORD_CATEGORIES = frozenset(("Lu", "Ll", "Lt", "Lm", "Lo", "Nd", "Nl"))


@lru_cache(maxsize=8192)
def _breaks(ch: str) -> bool:
    """Whether a character ends a word, as the database's [:space:] and [:punct:] in its
    C.UTF-8 locale (glibc's classes: a word is what is alphabetic or a digit): a letter, a
    digit or a letter-like number does not; a combining mark does not when it is part of its
    letter (a vowel sign, a candrabindu: no combining class) and does when it is written over
    one (an accent, a virama, a nukta); a control character only when it is white space; a
    character not assigned does not. tests/test_languages.py checks every character of the
    scripts the stop lists are written in against the server."""
    category = unicodedata.category(ch)
    if category in _WORD_CATEGORIES or category == "Cn":
        return False
    if category == "Cc":
        return ch in _SPACE_CONTROLS
    if category in ("Mn", "Mc"):
        return unicodedata.combining(ch) != 0
    return True


def words(text: str, limit: int = _WORDS_READ) -> list[str]:
    """The first ``limit`` words the rule reads, lower-cased, as the database's
    ``regexp_split_to_array`` cuts them (an empty one before a leading break and after a
    trailing one, as it gives)."""
    runs = [(breaks, "".join(run)) for breaks, run in groupby(text.lower(), key=_breaks)]
    found = [run for breaks, run in runs if not breaks]
    if runs and runs[0][0]:
        found.insert(0, "")
    if runs and runs[-1][0]:
        found.append("")
    return found[:limit]


def language_of(text: str) -> str:
    """The language ``text`` is parsed in by full text: a name of ``stop_words()``, a script's
    language, ``"english"`` or ``"simple"``."""
    languages_of = _languages_of()
    counts: dict[str, int] = {}
    for word in words(text):
        for language in languages_of.get(word, ()):
            counts[language] = counts.get(language, 0) + 1
    if counts:
        most = max(counts.values())
        if counts.get(ENGLISH) == most:
            return ENGLISH
        return min(language for language, n in counts.items() if n == most)
    for language, script in _SCRIPTS:
        if script.search(text):
            return language
    return ENGLISH if text.isascii() else SIMPLE


def is_english(text: str) -> bool:
    """Whether full text reads ``text`` as English."""
    return language_of(text) == ENGLISH
