"""A scope's sentences holding a question's rare words are read from an index of each row's words
with its scope's own word (sql/0027_scoped_search.sql), not by testing the scope's every
sentence: the rows found are the scope's own whatever its key holds, old ones beyond the latest
rows included, and a generic plan reads them from that index."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from agent_memory.db import fulltext, snippet_queue
from agent_memory.db import snippets as snippet_repo
from agent_memory.db.connection import prefer_generic_plans
from agent_memory.decay import today
from agent_memory.models import Scope

# quotes, a backslash and a comma: what the scope's key quotes, and its word must survive
ODD = Scope('o\'brien\\x, "jr"', "agent")
OTHER = Scope("someone-else", "agent")
FILLER = "We talked about the weather and the week again."


def _episode(db: psycopg.Connection[Any], scope: Scope, texts: list[str], day: int) -> None:
    messages = [{"role": "user", "content": t} for t in texts]
    db.execute(
        "INSERT INTO agent_memory.episodes (user_id, agent_id, messages, message_count,"
        " occurred_at) VALUES (%s, %s, %s, %s, now() - make_interval(days => %s))",
        (scope.user_id, scope.agent_id, json.dumps(messages), len(messages), day),
    )


def _search(db: psycopg.Connection[Any], scope: Scope, text: str) -> list[str]:
    params = snippet_repo.search_params(scope, text, on=today(), limit=20, replies=False)
    return [s.content for s in snippet_repo.search_sync(db, params)]


def test_old_sentences_with_a_rare_word_are_found_in_their_own_scope_only(
    db: psycopg.Connection[Any],
) -> None:
    # the oldest three sentences hold the rare word; more than the sampled latest rows follow
    rare = ["Zanzibar again.", "Zanzibar was where we met.", "Zanzibar, once more."]
    _episode(db, ODD, rare, 400)
    for day in range(fulltext._SAMPLE // 10 + 5):
        _episode(db, ODD, [FILLER] * 10, 300 - day)
    # another scope holds the word many times, and newer
    for day in range(30):
        _episode(db, OTHER, ["Zanzibar is lovely in June."] * 10, day)
    assert snippet_queue.drain_sync(db, None) > 0
    prefer_generic_plans(db)  # the plan an agent's pooled connection gets
    for _ in range(7):  # past the point where a prepared statement keeps its generic plan
        found = _search(db, ODD, "Where is Zanzibar?")
        assert sorted(found) == rare
    assert _search(db, OTHER, "Where is Zanzibar?") == ["Zanzibar is lovely in June."] * 20


def test_the_scope_word_hashes_any_key_and_matches_its_own_rows_only(
    db: psycopg.Connection[Any],
) -> None:
    row = db.execute(
        """SELECT agent_memory.scoped_search(a, to_tsvector('english', 'zanzibar'))
                  @@ (to_tsquery('english', 'zanzibar') && agent_memory.scope_word(a)),
                  agent_memory.scoped_search(a, to_tsvector('english', 'zanzibar'))
                  @@ (to_tsquery('english', 'zanzibar') && agent_memory.scope_word(b))
           FROM (SELECT agent_memory.scope_key(%s, %s, NULL) AS a,
                        agent_memory.scope_key(%s, %s, NULL) AS b) AS k""",
        (ODD.user_id, ODD.agent_id, OTHER.user_id, OTHER.agent_id),
    ).fetchone()
    assert row == (True, False)


def test_the_rare_words_condition_is_the_scoped_index_s_own(db: psycopg.Connection[Any]) -> None:
    # at a test's few rows a scan of the table is cheaper; what matters is that the statement's
    # condition is the index's expression, so that a large table's plan can read the index
    db.execute("SET enable_seqscan = off")
    statement = fulltext.text_hits(
        "agent_memory.snippets",
        "m.scope_key = agent_memory.scope_key(%(user_id)s, %(agent_id)s, %(workflow_id)s)",
        "occurred_at",
        "s",
        scoped=True,
    )
    query = f"EXPLAIN WITH {statement} SELECT id FROM text_hits"  # noqa: S608 (our SQL)
    params = {**ODD.as_dict(), "text": "Zanzibar?", "candidates": 50}
    plan = "\n".join(r[0] for r in db.execute(query, params).fetchall())
    assert "Bitmap Index Scan on snippets_scoped_search_idx" in plan, plan
