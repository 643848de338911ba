"""A scope's facts read over several levels of memory (docs/guide.md, "Levels of memory"): the
hybrid ranking of :mod:`agent_memory.db.recall` and the importance order of
:data:`agent_memory.db.facts.TOP`, over the levels :meth:`~agent_memory.models.Scope.levels`
names, each fact with the scope it is filed under. One level is the statement of one scope
(the callers use it unchanged, so ``AGENT_MEMORY_SHARE=exact`` reads as before levels)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import date
from typing import Any

from agent_memory.db.ann_indexes import AnnIndex
from agent_memory.db.dual import Run, Steps, dual
from agent_memory.db.facts import top_params
from agent_memory.db.fragments import importance_on
from agent_memory.db.fulltext import text_hits
from agent_memory.db.levels import LEVELS_MATCH, level_key, levels_params, merged
from agent_memory.db.nearest import NO_VECTOR_HITS, vector_hits
from agent_memory.db.query_vector import QueryVector
from agent_memory.db.recall import (
    EMBEDDINGS,
    FACTS,
    Ranked,
    Ranking,
    current,
    fetch_ranking_steps,
    rank,
)
from agent_memory.models import Scope

# fact id -> the scope it is filed under
Origins = dict[int, Scope]

# The ranking over several levels (agent_memory.db.recall's, the levels read as one scope): a
# statement per number of levels, each level read by index range scans of its own, merged
_CURRENT_LEVELS = current(f"m.{LEVELS_MATCH}")


def _level_parts(levels: int) -> tuple[str, str]:
    """The ``text_hits`` CTEs and the ``top`` of the ranking over ``levels`` levels."""
    each = [current(f"m.scope_key = {level_key(n)}") for n in range(levels)]
    text = text_hits(FACTS, _CURRENT_LEVELS, "expires_day", "f", levels=each)

    def latest(n: int) -> str:
        return f"""SELECT m.id, m.expires_day FROM {FACTS} m WHERE {each[n]}
    ORDER BY m.expires_day DESC LIMIT %(candidates)s"""

    top = f"SELECT id FROM ({merged(levels, latest, 'expires_day DESC', '%(candidates)s')}) AS t"
    return text, top


_ORIGIN = ", user_id, agent_id, workflow_id"


@functools.lru_cache(maxsize=8)
def ranked_levels_text(levels: int) -> str:
    """:data:`agent_memory.db.recall.RANKED_TEXT` over ``levels`` levels."""
    return rank(NO_VECTOR_HITS, *_level_parts(levels), origin=_ORIGIN)


@functools.lru_cache(maxsize=1024)
def ranked_levels_hybrid(anns: tuple[AnnIndex | None, ...]) -> str:
    """:data:`agent_memory.db.recall.RANKED_HYBRID` over levels, one entry of ``anns`` per
    level read: that level's own HNSW index, or None (see nearest.vector_hits)."""
    hits = vector_hits(FACTS, EMBEDDINGS, "fact_id", _CURRENT_LEVELS, levels=anns)
    return rank(hits, *_level_parts(len(anns)), origin=_ORIGIN)


# TOP over the levels: each level's most lasting facts read from its own index in order, merged
# (levels.merged), as far as the limit takes; a statement per number of levels
@functools.lru_cache(maxsize=8)
def levels_top(levels: int) -> str:
    """:data:`agent_memory.db.facts.TOP` over ``levels`` levels, with the scope of each."""

    def level(n: int) -> str:
        return f"""SELECT m.id, m.content, {importance_on()} AS importance, m.expires_day,
           m.user_id, m.agent_id, m.workflow_id
    FROM agent_memory.memory_items m
    WHERE m.scope_key = {level_key(n)}
      AND m.superseded_at IS NULL
      AND {importance_on()} >= %(min_importance)s
    ORDER BY m.expires_day DESC
    LIMIT %(limit)s"""

    return f"""SELECT t.id, t.content, t.importance, t.user_id, t.agent_id, t.workflow_id
FROM ({merged(levels, level, "expires_day DESC", "%(limit)s")}) AS t"""


def _split(rows: list[Any], scored: bool, levels: Sequence[Scope]) -> tuple[Ranked, Origins]:
    """(id, content, importance, score) of each row, and the scope each is filed under (the
    rows' last three columns: one of ``levels``, whose Scope is reused rather than built and
    checked again for every row); unscored rows are scored by their importance."""
    ranked = [(int(r[0]), str(r[1]), float(r[2]), float(r[3] if scored else r[2])) for r in rows]
    known = {level.params: level for level in levels}
    origins = {}
    for r in rows:
        part = tuple(r[-3:])
        origins[int(r[0])] = known.get(part) or Scope(*part)
    return ranked, origins


def top_levels_steps(
    levels: Sequence[Scope], min_importance: float, limit: int, on: date
) -> Steps[tuple[Ranked, Origins]]:
    """The most important current facts of all ``levels`` (the scope itself first), as
    :func:`agent_memory.db.facts.top` gives one scope's, scored by their importance."""
    params = {**top_params(levels[0], min_importance, limit, on), **levels_params(levels)}
    rows: list[Any] = yield Run(levels_top(len(levels)), params)
    return _split(rows, False, levels)


def levels_ranking(
    params: dict[str, Any],
    levels: Sequence[Scope],
    vector: list[float] | None = None,
    anns: Sequence[AnnIndex | None] | None = None,
) -> Ranking:
    """The statement of :func:`ranked_levels_steps` (whose rows :func:`levels_rows` reads)."""
    values = {**params, **levels_params(levels)}
    if vector is None:
        return Ranking(ranked_levels_text(len(levels)), values)
    indexes = tuple(anns) if anns is not None else (None,) * len(levels)
    if len(indexes) != len(levels):
        raise ValueError(f"{len(indexes)} indexes for {len(levels)} levels")
    values["vector"] = QueryVector(vector)
    return Ranking(ranked_levels_hybrid(indexes), values, any(a is not None for a in indexes))


def levels_rows(rows: list[Any], levels: Sequence[Scope]) -> tuple[Ranked, Origins]:
    """The ranked facts of a ranking over ``levels``, and the scope each is filed under."""
    return _split(rows, True, levels)


def ranked_levels_steps(
    params: dict[str, Any],
    levels: Sequence[Scope],
    vector: list[float] | None = None,
    anns: Sequence[AnnIndex | None] | None = None,
) -> Steps[tuple[Ranked, Origins]]:
    """:func:`agent_memory.db.recall.ranked` over all ``levels`` ranked as one scope: by full
    text (the levels' statistics summed), and by meaning when ``vector`` is given, each level's
    nearest read through its own HNSW index where ``anns`` names one."""
    statement = levels_ranking(params, levels, vector, anns)
    rows = yield from fetch_ranking_steps(statement.query, statement.values, statement.index)
    return levels_rows(rows, levels)


ranked_levels, ranked_levels_sync = dual(ranked_levels_steps)
top_levels, top_levels_sync = dual(top_levels_steps)
