"""Tokens counted by script where no tokenizer is at hand: English as before (four characters a
token), a CJK character a token, another script's letter half of one; so inject's budget of past
messages and the offline extractor's batches hold what they say in any language. The texts are
written for these tests."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent_memory import token_estimate
from agent_memory.consolidation.load import select_batch
from agent_memory.extraction.offline import OfflineExtractor
from agent_memory.extraction.prompt import format_episodes
from agent_memory.models import Episode, Snippet
from agent_memory.snippet_choice import chosen_snippets

WHEN = datetime(2026, 12, 1, tzinfo=UTC)


def test_english_counts_four_characters_a_token_as_before() -> None:
    text = "I moved to Porto in May and started learning the cello."
    assert token_estimate.tokens(text) == len(text) / 4
    assert token_estimate.count("") == 1 and token_estimate.count("a" * 9) == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我上个月搬到了波尔图", 10.0),  # ten ideographs: a token each
        ("チェロを習い始めました", 11.0),  # kana and kanji
        ("첼로를 배우기", 6 + 0.25),  # six syllables and a space
        ("Я переехал", 9 / 2 + 0.25),  # nine Cyrillic letters and a space
        ("Grüße aus Köln", 3 / 2 + 11 / 4),  # ü, ß, ö: half a token each; the rest a quarter
        ("Porto 波尔图!", 6 / 4 + 3 + 1 / 4),
    ],
)
def test_each_character_counts_by_its_script(text: str, expected: float) -> None:
    assert token_estimate.tokens(text) == pytest.approx(expected)


def _snippet(n: int, content: str) -> Snippet:
    return Snippet(
        id=n, episode_id=n, position=0, speaker="user", occurred_at=WHEN, content=content
    )


def test_a_budget_of_past_messages_holds_as_many_tokens_in_any_script() -> None:
    # forty lines, none saying what another says
    chinese = [_snippet(n, f"第{n}次陶艺课烧了{n}个花瓶和{n * 3}个杯子") for n in range(40)]
    words = ["kiln", "glaze", "vase", "clay", "wheel", "bowl", "jug", "plate", "mug", "tile"]
    english = [
        _snippet(n, f"Lesson {n}: the {words[n % 10]}{n} and {words[(n + 3) % 10]}{n} fired.")
        for n in range(40)
    ]
    for found in (chinese, english):
        chosen = chosen_snippets(found, [], 120)
        spent = sum(token_estimate.tokens(s.line()) for s in chosen)
        assert 0 < spent <= 120
        # the next one would not have fitted
        assert spent + token_estimate.tokens(found[len(chosen)].line()) > 120
    # under four characters a token, the Chinese lines took four times the tokens they were
    # allowed; now each line's tokens are what a tokenizer would count, roughly
    chinese_chars = sum(len(s.line()) for s in chosen_snippets(chinese, [], 120))
    assert chinese_chars < 120 * 2


def _episode(n: int, text: str) -> Episode:
    return Episode(
        id=n,
        user_id="mei",
        agent_id=None,
        workflow_id=None,
        messages=[{"role": "user", "content": text}],
        occurred_at=WHEN,
        created_at=WHEN,
        consolidated=False,
    )


def test_the_offline_extractor_batches_a_backlog_by_its_tokens_in_any_script() -> None:
    extractor = OfflineExtractor()
    chinese = [_episode(n, "我上个月搬到了波尔图，开始学习大提琴。" * 10) for n in range(20)]
    english = [
        _episode(n, "I moved to Porto last month and took up the cello. " * 10) for n in range(20)
    ]
    for backlog in (chinese, english):
        batch, _ = select_batch(backlog, extractor, 1000)
        assert extractor.count_tokens(format_episodes(batch)) <= 1000
        assert len(batch) < len(backlog)
