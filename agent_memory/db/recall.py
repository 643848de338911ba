"""Relevance-aware recall of a scope's facts, reinforcement on use, and the episodic log.

Ranking, as in Generative Agents: score = w_i * importance + w_r * recency + w_v * relevance,
each component min-max normalised over the scored candidates so that no one of them dominates
by its scale. The candidates are the scope's ``candidates`` most important current facts; a
scope larger than that adds its ``candidates`` most important facts that match the question
(text) or are nearest to it (embeddings), so a relevant fact of low importance is still found.

* importance: the current (decayed) importance;
* recency: 0.5 ** (days since the fact was last mentioned or used / half-life), computed as
  exp(-ln 2 * days / half-life) floored so that a very old fact is ~0, never an underflow;
* relevance: full-text ``ts_rank`` of the fact against the latest user message (any of its
  words, stemmed), or cosine similarity of embeddings (see :mod:`agent_memory.db.embeddings`).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from agent_memory.db.embeddings import vector_text
from agent_memory.db.fragments import LAMBDA, SCOPE_MATCH
from agent_memory.decay import MIN_IMPORTANCE, day_index
from agent_memory.models import Episode, HistoryEntry, Scope

# Any word of the message, stemmed: plainto_tsquery ANDs the words (and chains compounds with
# <->); every operator between two quoted lexemes becomes OR. NULL text: no relevance.
_QUERY = """(SELECT regexp_replace(plainto_tsquery('english', %(text)s)::text,
                                  ' (&|<->|<[0-9]+>) ', ' | ', 'g')::tsquery AS q)"""

_CURRENT = f"""{SCOPE_MATCH} AND m.superseded_at IS NULL
      AND m.decay_rank >= ln(%(min_importance)s) + %(day)s * {LAMBDA}"""

_SCORE = f"""
scored AS (
    SELECT m.id, m.content, m.decay_rank,
           least(1.0, exp(greatest(m.decay_rank - %(day)s * {LAMBDA}, -700))) AS importance,
           exp(greatest(-ln(2) * greatest(%(day)s - agent_memory.day_index(m.importance_at), 0)
                        / %(half_life)s::float8, -700)) AS recency,
           {{relevance}} AS relevance
    FROM candidates c JOIN agent_memory.memory_items m ON m.id = c.id {{join}}
),
normalised AS (
    SELECT *,
        coalesce((importance - min(importance) OVER w)
                 / nullif(max(importance) OVER w - min(importance) OVER w, 0), 0) AS n_importance,
        coalesce((recency - min(recency) OVER w)
                 / nullif(max(recency) OVER w - min(recency) OVER w, 0), 0) AS n_recency,
        coalesce((relevance - min(relevance) OVER w)
                 / nullif(max(relevance) OVER w - min(relevance) OVER w, 0), 0) AS n_relevance
    FROM scored
    WINDOW w AS ()
)
SELECT id, content, importance,
       %(w_importance)s * n_importance + %(w_recency)s * n_recency
       + %(w_relevance)s * n_relevance AS score
FROM normalised
ORDER BY score DESC, decay_rank DESC, id
LIMIT %(limit)s
"""

# The scope's most important current facts. A scope with fewer than ``candidates`` of them is
# all here, so the second branch of the queries below (matches, nearest) is only run for a
# larger scope: a prepared statement's generic plan cannot tell how many rows the question's
# words match, and would otherwise AND the scope with a GIN bitmap of every scope's matches
# (7.3 ms instead of 0.96 ms p50 at 1M facts over 10k scopes).
_TOP = f"""top AS (
    SELECT m.id FROM agent_memory.memory_items m
    WHERE {_CURRENT}
    ORDER BY m.decay_rank DESC LIMIT %(candidates)s
)"""
_LARGE_SCOPE = "(SELECT count(*) FROM top) >= %(candidates)s"

# Full-text relevance: the most important candidates, plus the scope's text matches.
RANKED_TEXT = f"""
WITH query AS {_QUERY},
{_TOP},
candidates AS (
    SELECT id FROM top
    UNION
    (SELECT m.id FROM agent_memory.memory_items m, query
     WHERE {_LARGE_SCOPE} AND {_CURRENT} AND m.search @@ query.q
     ORDER BY m.decay_rank DESC LIMIT %(candidates)s)
),
{
    _SCORE.format(
        relevance="coalesce(ts_rank(m.search, query.q, 1), 0)",
        join="CROSS JOIN query",
    )
}"""

# Embedding relevance: the most important candidates, plus the scope's nearest facts. A stored
# vector of other dimensions than the question's (the model's output size changed) counts as
# unrelated rather than failing the query.
RANKED_VECTOR = f"""
WITH {_TOP},
candidates AS (
    SELECT id FROM top
    UNION
    (SELECT m.id FROM agent_memory.memory_items m
     JOIN agent_memory.fact_embeddings e ON e.fact_id = m.id AND e.model = %(model)s
          AND vector_dims(e.embedding) = vector_dims(%(vector)s::vector)
     WHERE {_LARGE_SCOPE} AND {_CURRENT}
     ORDER BY e.embedding <=> %(vector)s::vector LIMIT %(candidates)s)
),
{
    _SCORE.format(
        relevance="coalesce(1 - (e.embedding <=> %(vector)s::vector), 0)",
        join="LEFT JOIN agent_memory.fact_embeddings e ON e.fact_id = m.id AND e.model = %(model)s"
        " AND vector_dims(e.embedding) = vector_dims(%(vector)s::vector)",
    )
}"""

# Restart the decay clock of facts just used: each is as important today as when it was last
# mentioned. At most once a day per fact (decay moves in whole days), so a busy agent does not
# rewrite the same rows on every turn.
#
# It is best effort and never waits on the hot path: rows another transaction holds (a
# consolidation writing the scope) are skipped, and so is everything while the decay factor is
# being changed (a rebase holds the policy row), so the rank is never computed with a stale one.
REFRESH = f"""
WITH policy AS (
    SELECT -ln(factor) AS lam FROM agent_memory.decay_policy FOR SHARE SKIP LOCKED
),
used AS (
    SELECT m.id FROM agent_memory.memory_items m
    WHERE m.id = ANY(%(ids)s) AND {SCOPE_MATCH}
      AND m.superseded_at IS NULL
      AND agent_memory.day_index(m.importance_at) < agent_memory.day_index(%(at)s)
    ORDER BY m.id
    FOR UPDATE SKIP LOCKED
)
UPDATE agent_memory.memory_items m
SET importance_at = %(at)s,
    decay_rank = ln(m.importance) + agent_memory.day_index(%(at)s) * policy.lam
