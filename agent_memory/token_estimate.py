"""How many tokens a text takes, estimated where no tokenizer is at hand (inject's budget of
past messages, the offline extractor's batches, a model litellm cannot count for).

Four characters a token holds for English and other Latin-script text, not for the rest of the
world: a Chinese or Japanese character is about a token of its own, a Cyrillic, Greek, Arabic
or Indic one about half of one, and so is a Latin letter with a diacritic, around which
tokenizers split words. So each character counts by its script: a CJK ideograph, kana, hangul
or full-width form as one token, any other letter beyond ASCII and Latin-1's symbols as a half,
anything else (ASCII letters, digits, punctuation, spaces) as a quarter. ``python -m
benchmarks.token_estimate`` measures these against two tokenizers (OpenAI's cl100k and o200k)
on two sources of text in about sixty languages (docs/benchmarks.md, "Token estimates").
"""

from __future__ import annotations

import math
import re

# CJK radicals to ideographs (with kana and bopomofo), hangul jamo and syllables, CJK
# compatibility ideographs, full-width forms, and the supplementary ideograph planes
_WIDE = re.compile(
    "[\u1100-\u11ff\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\ufe30-\ufe4f"
    "\uff00-\uffef\U00020000-\U0003ffff]"
)
# any other character beyond ASCII, Latin-1's symbols and the general punctuation block (an
# accented Latin letter, a letter of another script), but white space
_OTHER = re.compile(
    "[^\x00-\u00bf\u2000-\u206f\u1100-\u11ff\u2e80-\u9fff\ua960-\ua97f"
    "\uac00-\ud7ff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003ffff\\s]"
)

ASCII_CHARS_PER_TOKEN = 4.0
OTHER_CHARS_PER_TOKEN = 2.0
WIDE_CHARS_PER_TOKEN = 1.0


def tokens(text: str) -> float:
    """The estimated tokens of ``text`` (see the module)."""
    if text.isascii():  # the common case, at the speed of len()
        return len(text) / ASCII_CHARS_PER_TOKEN
    wide = len(_WIDE.findall(text))
    other = len(_OTHER.findall(text))
    plain = len(text) - wide - other
    return (
        plain / ASCII_CHARS_PER_TOKEN + other / OTHER_CHARS_PER_TOKEN + wide / WIDE_CHARS_PER_TOKEN
    )


def count(text: str) -> int:
    """:func:`tokens` as a whole number of tokens, at least 1."""
    return max(1, math.ceil(tokens(text)))
