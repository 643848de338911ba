"""Relevance-led recall of a scope's facts, reinforcement on use, and the episodic log.

Hybrid ranking (``AGENT_MEMORY_INJECT_RANKING=hybrid``, the default). Relevance decides; the
priors only order comparable matches:

* candidates: the scope's ``candidates`` best full-text matches of the question, by BM25 over
  the scope (any of its words, stemmed, each weighed by how rare it is there), and its
  ``candidates`` nearest facts by meaning (cosine distance of embeddings, pgvector);
* fusion into one relevance, ``relative`` by default: ``sum of w * n`` with each ranking's
  scores in [0, 1]. For full text, n is the share of the question's weight (the sum of its
  words' IDF) that a fact holds, so a fact matching one common word of the question counts for
  little however it ranks; for meaning, n is the cosine similarity, clipped at 0. Both are
  absolute rather than scaled to the best candidate found, so a scope's best fact is not made
  a perfect match because its others are worse, and facts and conversation snippets
  (:mod:`agent_memory.db.snippets`) score alike. ``fusion="rrf"``: reciprocal rank
  fusion, ``sum of w / (k + rank)`` (Cormack et al., 2009), which needs no scores at all; both
  are measured side by side by ``python -m benchmarks.recall``;
* the text gate (``text_gate``, on by default): the meaning ranking's weight is scaled by the
  share of the question's weight that its best full-text match does not hold, ``w_vector *
  (1 - max n_text)``. A question whose words a fact holds is answered by them, and similarity
  by meaning (the bundled static model's especially, which finds every chatty message a little
  like every question) cannot push that fact down; a question none of whose words any fact
  holds is left to meaning at full weight;
* the meaning floor (``vector_floor``, on by default): once a scope has ``candidates`` rows
  by meaning, a row's ``n`` is its similarity above the last of them, rescaled to [0, 1]. An
  embedding model gives every text some likeness to every question (a static model like the
  bundled one, averaging its words' vectors, gives chatty messages much of it, and so do
  anisotropic remote models), which says nothing about any one row; like a word that every row
  holds (whose IDF is near 0), it should not outweigh a word match. A smaller scope keeps the
  plain cosine, so a lone matching fact is not made worthless;
* priors: ``prior = (w_i * importance + w_r * recency) / (w_i + w_r)``, both in [0, 1]
  (importance is the current, decayed one; recency halves every ``half_life`` days since the
  fact was last mentioned or used);
* score of a match: ``relevance * (1 - p + p * prior)`` with ``p = prior_weight`` < 1. The
  prior can lower a match's relevance by at most the factor ``1 - p``, so it re-orders only
  matches whose relevance lies within that factor of each other, and never lifts a fact that
  does not match above one that does;
* the rest: when fewer than ``limit`` facts match, the scope's most important facts follow
  every match, ordered by the prior alone, with score 0 (they are read only then);
* no question (a proactive agent, the first turn): the prior alone, over the scope's
  ``candidates`` most important facts.

``text`` or ``vector`` rankings are the same query with one side left out.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from agent_memory.db.ann_indexes import AnnIndex
from agent_memory.db.dual import Connection, Run, Steps, Transaction, dual
from agent_memory.db.fragments import SCOPE_MATCH, importance_on
from agent_memory.db.fulltext import text_hits
from agent_memory.db.fusion import FUSED
from agent_memory.db.nearest import NO_VECTOR_HITS, by_id, vector_hits
from agent_memory.db.query_vector import QueryVector, sendable
from agent_memory.models import Scope
from agent_memory.settings import MAX_HALF_LIFE


def current(match: str) -> str:
    """A current fact (not superseded, above the importance floor) that ``match`` admits."""
    return f"""{match} AND m.superseded_at IS NULL
      AND {importance_on("m.expires_day", "%(day)s", "m.half_life")} >= %(min_importance)s"""


_CURRENT = current(SCOPE_MATCH)


FACTS = "agent_memory.memory_items"
EMBEDDINGS = "agent_memory.fact_embeddings"
# the full-text side of the ranking of one scope (read alone by tests/test_term_counts.py)
_TEXT_HITS = text_hits(FACTS, _CURRENT, "expires_day", "f")
_TOP = f"""SELECT m.id FROM {FACTS} m
    WHERE {_CURRENT}
    ORDER BY m.expires_day DESC LIMIT %(candidates)s"""


def rank(vector_hits: str, text: str = _TEXT_HITS, top: str = _TOP, origin: str = "") -> str:
    """The ranking statement (see the module) with this ``vector_hits`` CTE. The other
    parts are one scope's unless given (:mod:`agent_memory.db.level_reads`): the
    ``text_hits`` CTEs, ``top`` (the ids of the latest current facts, at most ``candidates``)
    and ``origin`` (more columns of ``m`` to return, each after a comma)."""
    return f"""
