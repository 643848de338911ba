"""The scopes' full-text statistics (sql/0017_term_counts.sql): folding the changes appended by
each write into one row per word, so that a reader sums few rows: a whole scope's (the flows),
or the words a Store write just counted once they have spread over ``SPREAD`` rows."""

from __future__ import annotations

import weakref
from typing import Any

import psycopg

from agent_memory.db.dual import Connection, Run, Steps
from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.models import Scope

COMPACT_SCOPE = (
    "SELECT agent_memory.compact_term_counts(" + SCOPE_MATCH.removeprefix("scope_key = ") + ")"
)

# every scope with a word counted in more than one row
COMPACT_ALL = """
SELECT coalesce(sum(agent_memory.compact_term_counts(scope_key)), 0)
FROM (SELECT DISTINCT scope_key FROM agent_memory.term_counts
      GROUP BY corpus, scope_key, lexeme HAVING count(*) > 1) AS spread
"""


async def compact(conn: psycopg.AsyncConnection[Any], scope: Scope | None = None) -> int:
    """Fold ``scope``'s counts (every scope's when None); how many rows that removed. A scope
    another transaction is folding at the time is left to it."""
    if scope is None:
        cur = await conn.execute(COMPACT_ALL)
    else:
        cur = await conn.execute(COMPACT_SCOPE, scope.as_dict())
    row = await cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


# Folding as facts are written: a write appends a row per word of each fact it adds or removes
# (and one for the rows themselves, lexeme ''), so a busy scope's counts grow by about ten rows a
# put, and every reader sums them (sql/0017). After a write, the words of the facts it wrote
# that have SPREAD rows or more in their scope are folded into one row each. That bounds what
# a reader sums for a word by SPREAD, at the cost of a few index probes a write (a fold of all
# a scope's words, compact_term_counts, reads every row of the scope: tens of milliseconds for
# a scope of 10,000 facts). A scope another transaction is folding is left to it (the lock of
# compact_term_counts), so writers never wait on each other here; a word only ever removed is
# left to the flows' compaction.
SPREAD = 32

FOLD_WRITTEN = f"""
WITH touched AS (
    SELECT DISTINCT m.scope_key, lexeme
    FROM agent_memory.memory_items m,
         unnest(tsvector_to_array(m.search) || ARRAY['']::text[]) AS lexeme
    WHERE m.id = ANY(%(ids)s)
),
spread AS MATERIALIZED (
    SELECT t.scope_key, t.lexeme FROM touched t
    WHERE (SELECT count(*) FROM (SELECT FROM agent_memory.term_counts k
                                 WHERE k.corpus = 'f' AND k.scope_key = t.scope_key
                                   AND k.lexeme = t.lexeme LIMIT {SPREAD}) AS r) >= {SPREAD}
),
held AS MATERIALIZED (
    SELECT scope_key FROM (SELECT DISTINCT scope_key FROM spread) AS s
    WHERE pg_try_advisory_xact_lock(hashtext('agent_memory.term_counts'), hashtext(scope_key))
),
gone AS (
    DELETE FROM agent_memory.term_counts k USING spread s, held h
    WHERE k.corpus = 'f' AND k.scope_key = s.scope_key AND k.lexeme = s.lexeme
      AND h.scope_key = s.scope_key
    RETURNING k.scope_key, k.lexeme, k.docs, k.size
),
folded AS (
    INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
    SELECT 'f', scope_key, lexeme, sum(docs), sum(size) FROM gone GROUP BY scope_key, lexeme
    HAVING sum(docs) <> 0 OR sum(size) <> 0
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) - (SELECT count(*) FROM folded)
"""

# A tenant's role holds no DELETE right on the counts (sql/0019: it would allow LOCK TABLE);
# its scopes are folded by the flows. Asked once per connection.
MAY_FOLD = "SELECT has_table_privilege('agent_memory.term_counts', 'DELETE')"

_may_fold: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def fold_written_steps(fact_ids: list[int]) -> Steps[int]:
    """Fold the spread words of the facts ``fact_ids`` just written (see ``SPREAD``); how many
    rows that removed."""
    if not fact_ids:
        return 0
    conn = yield Connection()
    if conn not in _may_fold:
        row = yield Run(MAY_FOLD, None, "one")
        _may_fold[conn] = bool(row and row[0])
    if not _may_fold[conn]:
        return 0
    row = yield Run(FOLD_WRITTEN, {"ids": fact_ids}, "one")
    return int(row[0]) if row and row[0] is not None else 0
