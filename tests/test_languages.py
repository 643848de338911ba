"""The client's copy of the language rule (agent_memory.languages) against the database's
(agent_memory.text_config, sql/0034), and the offline extractor that it gates (issue 54, item
3): English rules read English sentences only, and what another language says stays in its
episode, searched in its language. Every sentence here was written for these tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from agent_memory import MemoryManager
from agent_memory.extraction.offline import operations_from_text
from agent_memory.languages import _breaks, language_of, stop_words, words
from agent_memory.models import Scope
from agent_memory.settings import Settings

LENA = Scope("lena", "agent")

TEXTS = [
    "Meine Tochter spielt seit einem Jahr Geige.",
    "Mi padre cocina paella todos los domingos.",
    "Nous avons adopté un chien la semaine dernière.",
    "O meu irmão trabalha num hospital em Coimbra.",
    "Jag har två katter och en hund hemma.",
    "Мой брат учится в университете и играет на гитаре.",
    "Ο πατέρας μου διαβάζει εφημερίδα κάθε πρωί.",
    "मेरो भाइ काठमाडौंमा पढ्छ र गितार बजाउँछ।",
    "My daughter has played the violin for a year.",
    "¡Hola! ¿Qué tal?",
    "I use das neue Werkzeug für die Arbeit",
    "Über den Berg, für die Kinder.",
    "Thanks!",
    "Grüße",
    "...",
    "",
    "我女儿学小提琴一年了。",
    "娘は毎週バイオリンを習っています。",
    "l'été «est» là—et\u00a0ici, de\u0301ja\u0300 vu 2024²",
    # past the 64 words the rule reads, the later language's words do not count
    " ".join(["the cat and the dog"] * 13) + " " + " ".join(["und die der das"] * 20),
]


def _server_language(db: psycopg.Connection[Any], text: str) -> str:
    row = db.execute("SELECT agent_memory.text_language(%s)", (text,)).fetchone()
    assert row is not None
    return str(row[0])


def test_the_stop_words_are_the_databases(db: psycopg.Connection[Any]) -> None:
    row = db.execute("SELECT agent_memory.stop_word_languages()").fetchone()
    assert row is not None
    mine: dict[str, list[str]] = {}
    for language, listed in stop_words().items():
        for word in listed:
            mine.setdefault(word, []).append(language)
    assert {w: sorted(ls) for w, ls in mine.items()} == {w: sorted(ls) for w, ls in row[0].items()}
    assert len(stop_words()) == 15


# the scripts the stop lists are written in, and the breaks around them: Latin, Greek and
# Cyrillic with their combining marks, Devanagari (Nepali's), general punctuation, the CJK
# marks and kana, a run of Hangul; the two marks left out are ones glibc counts as letters and
# Unicode does not give a category that says so (U+0345, U+034F)
_SCRIPTS = [
    *range(1, 0x345),
    *range(0x346, 0x34F),
    *range(0x350, 0x530),
    *range(0x900, 0x980),
    *range(0x1E00, 0x2070),
    *range(0x3000, 0x3100),
    *range(0xAC00, 0xAD00),
]


def test_each_character_of_the_stop_lists_scripts_breaks_a_word_as_in_the_database(
    db: psycopg.Connection[Any],
) -> None:
    rows = db.execute(
        "SELECT n FROM unnest(%s::int[]) AS n WHERE chr(n) ~ '[[:space:][:punct:]]'",
        (_SCRIPTS,),
    ).fetchall()
    breaks = {int(r[0]) for r in rows}
    assert [hex(n) for n in _SCRIPTS if _breaks(chr(n)) != (n in breaks)] == []
    assert 0x94D in breaks and 0x948 not in breaks  # a virama breaks, a vowel sign does not


def test_every_stop_word_alone_is_given_the_language_the_database_gives_it(
    db: psycopg.Connection[Any],
) -> None:
    # each cut as the database cuts it: a Nepali word at its virama, a Hungarian "ill." at its
    # stop (the characters' test above); before, at a vowel sign too, which the database keeps
    listed = sorted({word for words_ in stop_words().values() for word in words_})
    rows = db.execute(
        "SELECT w, agent_memory.text_language(w) FROM unnest(%s::text[]) AS w", (listed,)
    ).fetchall()
    assert len(rows) == len(listed) > 1000
    assert [(w, language) for w, language in rows if language_of(w) != language] == []


@pytest.mark.parametrize("text", TEXTS)
def test_a_text_is_given_the_language_the_database_gives_it(
    db: psycopg.Connection[Any], text: str
) -> None:
    assert language_of(text) == _server_language(db, text)


def test_the_rule_reads_64_words_as_the_database_cuts_them(db: psycopg.Connection[Any]) -> None:
    text = TEXTS[-1]
    assert language_of(text) == "english"
    row = db.execute(
        "SELECT (regexp_split_to_array(lower(%s),"
        " '[[:space:][:punct:]«»‹›„“”‘’‚¡¿…–—·、。，！？：；（）「」『』]+'))[1:64]",
        (text,),
    ).fetchone()
    assert row is not None and words(text) == row[0]
    assert words("¡Hola! ¿Qué tal?") == ["", "hola", "qué", "tal", ""]


_ANY_STOP_WORD = sorted({w for listed in stop_words().values() for w in listed})
_SEPARATORS = [" ", "  ", ", ", ". ", "! ", "\n", " - ", "«", "»", "¿", "…", "、", "。"]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.one_of(
                st.sampled_from(_ANY_STOP_WORD),
                st.sampled_from(_ANY_STOP_WORD).map(str.capitalize),
                st.text(alphabet="abcdefghijklmnopqrstuvwxyzäöüßéñçøåαβγабв中文字", max_size=8),
            ),
            st.sampled_from(_SEPARATORS),
        ),
        max_size=80,
    )
)
def test_any_mix_of_stop_words_is_judged_alike(
    db: psycopg.Connection[Any], parts: list[tuple[str, str]]
) -> None:
    text = "".join(word + separator for word, separator in parts)
    assert language_of(text) == _server_language(db, text), text


@pytest.mark.parametrize(
    "text",
    [
        # English grammar, German words: full text reads it as German
        "I use das neue Werkzeug für die Arbeit und für die Schule",
        "Ich bin Ärztin in Wien.",
        "Je suis infirmière à Lyon.",
        "我是一名护士。",
    ],
)
def test_the_english_rules_read_no_sentence_of_another_language(text: str) -> None:
    assert operations_from_text(text) == []


def test_a_message_in_two_languages_gives_the_facts_of_its_english() -> None:
    ops = operations_from_text(
        "I use das neue Werkzeug für die Arbeit und für die Schule. I use Vim for everything."
    )
    assert [op.content for op in ops] == ["User uses Vim for everything."]
    # without the German sentence's rule, the rules would have read it as English
    assert [op.content for op in operations_from_text("I use das neue Werkzeug")] == [
        "User uses das neue Werkzeug."
    ]


def test_the_benchmark_counts_each_datasets_sentences_by_language() -> None:
    from benchmarks.offline import languages

    data = Path(__file__).parent / "data"
    chinese = languages(data / "memorybank_cn_sample.jsonl")
    english = languages(data / "memorybank_en_sample.jsonl")
    assert chinese["by_language"]["simple"] >= 0.9 * chinese["user_sentences"] > 0
    assert english["by_language"]["english"] >= 0.9 * english["user_sentences"] > 0
    assert chinese["facts_in_sentences_not_english"] == 0


@pytest.mark.usefixtures("prefect_harness")
async def test_a_conversation_in_another_language_is_kept_and_found_in_it(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await manager.record(
            LENA,
            [
                HumanMessage("Hallo! Ich wohne seit März in Leipzig und arbeite als Tischlerin."),
                AIMessage("Schön, willkommen in Leipzig!"),
                HumanMessage("I prefer short answers."),
            ],
        )
        await manager.record(
            LENA, [HumanMessage("我最近在学做饺子。周末想包韭菜馅的。"), AIMessage("好主意！")]
        )
        summary = await manager.consolidate(LENA)
        assert (summary["completed"], summary["episodes"], summary["facts_created"]) == (1, 2, 1)
        # (a preference is the person's, whichever agent heard it)
        facts = [f.content for f in await manager.facts(Scope("lena"))]
        assert facts == ["User prefers short answers."]
        found = await manager.search_conversations(LENA, "Wo wohnt sie, in welcher Stadt?")
        assert found[0].content.startswith("Ich wohne seit März in Leipzig")
        found = await manager.search_conversations(LENA, "饺子")
        assert found[0].content == "我最近在学做饺子。"  # a sentence of its message
        summaries = sorted(e.summary or "" for e in await manager.episodes(LENA))
        assert summaries == [
            'User said "Ich wohne seit März in Leipzig und arbeite als Tischlerin."'
            " (2 more messages).",
            'User said "我最近在学做饺子。" (1 more message).',  # its first sentence
        ]
    finally:
        await manager.close()