WITH {text},
{vector_hits},
top AS (
    {top}
),
{FUSED},
candidates AS (
    SELECT id, relevance FROM fused WHERE relevance > 0
    UNION ALL
    SELECT id, 0 FROM top
    WHERE (SELECT count(*) FROM fused WHERE relevance > 0) < %(limit)s
      AND id NOT IN (SELECT id FROM fused WHERE relevance > 0)
),
scored AS (
    SELECT m.id, m.content, m.expires_day, c.relevance{origin.replace(", ", ", m.")},
           {importance_on("m.expires_day", "%(day)s", "m.half_life")} AS importance,
           exp(greatest(-ln(2) * greatest(%(day)s - agent_memory.day_index(m.importance_at), 0)
                        / %(half_life)s::float8, -700)) AS recency
    FROM candidates c CROSS JOIN LATERAL {by_id(FACTS, "c.id")} AS m
),
priored AS (
    SELECT *, coalesce((%(w_importance)s * importance + %(w_recency)s * recency)
                       / nullif(%(w_importance)s + %(w_recency)s, 0), 0) AS prior
    FROM scored
)
SELECT id, content, importance,
       CASE WHEN relevance > 0 THEN relevance * (1 - %(prior_weight)s + %(prior_weight)s * prior)
            WHEN %(text)s::text IS NULL AND %(vector)s::text IS NULL THEN prior
            ELSE 0 END AS score{origin}
FROM priored
ORDER BY relevance > 0 DESC, score DESC, prior DESC, expires_day DESC, id
LIMIT %(limit)s
"""


# Full text alone (also what runs where pgvector is missing: no reference to its types).
RANKED_TEXT = rank(NO_VECTOR_HITS)
# Full text and meaning (or meaning alone, with no text).
RANKED_HYBRID = rank(vector_hits(FACTS, EMBEDDINGS, "fact_id", _CURRENT))


@functools.lru_cache(maxsize=1024)
def ranked_hybrid_ann(ann: AnnIndex) -> str:
    """:data:`RANKED_HYBRID` reading a large scope's nearest facts from its own HNSW index."""
    return rank(vector_hits(FACTS, EMBEDDINGS, "fact_id", _CURRENT, ann))


Ranked = list[tuple[int, str, float, float]]  # fact id, content, importance, score


def ranked_rows(rows: list[Any]) -> Ranked:
    """The ranked facts of a ranking statement's rows."""
    return [(int(r[0]), str(r[1]), float(r[2]), float(r[3])) for r in rows]


@dataclass(frozen=True)
class Ranking:
    """A ranking statement to run (:func:`fetch_ranking_steps`): its text, its values, and
    whether it reads a scope's HNSW index."""

    query: str
    values: dict[str, Any]
    index: bool = False


def ranking(
    params: dict[str, Any], vector: list[float] | None = None, ann: AnnIndex | None = None
) -> Ranking:
    """The statement of :func:`ranked_steps` (whose rows :func:`ranked_rows` reads)."""
    if vector is None:
        return Ranking(RANKED_TEXT, params)
    query = RANKED_HYBRID if ann is None else ranked_hybrid_ann(ann)
    return Ranking(query, {**params, "vector": QueryVector(vector)}, ann is not None)


