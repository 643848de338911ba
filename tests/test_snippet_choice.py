"""Which snippets an inject shows beside its facts: what a fact already says is left out, the
rest by rank within the budget; the facts' words are looked up by word, with the same answers
as weighing every fact against every snippet."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime

from agent_memory.models import Snippet
from agent_memory.snippet_choice import _covers, _FactWords, _words, chosen_snippets

WHEN = datetime(2026, 12, 1, tzinfo=UTC)
VOCABULARY = [
    "tea",
    "coffee",
    "cello",
    "marathon",
    "sister",
    "lisbon",
    "garden",
    "nurse",
    "python",
    "chess",
    "piano",
    "jazz",
]


def _snippet(n: int, content: str) -> Snippet:
    return Snippet(
        id=n, episode_id=n, position=0, speaker="user", occurred_at=WHEN, content=content
    )


def _ranked(*facts: str) -> list[tuple[int, str, float, float]]:
    return [(n, text, 0.5, 0.5) for n, text in enumerate(facts)]


def test_the_index_of_the_facts_words_answers_as_every_fact_weighed_against_the_snippet() -> None:
    rng = random.Random(40)
    covered = 0
    for _ in range(2000):
        facts = [
            " ".join(rng.sample(VOCABULARY, rng.randint(0, 6))) for _ in range(rng.randint(0, 8))
        ]
        says = _words(" ".join(rng.sample(VOCABULARY, rng.randint(0, 6))))
        expected = any(_covers(_words(f), says) for f in facts)
        assert _FactWords(_ranked(*facts)).cover(says) == expected, (facts, says)
        covered += expected
    assert 200 < covered < 1800  # both answers were asked often


def test_a_snippet_a_fact_says_is_left_out_and_the_rest_keep_their_rank() -> None:
    found = [
        _snippet(1, "My sister lives in Lisbon now."),
        _snippet(2, "I started playing the cello last winter."),
        _snippet(3, "Marathon training takes my mornings."),
    ]
    chosen = chosen_snippets(found, _ranked("User's sister lives in Lisbon"), tokens=500)
    assert [s.id for s in chosen] == [2, 3]
    assert [s.id for s in chosen_snippets(found, _ranked(), tokens=500)] == [1, 2, 3]
    # the budget: the first that does not fit ends the list
    assert [s.id for s in chosen_snippets(found, _ranked(), tokens=20)] == [1]


def test_the_words_of_a_text_are_its_runs_of_four_word_characters_or_more() -> None:
    rng = random.Random(42)
    alphabet = "abcXYZ_é✓ß1 .,'-\u00a0\u0130"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        runs = {w for w in re.findall(r"\w+", text.lower()) if len(w) > 3}
        assert _words(text) == runs, text