FROM used, policy
WHERE m.id = used.id
"""

HISTORY = f"""
SELECT occurred_at, summary
FROM agent_memory.episodes
WHERE {SCOPE_MATCH} AND summary IS NOT NULL AND occurred_at < %(before)s
ORDER BY occurred_at DESC, id DESC
LIMIT %(limit)s
"""

BETWEEN = f"""
SELECT id, user_id, agent_id, workflow_id, messages, occurred_at, created_at, consolidated,
       summary
FROM agent_memory.episodes
WHERE {SCOPE_MATCH}
  AND occurred_at >= coalesce(%(since)s, '-infinity'::timestamptz)
  AND occurred_at < coalesce(%(until)s, 'infinity'::timestamptz)
ORDER BY occurred_at, id
LIMIT %(limit)s
"""


def ranked_params(
    scope: Scope,
    text: str | None,
    *,
    on: date,
    min_importance: float,
    limit: int,
    candidates: int,
    weights: tuple[float, float, float],
    half_life_days: float,
) -> dict[str, Any]:
    return {
        **scope.as_dict(),
        "text": text,
        "day": day_index(on),
        "min_importance": max(min_importance, MIN_IMPORTANCE),
        "limit": limit,
        "candidates": candidates,
        "w_importance": weights[0],
        "w_recency": weights[1],
        "w_relevance": weights[2],
        "half_life": half_life_days,
    }


Ranked = list[tuple[int, str, float, float]]  # fact id, content, importance, score


def _rows(rows: list[Any]) -> Ranked:
    return [(int(r[0]), str(r[1]), float(r[2]), float(r[3])) for r in rows]


async def ranked(
    conn: psycopg.AsyncConnection[Any], params: dict[str, Any], vector: list[float] | None = None
) -> Ranked:
    """The best facts by the weighted score (see the module); by full-text relevance, or by
    embeddings when ``vector`` (the question's embedding) and ``params["model"]`` are given."""
    query = RANKED_VECTOR if vector is not None else RANKED_TEXT
    cur = await conn.execute(query, {**params, "vector": _vector(vector)})
    return _rows(await cur.fetchall())


def ranked_sync(
    conn: psycopg.Connection[Any], params: dict[str, Any], vector: list[float] | None = None
) -> Ranked:
    query = RANKED_VECTOR if vector is not None else RANKED_TEXT
    return _rows(conn.execute(query, {**params, "vector": _vector(vector)}).fetchall())


def _vector(vector: list[float] | None) -> str | None:
    return None if vector is None else vector_text(vector)


def refresh_params(scope: Scope, ids: list[int], at: datetime) -> dict[str, Any]:
    return {**scope.as_dict(), "ids": ids, "at": at}


async def refresh(
    conn: psycopg.AsyncConnection[Any], scope: Scope, ids: list[int], at: datetime
) -> int:
    """Reinforce on use: restart these facts' decay clocks at ``at``; how many changed."""
    if not ids:
        return 0
    cur = await conn.execute(REFRESH, refresh_params(scope, ids, at))
    return cur.rowcount


def refresh_sync(conn: psycopg.Connection[Any], scope: Scope, ids: list[int], at: datetime) -> int:
    if not ids:
        return 0
    return conn.execute(REFRESH, refresh_params(scope, ids, at)).rowcount


def _history(rows: list[Any]) -> list[HistoryEntry]:
    return [HistoryEntry(occurred_at=r[0], summary=r[1]) for r in rows]


async def history(
    conn: psycopg.AsyncConnection[Any], scope: Scope, limit: int, before: datetime
) -> list[HistoryEntry]:
    """The scope's ``limit`` most recent summarised episodes before ``before``, newest first."""
    cur = await conn.execute(HISTORY, {**scope.as_dict(), "limit": limit, "before": before})
    return _history(await cur.fetchall())


def history_sync(
    conn: psycopg.Connection[Any], scope: Scope, limit: int, before: datetime
) -> list[HistoryEntry]:
    rows = conn.execute(HISTORY, {**scope.as_dict(), "limit": limit, "before": before}).fetchall()
    return _history(rows)


async def between(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    since: datetime | None,
    until: datetime | None,
    limit: int,
) -> list[Episode]:
    """The scope's episodes that happened in [since, until), oldest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        params = {**scope.as_dict(), "since": since, "until": until, "limit": limit}
        await cur.execute(BETWEEN, params)
        return [Episode.model_validate(row) for row in await cur.fetchall()]
