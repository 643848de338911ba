"""What a ranking reads of a large scope (agent_memory.db.fulltext, agent_memory.db.recall):
the scope's latest rows are read as a sample only when a question holds a word too common to
gather, and its latest facts (the rest that follows the matches) only when fewer than the
limit match; the words a ranking weighs are the words it matches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agent_memory.db import fulltext, recall
from agent_memory.db.fusion import ranked_params
from agent_memory.decay import today
from agent_memory.models import Scope
from benchmarks.retrieval import load_facts

SCOPE, OTHER = Scope("reads", "agent"), Scope("other", "agent")
FACTS = 2000
# every fact holds "common thing" (2,000 rows: too many to gather) and a topic of its own
# that one fact in a thousand holds (2 rows)


def _content(i: int) -> str:
    return f"The user keeps a common thing about topic{i % 1000} number{i}"


@pytest.fixture
def scope(db: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    load_facts(db, SCOPE, [{"content": _content(i), "importance": 0.5} for i in range(FACTS)])
    load_facts(db, OTHER, [{"content": _content(i), "importance": 0.5} for i in range(50)])
    yield db


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _ranked(
    db: psycopg.Connection[Any], question: str, limit: int
) -> tuple[list[tuple[int, float]], int]:
    """The text ranking's (id, score) rows for ``question``, and how many rows of the scope's
    facts it read other than by id (the sample, the latest, the rows holding a word)."""
    params = ranked_params(
        SCOPE, question, on=today(), min_importance=0.0, limit=limit, candidates=50
    )
    rows = [(int(r[0]), float(r[3])) for r in db.execute(recall.RANKED_TEXT, params)]
    explained = db.execute(
        "EXPLAIN (ANALYZE, FORMAT JSON) " + recall.RANKED_TEXT, params
    ).fetchone()
    assert explained is not None
    plan = explained[0] if isinstance(explained[0], list) else json.loads(explained[0])
    read = sum(
        node["Actual Rows"] * node["Actual Loops"]
        for node in _nodes(plan[0]["Plan"])
        if node.get("Relation Name") == "memory_items"
        and node.get("Index Name") != "memory_items_pkey"
        and "Bitmap Index" not in node["Node Type"]
    )
    return rows, read


def test_a_question_of_rare_words_reads_the_rows_holding_them_not_the_scope(
    scope: psycopg.Connection[Any],
) -> None:
    rows, read = _ranked(scope, "What about topic17 and topic923?", limit=3)
    assert len(rows) == 3 and all(score > 0 for _, score in rows)
    # the four facts holding the words: no sample of the latest 500, no latest facts
    assert read <= 10, read


def test_a_question_with_a_common_word_reads_the_latest_rows_as_before(
    scope: psycopg.Connection[Any],
) -> None:
    rows, read = _ranked(scope, "Tell me the common thing about topic17", limit=3)
    # the two facts holding the rare word first, whatever the common words add
    contents = dict(scope.execute("SELECT id, content FROM agent_memory.memory_items"))
    assert all("topic17 " in contents[i] for i, _ in rows[:2]), rows
    assert read >= fulltext._SAMPLE, read


def test_fewer_matches_than_the_limit_are_followed_by_the_rest(
    scope: psycopg.Connection[Any],
) -> None:
    rows, read = _ranked(scope, "What about topic17?", limit=5)
    assert [score > 0 for _, score in rows] == [True, True, False, False, False], rows
    assert read >= 3, read  # the latest facts were read for the rest


def test_a_word_past_the_weighed_32_is_not_a_match(scope: psycopg.Connection[Any]) -> None:
    # 32 words no fact holds come first in lexeme order ("aa..."), then one every fact holds
    padding = " ".join(f"aa{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(32))
    rows, _ = _ranked(scope, f"{padding} topic17", limit=3)
    # topic17 is not weighed: nothing matches, and the rest follows unscored
    assert [score for _, score in rows] == [0.0, 0.0, 0.0], rows
