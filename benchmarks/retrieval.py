"""Retrieval quality on the labelled set in ``tests/data/retrieval.json``: recall@k of
importance-only ranking against relevance-aware ranking, on one scope of a real database.

recall@k = the share of questions whose needed fact is among the k facts injected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from agent_memory.db import facts as fact_repo
from agent_memory.db import fusion
from agent_memory.db import recall as recall_repo
from agent_memory.decay import today
from agent_memory.models import Fact, Scope

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "retrieval.json"
SCOPE = Scope("retrieval-eval", "assistant")


@dataclass
class Recall:
    """recall@k of one ranking, and which questions it answered."""

    ranking: str
    k: int
    hits: list[bool]

    @property
    def recall(self) -> float:
        return sum(self.hits) / len(self.hits)


def labelled_set() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return data


def load_facts(conn: psycopg.Connection[Any], scope: Scope, facts: list[dict[str, Any]]) -> None:
    """Store the set's facts in ``scope`` as mentioned now, with their importance."""
    at = datetime.now(UTC)
    with conn.cursor() as cur:
        cur.executemany(
            fact_repo.UPSERT,
            [
                fact_repo.upsert_params(
                    scope,
                    Fact(content=f["content"], importance=f["importance"]),
                    at,
                    None,
                    boost=0.0,
                )
                for f in facts
            ],
        )


def evaluate(
    conn: psycopg.Connection[Any],
    questions: list[dict[str, str]],
    *,
    scope: Scope = SCOPE,
    k: int = 5,
) -> dict[str, Recall]:
    """recall@k of ``importance`` and ``relevance`` (full-text) ranking over ``questions``."""
    day = today()
    top = [c for _, c, _ in fact_repo.top_sync(conn, scope, 0.0, k, day)]
    importance = [q["needs"] in top for q in questions]
    relevance = []
    for q in questions:
        params = fusion.ranked_params(
            scope,
            q["question"],
            on=day,
            min_importance=0.0,
            limit=k,
            candidates=100,
        )
        relevance.append(q["needs"] in [r[1] for r in recall_repo.ranked_sync(conn, params)])
    return {
        "importance": Recall("importance", k, importance),
        "relevance": Recall("relevance", k, relevance),
    }
