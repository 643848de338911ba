"""How the full-text and the meaning rankings are fused into one relevance: the CTE that fuses
them (``FUSED``, shared by the fact ranking and the conversation search), and the parameters of
a ranking statement (the question, the day and limits, the priors' weights, the fusion's own);
`agent_memory.db.recall` says what each means."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from agent_memory.decay import day_index, importance_floor
from agent_memory.models import Scope
from agent_memory.settings import MemorySettings

# the two rankings fused into one relevance (see agent_memory.db.recall): ``text_hits`` and
# ``vector_hits`` CTEs in, ``fused(id, relevance)`` out
FUSED = """fused AS (
    SELECT id,
           sum(CASE WHEN %(fusion)s = 'rrf' THEN w / (%(rrf_k)s + r) ELSE w * n END) AS relevance
    FROM (SELECT id, r, n, %(w_text)s::float8 AS w FROM text_hits
          UNION ALL
          SELECT id, r, n, %(w_vector)s::float8 * (1 - CASE WHEN %(text_gate)s::bool
              THEN coalesce((SELECT max(n) FROM text_hits), 0) ELSE 0 END)
          FROM vector_hits) AS hits
    GROUP BY id
)"""


@dataclass(frozen=True)
class Fusion:
    """How the two relevance rankings are fused and how far the priors may re-order matches
    (see the module), for facts and conversation snippets alike: ``weights`` those of the
    full-text and the meaning rankings, ``method`` ``relative`` or ``rrf``, ``text_gate`` whether
    the meaning ranking weighs less the more of the question full text found, ``vector_floor``
    whether likeness by meaning counts above that of the last candidate only."""

    weights: tuple[float, float] = (1.0, 1.0)
    method: str = "relative"
    rrf_k: float = 60.0
    prior_weight: float = 0.1
    half_life_days: float = 7.0
    text_gate: bool = True
    vector_floor: bool = True

    @classmethod
    def of(cls, m: MemorySettings) -> Fusion:
        """The fusion the inject settings describe."""
        return cls(
            weights=(m.inject_weight_text, m.inject_weight_vector),
            method=m.inject_fusion,
            rrf_k=m.inject_rrf_k,
            prior_weight=m.inject_prior_weight,
            half_life_days=m.inject_recency_half_life_days,
            text_gate=m.inject_text_gate,
            vector_floor=m.inject_vector_floor,
        )

    def params(self) -> dict[str, Any]:
        return {
            "w_text": self.weights[0],
            "w_vector": self.weights[1],
            "fusion": self.method,
            "rrf_k": self.rrf_k,
            "prior_weight": self.prior_weight,
            "half_life": self.half_life_days,
            "text_gate": self.text_gate,
            "vector_floor": self.vector_floor,
        }


# the defaults of the settings
DEFAULT_FUSION = Fusion()


def ranked_params(
    scope: Scope,
    text: str | None,
    *,
    on: date,
    min_importance: float,
    limit: int,
    candidates: int,
    priors: tuple[float, float] = (1.0, 1.0),
    fusion: Fusion = DEFAULT_FUSION,
) -> dict[str, Any]:
    """The parameters of one ranking: ``priors`` the weights of importance and recency in the
    prior, ``fusion`` how relevance is made (see the module).
    """
    return {
        **scope.as_dict(),
        "text": text,
        "vector": None,
        "model": None,
        "day": day_index(on),
        "min_importance": importance_floor(min_importance),
        "limit": limit,
        "candidates": candidates,
        "w_importance": priors[0],
        "w_recency": priors[1],
        **fusion.params(),
    }


def search_params(
    m: MemorySettings, scope: Scope, text: str, limit: int, *, by_meaning: bool, on: date
) -> dict[str, Any]:
    """The parameters of a search of ``scope``'s facts for ``text`` (every current fact is a
    candidate, whatever its importance), ranked as the inject settings ``m`` rank: by meaning
    alone when they say ``vector`` and ``by_meaning`` (the question has a vector)."""
    return ranked_params(
        scope,
        None if by_meaning and m.inject_ranking == "vector" else text,
        on=on,
        min_importance=0.0,
        limit=limit,
        candidates=max(m.inject_candidates, limit),
        priors=(m.inject_weight_importance, m.inject_weight_recency),
        fusion=Fusion.of(m),
    )
