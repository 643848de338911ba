"""A message's sentences (`agent_memory.sentences`, sql/0035_sentences_in_cjk.sql): Chinese and
Japanese sentences end at a full-width mark with no space, Korean ones at a stop before a
syllable, and every other text is cut as before; a database upgraded cuts again the messages
it had indexed whole, with their words counted exactly. Every sentence here was written for
these tests."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agent_memory.db import episodes as episode_repo
from agent_memory.db import snippet_queue
from agent_memory.models import Scope

MEI = Scope("mei", "assistant")
# the rule before version 35, for the texts it cuts alike
BEFORE = (
    "SELECT regexp_split_to_array(btrim(coalesce(%s, '')),"
    " '(?<=[.!?\\u2026])\\s+(?=[[:upper:][:digit:]\"''\\u201c\\u2018\\u00bf\\u00a1(])')"
)
SNIPPETS = "SELECT id, episode_id, position, part, content FROM agent_memory.snippets ORDER BY id"
KEPT = """
SELECT scope_key, lexeme, sum(docs), sum(size) FROM agent_memory.term_counts
WHERE corpus = 's' GROUP BY 1, 2 HAVING sum(docs) <> 0 OR sum(size) <> 0
"""
RECOUNTED = """
SELECT scope_key, lexeme, count(*), 0 FROM agent_memory.snippets,
     unnest(tsvector_to_array(search)) AS lexeme GROUP BY 1, 2
UNION ALL
SELECT scope_key, '', count(*), sum(length(search)) FROM agent_memory.snippets GROUP BY 1
"""


def _cut(db: psycopg.Connection[Any], text: str) -> list[str]:
    row = db.execute("SELECT agent_memory.sentences(%s)", (text,)).fetchone()
    assert row is not None
    return list(row[0])


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("我周末去爬山了。山上很冷！你去过吗？", ["我周末去爬山了。", "山上很冷！", "你去过吗？"]),
        ("昨日は雨でした。今日は晴れです。", ["昨日は雨でした。", "今日は晴れです。"]),
        # a closing quote or bracket stays with its sentence; repeated marks are one end
        ("她说：「我不去。」后来她去了。", ["她说：「我不去。」", "后来她去了。"]),
        ("（笑）好的。\n明天见！", ["（笑）好的。", "明天见！"]),
        ("累死了。。。先睡了", ["累死了。。。", "先睡了"]),
        ("주말에 등산을 했어요. 정말 추웠어요!", ["주말에 등산을 했어요.", "정말 추웠어요!"]),
        ("我买了新车. 颜色是蓝色.", ["我买了新车.", "颜色是蓝色."]),
        ("一句话。", ["一句话。"]),
    ],
)
def test_chinese_japanese_and_korean_are_cut_into_their_sentences(
    db: psycopg.Connection[Any], text: str, sentences: list[str]
) -> None:
    assert _cut(db, text) == sentences


@pytest.mark.parametrize(
    "text",
    [
        "Traffic was terrible! I planted basil. Can it grow in shade?",
        "e.g. the cat sat. We paid 2.5 euros. Dr. Smith agreed.",
        "¿Vienes? ¡Claro! «Sí», dijo él.",
        "Он пришёл. Она ушла… Потом дождь.",
        "Ich war in Köln (schön). Danach: Bonn.",
        "no capital after this. so it stays one.",
        "",
    ],
)
def test_other_text_is_cut_as_before(db: psycopg.Connection[Any], text: str) -> None:
    row = db.execute(BEFORE, (text,)).fetchone()
    assert row is not None
    assert _cut(db, text) == list(row[0])


def test_an_upgrade_cuts_again_what_it_had_indexed_whole(
    empty_database: psycopg.Connection[Any],
) -> None:
    from agent_memory.db.migrations import load_migrations, migrate

    db = empty_database
    migrate(db, migrations=[m for m in load_migrations() if m.version <= 34])
    chinese = [
        {"role": "user", "content": "我养了一只猫。它叫小白。"},
        {"role": "assistant", "content": "好可爱！"},
    ]
    english = [{"role": "user", "content": "I have a cat. Her name is Snow."}]
    first = episode_repo.insert_sync(db, MEI, chinese, {})
    second = episode_repo.insert_sync(db, MEI, english, {})
    # drained as that release drained, by the schema's own function
    assert db.execute("SELECT agent_memory.index_pending(200, NULL)").fetchone() == (2,)
    before = db.execute(SNIPPETS).fetchall()
    assert [r[4] for r in before if r[1] == first] == ["我养了一只猫。它叫小白。", "好可爱！"]

    migrate(db)
    # the message indexed whole is queued to be cut again; the English one is kept as it was
    assert db.execute("SELECT episode_id FROM agent_memory.snippet_queue").fetchall() == [(first,)]
    assert db.execute(SNIPPETS).fetchall() == [r for r in before if r[1] == second]
    assert {tuple(r) for r in db.execute(KEPT)} == {tuple(r) for r in db.execute(RECOUNTED)}

    assert snippet_queue.drain_sync(db) == 1
    after = [r[2:] for r in db.execute(SNIPPETS).fetchall() if r[1] == first]
    assert after == [(0, 0, "我养了一只猫。"), (0, 1, "它叫小白。"), (1, 0, "好可爱！")]
    assert {tuple(r) for r in db.execute(KEPT)} == {tuple(r) for r in db.execute(RECOUNTED)}
    # run again, the migration finds nothing left to cut
    settled = db.execute(SNIPPETS).fetchall()
    db.execute(next(m for m in load_migrations() if m.version == 35).sql.encode("utf-8"))
    assert db.execute(SNIPPETS).fetchall() == settled
    assert db.execute("SELECT count(*) FROM agent_memory.snippet_queue").fetchone() == (0,)
