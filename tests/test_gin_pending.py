"""The words indexes inject reads keep no pending list (sql/0033): in a table that has just
grown by many rows, with no VACUUM since, the snippet search still reads its scope's rows from
the scoped words index instead of every row of the table (what a GIN index's pending list,
PostgreSQL's default, led the planner to)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agent_memory.db import snippet_queue
from agent_memory.db import snippets as snippet_repo
from agent_memory.db.connection import prefer_generic_plans
from agent_memory.decay import today
from agent_memory.models import Scope

SCOPE = Scope("user-7", "agent")
INDEXES = ("memory_items_search_idx", "snippets_search_idx", "snippets_scoped_search_idx")


def _grow(db: psycopg.Connection[Any], episodes: int) -> int:
    """``episodes`` conversations of ten sentences each over 50 scopes, indexed into snippets
    by the drain as the background indexing does; the snippets made."""
    db.execute(
        """INSERT INTO agent_memory.episodes (user_id, agent_id, messages, message_count,
                                              occurred_at)
           SELECT 'user-' || (n %% 50), 'agent',
                  jsonb_build_array(jsonb_build_object('role', 'user', 'content',
                      (SELECT string_agg(format('I use tool %%s on turn %%s for task %%s.',
                                                n %% 17, n, k), ' ')
                       FROM generate_series(1, 10) AS k))),
                  1, now() - make_interval(mins => n)
           FROM generate_series(1, %s) AS n""",
        (episodes,),
    )
    while snippet_queue.drain_sync(db, None):
        pass
    (made,) = db.execute("SELECT count(*) FROM agent_memory.snippets").fetchone() or (0,)
    return int(made)


def _plan(db: psycopg.Connection[Any]) -> str:
    params = snippet_repo.search_params(SCOPE, "How should I use tool 3 for turn 7?", on=today())
    rows = db.execute("EXPLAIN " + snippet_repo.SEARCH_TEXT, params).fetchall()
    return "\n".join(r[0] for r in rows)


def test_the_words_indexes_keep_no_pending_list(db: psycopg.Connection[Any]) -> None:
    rows = db.execute(
        "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s) ORDER BY 1",
        (list(INDEXES),),
    ).fetchall()
    assert rows == [(name, ["fastupdate=off"]) for name in sorted(INDEXES)]


@pytest.mark.parametrize("fastupdate", ["off", "on"])
def test_a_table_just_grown_is_searched_through_its_index(
    db: psycopg.Connection[Any], fastupdate: str
) -> None:
    # on: the index as PostgreSQL makes it by default, the control (its list kept whole here:
    # how much of it is moved into the index as rows come depends on their words)
    db.execute(
        f"ALTER INDEX agent_memory.snippets_scoped_search_idx SET (fastupdate = {fastupdate},"
        " gin_pending_list_limit = 65536)"
    )
    # a VACUUM (autovacuum's, on a table just grown) empties the list: none in this test
    db.execute("ALTER TABLE agent_memory.snippets SET (autovacuum_enabled = false)")
    assert _grow(db, 3000) >= 20_000
    db.commit()
    prefer_generic_plans(db)
    plan = _plan(db)
    if fastupdate == "off":
        assert "snippets_scoped_search_idx" in plan, plan
        assert "Seq Scan on snippets" not in plan, plan
    else:  # what the migration changed: the table read row by row
        assert "Seq Scan on snippets" in plan, plan
    pending = db.execute(
        "SELECT gin_clean_pending_list('agent_memory.snippets_scoped_search_idx')"
    ).fetchone()
    assert pending is not None and (pending[0] > 100) == (fastupdate == "on")
