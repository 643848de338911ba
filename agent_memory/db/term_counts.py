"""The scopes' full-text statistics (sql/0017_term_counts.sql): folding the changes appended by
each write into one row per word, so that a reader sums few rows: a whole scope's (the flows;
the Store's puts fold their scope once it has 32 new facts, agent_memory.fold_fact_terms). A
new fact's words are appended as one row that lists them, and a fold writes them into their
words' rows (sql/0037_fact_words_in_one_row.sql)."""

from __future__ import annotations

from typing import Any

import psycopg

from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.models import Scope

COMPACT_SCOPE = (
    "SELECT agent_memory.compact_term_counts(" + SCOPE_MATCH.removeprefix("scope_key = ") + ")"
)

# the lock compact_term_counts tries for a scope (sql/0017), waited for
WAIT_SCOPE = (
    "SELECT pg_advisory_xact_lock(hashtext('agent_memory.term_counts'), hashtext("
    + SCOPE_MATCH.removeprefix("scope_key = ")
    + "))"
)

# every scope with a word counted in more than one row, or in a new fact's list (sql/0037)
COMPACT_ALL = """
SELECT coalesce(sum(agent_memory.compact_term_counts(scope_key)), 0)
FROM (SELECT DISTINCT scope_key FROM agent_memory.term_counts
      GROUP BY corpus, scope_key, lexeme HAVING count(*) > 1 OR count(words) > 0) AS spread
"""


async def compact(conn: psycopg.AsyncConnection[Any], scope: Scope | None = None) -> int:
    """Fold ``scope``'s counts (every scope's when None); how many rows that folded (read and
    written again as one row per word, sql/0037). A scope another transaction is folding at
    the time is left to it."""
    if scope is None:
        cur = await conn.execute(COMPACT_ALL)
    else:
        cur = await conn.execute(COMPACT_SCOPE, scope.as_dict())
    row = await cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


async def fold(conn: psycopg.AsyncConnection[Any], scope: Scope) -> int:
    """:func:`compact` of ``scope``, waiting for a transaction folding it now rather than
    leaving it: after an erasure, a word no fact of the scope holds any more keeps no row."""
    await conn.execute(WAIT_SCOPE, scope.as_dict())
    return await compact(conn, scope)