# Ranking statements run as psycopg runs any statement, prepared once they recur, and are
# written so that one generic plan serves small and large scopes alike: the agent's pool keeps
# that plan rather than planning a statement this size on every call (db.connection's
# GENERIC_PLANS). One reading a scope's HNSW index names the scope as a constant (vector_hits),
# so its plans can use that partial index; it is a statement of its own per large scope.
#
# How many candidates an HNSW scan keeps in its queue (pgvector's hnsw.ef_search): enough for
# the 2 * candidates nearest that vector_hits reads before filtering. It is set for the
# session of an autocommit connection (the pool's), once per value, rather than in a
# transaction of its own around every statement: that would cost three more round trips.
ANN_EF_SEARCH = (
    "SELECT set_config('hnsw.ef_search', least(1000, 2 * %(candidates)s)::text, %(local)s)"
)

# the queue size each autocommit connection's session has been given
_ef_search: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _session_ef(conn: Any, values: dict[str, Any]) -> bool | None:
    """Whether this connection's session needs the queue size of ``values`` set (True), has it
    (False), or cannot keep one (None: in a transaction, or not autocommit)."""
    if not conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return None
    return _ef_search.get(conn) != int(values["candidates"])


def fetch_ranking_steps(query: str, values: dict[str, Any], ann: bool) -> Steps[list[Any]]:
    """Run a ranking statement (see above); ``ann``: it reads a scope's HNSW index."""
    conn = yield Connection()
    if isinstance(values.get("vector"), QueryVector):
        sendable(conn)
    if not ann:
        rows: list[Any] = yield Run(query, values)
        return rows
    session = _session_ef(conn, values)
    if session is None:  # the caller's transaction: size the queue for it alone
        sized: list[Any] = yield Transaction(_sized(query, values))
        return sized
    if session:
        yield Run(ANN_EF_SEARCH, {**values, "local": False}, "none")
        _ef_search[conn] = int(values["candidates"])
    rows = yield Run(query, values)
    return rows


def _sized(query: str, values: dict[str, Any]) -> Steps[list[Any]]:
    yield Run(ANN_EF_SEARCH, {**values, "local": True}, "none")
    rows: list[Any] = yield Run(query, values)
    return rows


def ranked_steps(
    params: dict[str, Any],
    vector: list[float] | None = None,
    ann: AnnIndex | None = None,
) -> Steps[Ranked]:
    """The best facts by the hybrid score (see the module): by full text, and by meaning too
    when ``vector`` (the question's embedding) and ``params["model"]`` are given; through the
    scope's own HNSW index ``ann`` when it has one."""
    statement = ranking(params, vector, ann)
    return ranked_rows(
        (yield from fetch_ranking_steps(statement.query, statement.values, statement.index))
    )


ranked, ranked_sync = dual(ranked_steps)


# Restart the decay clock of facts just used: each is as important today as when it was last
# mentioned. At most once a day per fact (decay moves in whole days), so a busy agent does not
# rewrite the same rows on every turn. Each day of use also lengthens the half-life by the use
# growth (less than a mention's: being relevant is weaker evidence than being said again).
#
# It is best effort and never waits on the hot path: rows another transaction holds (a
# consolidation writing the scope) are skipped, and so is everything while the decay policy is
# being changed (the decay flow holds its row), so the expiry is never computed with a stale one.
# The policy's row is held through a function (sql/0019): a tenant has no right to lock it.
REFRESH = f"""
WITH policy AS (
    SELECT p AS purge_below FROM agent_memory.shared_purge_below() AS p
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
    half_life = least(%(max_half_life)s, m.half_life * %(growth)s),
    expires_day = agent_memory.expiry(m.importance, agent_memory.day_index(%(at)s),
                                      least(%(max_half_life)s, m.half_life * %(growth)s),
                                      policy.purge_below)
FROM used, policy
WHERE m.id = used.id
"""


def refresh_params(
    scope: Scope, ids: list[int], at: datetime, growth: float = 1.0
) -> dict[str, Any]:
    return {
        **scope.as_dict(),
        "ids": ids,
        "at": at,
        "growth": growth,
        "max_half_life": MAX_HALF_LIFE,
    }


def refresh_steps(scope: Scope, ids: list[int], at: datetime, growth: float = 1.0) -> Steps[int]:
    """Reinforce on use: restart these facts' decay clocks at ``at`` and multiply their
    half-lives by ``growth``; how many changed."""
    if not ids:
        return 0
    changed: int = yield Run(REFRESH, refresh_params(scope, ids, at, growth), "count")
    return changed


refresh, refresh_sync = dual(refresh_steps)
