"""The episodic tier by relevance: searching the messages of past conversations.

Every sentence of every message is a snippet, found by full text (BM25 within the scope) and by
meaning (its embedding, made by the flows), fused as facts are (see
:mod:`agent_memory.db.recall`), with recency as the bounded prior: ``relevance * (1 - p + p *
recency)``.

A recorded episode waits in ``agent_memory.snippet_queue`` until a drain makes its snippets
(sql/0026_snippet_queue.sql, :mod:`agent_memory.db.snippet_queue`). Meanwhile the search reads
the sentences of the scope's newest ``PENDING_SEARCHED`` waiting episodes from their messages
(``agent_memory.episode_snippets``, the drain's own rows), counts them in the full-text
statistics and scores them with the stored ones, by full text only (they have no vector yet).
Such a snippet has no id (None). With nothing queued this costs one probe of the queue's key.
"""

from __future__ import annotations

import functools
from datetime import date, datetime
from typing import Any

from agent_memory.db.ann_indexes import AnnIndex
from agent_memory.db.dual import Steps, dual
from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.db.fulltext import text_hits
from agent_memory.db.fusion import DEFAULT_FUSION, FUSED, Fusion
from agent_memory.db.nearest import NO_VECTOR_HITS, by_id, vector_hits
from agent_memory.db.query_vector import QueryVector
from agent_memory.db.recall import Ranking, fetch_ranking_steps
from agent_memory.decay import day_index
from agent_memory.models import Reply, Scope, Snippet

_IN_RANGE = f"""m.{SCOPE_MATCH}
      AND m.occurred_at >= coalesce(%(since)s, '-infinity'::timestamptz)
      AND m.occurred_at < coalesce(%(until)s, 'infinity'::timestamptz)"""

# the newest waiting episodes of a scope whose sentences a search reads from their messages
PENDING_SEARCHED = 50
# a waiting sentence's id within a statement: negative, increasing as the stored ids do
_PENDING_ID = -(2**62)

# The sentences of the scope's newest waiting episodes, as the drain will store them, with
# their full-text vectors computed now (as the snippets' generated column does) and whether the
# search's date range admits them.
_PENDING = f"""pending AS MATERIALIZED (
    SELECT {_PENDING_ID} + row_number() OVER (ORDER BY e.id, p.position, p.part) AS id,
           e.id AS episode_id, p.position, p.part, p.speaker, p.role, e.occurred_at, p.content,
           agent_memory.search_vector(p.speaker || ': ' || p.content) AS search,
           e.occurred_at >= coalesce(%(since)s, '-infinity'::timestamptz)
               AND e.occurred_at < coalesce(%(until)s, 'infinity'::timestamptz) AS searched
    FROM (SELECT q.episode_id FROM agent_memory.snippet_queue q
          WHERE %(text)s::text IS NOT NULL AND q.{SCOPE_MATCH}
          ORDER BY q.episode_id DESC LIMIT {PENDING_SEARCHED}) AS q
    CROSS JOIN LATERAL {by_id("agent_memory.episodes", "q.episode_id")} AS e
    CROSS JOIN LATERAL agent_memory.episode_snippets(e.messages) AS p
)"""
# a found row: a stored snippet by its id, or a waiting one
_FOUND = f"""(SELECT s.id, s.episode_id, s.position, s.speaker, s.role, s.occurred_at, s.content
     FROM {by_id("agent_memory.snippets", "f.id")} AS s WHERE f.id > 0
     UNION ALL
     SELECT p.id, p.episode_id, p.position, p.speaker, p.role, p.occurred_at, p.content
     FROM pending p WHERE f.id < 0 AND p.id = f.id)"""

