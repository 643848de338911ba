"""Full text in the text's language (issue 54, item 1; sql/0034_text_in_its_language.sql): the
rule that picks a text's language, PostgreSQL's own stop words behind it, English parsed as
before, and questions in German, Chinese and Japanese finding facts, past messages and Store
documents in their language by full text alone, on a database upgraded from before the rule
too. Every sentence here was written for these tests."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager
from agent_memory.models import Scope
from agent_memory.settings import MemorySettings, Settings
from benchmarks.retrieval import load_facts

ANNA = Scope("anna", "agent")
RECOUNT_FACTS = """
SELECT m.scope_key, lexeme, count(*) FROM agent_memory.memory_items m,
     unnest(tsvector_to_array(m.search)) AS lexeme
WHERE m.superseded_at IS NULL GROUP BY 1, 2
"""
KEPT_FACTS = """
SELECT scope_key, lexeme, sum(docs) FROM agent_memory.term_rows
WHERE corpus = 'f' AND lexeme <> '' GROUP BY 1, 2 HAVING sum(docs) <> 0
"""


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Meine Tochter spielt seit einem Jahr Geige.", "german"),
        ("Wir fahren im Sommer mit dem Zug nach Wien.", "german"),
        ("Mi padre cocina paella todos los domingos.", "spanish"),
        ("Nous avons adopté un chien la semaine dernière.", "french"),
        ("O meu irmão trabalha num hospital em Coimbra.", "portuguese"),
        ("Ho comprato una bicicletta nuova per andare al lavoro.", "italian"),
        ("Wij gaan volgende maand verhuizen naar een groter huis.", "dutch"),
        ("Jag har två katter och en hund hemma.", "swedish"),
        ("Мой брат учится в университете и играет на гитаре.", "russian"),
        ("Ο πατέρας μου διαβάζει εφημερίδα κάθε πρωί.", "greek"),
        ("My daughter has played the violin for a year.", "english"),
        ("Thanks!", "english"),  # no stop word, plain ASCII: as before
        ("Geigenunterricht", "english"),
        ("Grüße", "simple"),  # no stop word, beyond ASCII: language-neutral
        ("我女儿学小提琴一年了。", "simple"),
        ("娘は毎週バイオリンを習っています。", "simple"),
    ],
)
def test_a_text_is_parsed_in_the_language_its_stop_words_say(
    db: psycopg.Connection[Any], text: str, language: str
) -> None:
    found = db.execute("SELECT agent_memory.text_language(%s)", (text,)).fetchone()
    assert found == (language,)


ENGLISH = [
    "My daughter has played the violin for a year.",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful!",
    "User's favourite running shoes are the blue ones, size 42.",
    "ok",
    "Is it still raining in Dublin? We're flying out at 6pm.",
    "email me at someone@example.com about the well-known issue",
]


def test_english_is_parsed_as_before(db: psycopg.Connection[Any]) -> None:
    for text in ENGLISH:
        row = db.execute(
            "SELECT agent_memory.search_vector(%s) = to_tsvector('english', %s)", (text, text)
        ).fetchone()
        assert row == (True,), text


def test_no_text_has_no_words_and_odd_text_has_its_own(db: psycopg.Connection[Any]) -> None:
    row = db.execute(
        "SELECT agent_memory.search_vector(NULL) IS NULL, agent_memory.search_vector('')::text,"
        " agent_memory.search_vector('?!… «»')::text, agent_memory.search_vector('the and of')"
        "::text, agent_memory.search_vector(repeat('und ', 5000) || 'Katze')::text"
    ).fetchone()
    # a megabyte of stop words is weighed by its first 64 words, and parsed whole
    assert row == (True, "", "", "", "'katz':5001")


def test_chinese_japanese_and_korean_runs_are_their_characters_and_pairs(
    db: psycopg.Connection[Any],
) -> None:
    row = db.execute(
        "SELECT tsvector_to_array(agent_memory.search_vector('小提琴 and Geige'))"
    ).fetchone()
    assert row is not None
    # the rest in its language ("and": English, whose stop word it is)
    assert set(row[0]) == {"小", "提", "琴", "小提", "提琴", "geig"}
    # hangul too, whose words carry their particles: the name is found inside
    row = db.execute("SELECT tsvector_to_array(agent_memory.search_vector('서울에'))").fetchone()
    assert row is not None and "서울" in row[0]


def test_the_stop_words_are_postgresqls_own(db: psycopg.Connection[Any]) -> None:
    """The migration's lists, word for word, are the server's files (share/tsearch_data)."""
    row = db.execute("SELECT setting FROM pg_config WHERE name = 'SHAREDIR'").fetchone()
    assert row is not None
    files = sorted((Path(row[0]) / "tsearch_data").glob("*.stop"))
    assert len(files) >= 15
    expected: dict[str, list[str]] = defaultdict(list)
    for path in files:
        for word in path.read_text(encoding="utf-8").split():
            if path.stem not in expected[word]:
                expected[word].append(path.stem)
    stored = db.execute("SELECT agent_memory.stop_word_languages()").fetchone()
    assert stored is not None
    assert {w: sorted(ls) for w, ls in stored[0].items()} == {
        w: sorted(ls) for w, ls in expected.items()
    }


async def _inject(settings: Settings, question: str, **memory: Any) -> list[str]:
    changed = settings.model_copy(
        update={
            "memory": MemorySettings(
                **{**settings.memory.model_dump(), "inject_min_importance": 0.0, **memory}
            )
        }
    )
    manager = await MemoryManager.create(settings=changed, migrate=False)
    try:
        return (await manager.inject(ANNA, query=question)).injected_facts
    finally:
        await manager.close()


async def test_a_question_finds_facts_in_its_language_by_full_text_alone(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    facts = {
        "Anna hat zwei Katzen, Mimi und Luna.": "wie heißt deine katze",
        "Annas Bruder arbeitet als Koch in Hamburg.": "wo arbeitet dein bruder",
        "安娜养了一只叫小白的猫。": "小白是什么颜色的猫",
        "アンナは毎朝コーヒーを飲みます。": "コーヒーは好きですか",
        "Anna runs along the river every Sunday.": "where does anna go running",
    }
    load_facts(db, ANNA, [{"content": c, "importance": 0.5} for c in facts])
    for fact, question in facts.items():
        found = await _inject(settings, question, inject_ranking="text", inject_limit=1)
        assert found == [fact], question
    # the German pair shares no word as English cuts them ("katzen" / "katz")
    row = db.execute(
        "SELECT to_tsvector('english', %s) @@ plainto_tsquery('english', %s)",
        ("Anna hat zwei Katzen, Mimi und Luna.", "wie heißt deine katze"),
    ).fetchone()
    assert row == (False,)


async def test_past_messages_and_store_documents_are_found_in_their_language(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    manager = await MemoryManager.create(settings=settings, migrate=False)
    try:
        await manager.record(
            ANNA,
            [HumanMessage("先週、京都で抹茶のケーキを食べました。"), AIMessage("いいですね！")],
        )
        # waiting to be indexed, and once indexed: found alike
        for _ in range(2):
            found = await manager.search_conversations(ANNA, "抹茶")
            assert [s.content for s in found][:1] == ["先週、京都で抹茶のケーキを食べました。"]
            await manager.index_pending()
        store = manager.store()
        ns = ("rezepte", "anna")
        await store.aput(ns, "kuchen", {"titel": "Apfelkuchen", "text": "Die Äpfel schälen."})
        await store.aput(ns, "suppe", {"titel": "Linsensuppe", "text": "Die Linsen kochen."})
        hits = await store.asearch(ns, query="Apfel schälen")
        assert [h.key for h in hits][:1] == ["kuchen"]
    finally:
        await manager.close()
    row = db.execute(
        "SELECT search = agent_memory.search_vector(agent_memory.document_text(value))"
        " FROM agent_memory.store_items WHERE key = 'kuchen'"
    ).fetchone()
    assert row == (True,)


def test_an_upgrade_parses_what_was_stored_before_and_counts_it_again(
    empty_database: psycopg.Connection[Any],
) -> None:
    from agent_memory.db.migrations import load_migrations, migrate

    db = empty_database
    migrate(db, migrations=[m for m in load_migrations() if m.version <= 33])
    texts = ["Anna hat zwei Katzen.", "安娜养了一只猫。", "Anna has two cats."]
    load_facts(db, ANNA, [{"content": t, "importance": 0.5} for t in texts])
    before = db.execute("SELECT content, search::text FROM agent_memory.memory_items").fetchall()
    # one word, as PostgreSQL parses a run of ideographs
    assert dict(before)["安娜养了一只猫。"] == "'安娜养了一只猫':1"
    migrate(db)
    after = db.execute(
        "SELECT content, search = agent_memory.search_vector(content) FROM"
        " agent_memory.memory_items"
    ).fetchall()
    assert dict(after) == dict.fromkeys(texts, True)
    kept = {tuple(r) for r in db.execute(KEPT_FACTS)}
    assert kept == {tuple(r) for r in db.execute(RECOUNT_FACTS)}
    assert any(lexeme == "猫" for _, lexeme, _ in kept)
    row = db.execute(
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_items_search_idx'"
    ).fetchone()
    assert row is not None and "fastupdate" in row[0]