# A question's sentence is shown with the reply that follows it (the next message of the
# episode, by another speaker): a question says what was asked, the reply what is true, and a
# question that restates the user's words matches them better than the short reply that
# answers it ("Can they do any tricks?" before "Sit, stay, paw and rollover").
_SEARCH = f"""
WITH {_PENDING},
{text_hits("agent_memory.snippets", _IN_RANGE, "occurred_at", "s", pending="pending", scoped=True)},
{{vector_hits}},
{FUSED},
best AS (
    SELECT s.id, s.episode_id, s.position, s.speaker, s.role, s.occurred_at, s.content,
           f.relevance * (1 - %(prior_weight)s + %(prior_weight)s
               * exp(greatest(-ln(2) * greatest(%(day)s - agent_memory.day_index(s.occurred_at), 0)
                              / %(half_life)s::float8, -700))) AS score
    FROM fused f CROSS JOIN LATERAL {_FOUND} AS s
    WHERE f.relevance > 0
    ORDER BY score DESC, s.occurred_at DESC, s.id
    LIMIT %(limit)s
)
SELECT b.id, b.episode_id, b.position, b.speaker, b.occurred_at, b.content, b.score, b.role,
       reply.position, reply.speaker, reply.content
FROM best b
LEFT JOIN LATERAL (
    SELECT n.position, n.speaker, string_agg(n.content, ' ' ORDER BY n.part) AS content
    FROM (SELECT s.episode_id, s.position, s.part, s.speaker, s.content
          FROM agent_memory.snippets s WHERE b.id > 0
          UNION ALL
          SELECT p.episode_id, p.position, p.part, p.speaker, p.content
          FROM pending p WHERE b.id < 0) AS n
    WHERE %(replies)s::bool AND b.content ~ '[?][^[:alnum:]]*$'
      AND n.episode_id = b.episode_id AND n.position = b.position + 1 AND n.speaker <> b.speaker
    GROUP BY n.position, n.speaker
) AS reply ON true
ORDER BY b.score DESC, b.occurred_at DESC, b.id
"""

SEARCH_TEXT = _SEARCH.format(vector_hits=NO_VECTOR_HITS)
SEARCH_HYBRID = _SEARCH.format(
    vector_hits=vector_hits(
        "agent_memory.snippets", "agent_memory.snippet_embeddings", "snippet_id", _IN_RANGE
    )
)


@functools.lru_cache(maxsize=1024)
def search_hybrid_ann(ann: AnnIndex) -> str:
    """:data:`SEARCH_HYBRID` reading a large scope's nearest messages from its HNSW index."""
    return _SEARCH.format(
        vector_hits=vector_hits(
            "agent_memory.snippets",
            "agent_memory.snippet_embeddings",
            "snippet_id",
            _IN_RANGE,
            ann,
            queue="%(queue)s",
        )
    )


def search_params(
    scope: Scope,
    text: str,
    *,
    on: date,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 10,
    candidates: int = 50,
    fusion: Fusion = DEFAULT_FUSION,
    replies: bool = True,
    queue: int | None = None,
) -> dict[str, Any]:
    """The parameters of a search; ``replies``: a question is shown with the reply after it;
    ``queue``: how many nearest a scope's HNSW index is read for (default ``2 * candidates``,
    a margin for the rows the date range drops)."""
    return {
        **scope.as_dict(),
        "text": text,
        "vector": None,
        "model": None,
        "since": since,
        "until": until,
        "day": day_index(on),
        "limit": limit,
        "candidates": candidates,
        "replies": replies,
        "queue": queue or 2 * candidates,
        **fusion.params(),
    }


def search_ranking(
    params: dict[str, Any], vector: list[float] | None = None, ann: AnnIndex | None = None
) -> Ranking:
    """The statement of :func:`search_steps` (whose rows :func:`found_snippets` reads)."""
    if vector is None or not params.get("model"):
        return Ranking(SEARCH_TEXT, params)
    query = SEARCH_HYBRID if ann is None else search_hybrid_ann(ann)
    return Ranking(query, {**params, "vector": QueryVector(vector)}, ann is not None)


def found_snippets(rows: list[Any]) -> list[Snippet]:
    """The snippets of a search statement's rows, best first."""
    return [
        Snippet(
            id=r[0] if r[0] > 0 else None,
            episode_id=r[1],
            position=r[2],
            speaker=r[3],
            occurred_at=r[4],
            content=r[5],
            score=round(float(r[6]), 6),
            role=r[7],
            reply=Reply(position=r[8], speaker=r[9], content=r[10]) if r[8] is not None else None,
        )
        for r in rows
    ]


def search_steps(
    params: dict[str, Any],
    vector: list[float] | None = None,
    ann: AnnIndex | None = None,
) -> Steps[list[Snippet]]:
    """The scope's messages most relevant to ``params["text"]`` (by meaning too when
    ``vector`` and ``params["model"]`` are given; through the scope's own HNSW index ``ann``
    when it has one), best first."""
    statement = search_ranking(params, vector, ann)
    return found_snippets(
        (yield from fetch_ranking_steps(statement.query, statement.values, statement.index))
    )


search, search_sync = dual(search_steps)
