"""Decay analytics with polars: what memory holds, what fades, and when it will be gone.

All figures are computed from (scope, decay_rank) and the day, with the same arithmetic as
:mod:`agent_memory.decay`, vectorised.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import polars as pl
import psycopg

from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.decay import day_index, lam
from agent_memory.models import Scope, scope_label

LOAD = f"""
SELECT user_id, agent_id, workflow_id, decay_rank
FROM agent_memory.memory_items
WHERE (%(all_scopes)s OR {SCOPE_MATCH})
"""

BUCKETS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
HORIZONS = [1, 7, 30, 90, 365]


@dataclass
class DecayReport:
    """The decay analytics of one day; each table is a list of rows (for artifacts and the CLI)."""

    as_of: date
    factor: float
    purge_below: float
    facts: int
    purged: int
    distribution: list[dict[str, Any]] = field(default_factory=list)
    expiry: list[dict[str, Any]] = field(default_factory=list)
    scopes: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of.isoformat(),
            "factor": self.factor,
            "purge_below": self.purge_below,
            "facts": self.facts,
            "purged": self.purged,
            "expiring_within_7_days": next(
                (r["expiring"] for r in self.expiry if r["within_days"] == 7), 0
            ),
            "distribution": self.distribution,
            "expiry": self.expiry,
            "scopes": self.scopes,
        }


async def load_frame(conn: psycopg.AsyncConnection[Any], scope: Scope | None) -> pl.DataFrame:
    """The facts' scope and rank as a DataFrame."""
    params = {**(scope or Scope()).as_dict(), "all_scopes": scope is None}
    cur = await conn.execute(LOAD, params)
    rows = await cur.fetchall()
    return pl.DataFrame(
        rows,
        schema={
            "user_id": pl.String,
            "agent_id": pl.String,
            "workflow_id": pl.String,
            "decay_rank": pl.Float64,
        },
        orient="row",
    )


def report(
    frame: pl.DataFrame,
    *,
    as_of: date,
    factor: float,
    purge_below: float,
    purged: int,
    top: int = 20,
) -> DecayReport:
    """Importance distribution, projected expiry and per-scope counts on ``as_of``."""
    k = lam(factor)
    day = day_index(as_of)
    facts = frame.with_columns(
        importance=(pl.col("decay_rank") - day * k).exp(),
        # first day on which importance < purge_below, counted from as_of
        days_left=((pl.col("decay_rank") - math.log(purge_below)) / k).floor().cast(pl.Int64)
        + 1
        - day,
    )
    result = DecayReport(
        as_of=as_of, factor=factor, purge_below=purge_below, facts=facts.height, purged=purged
    )
    if facts.height == 0:
        return result
    labels = [f"{lo:.2f}-{hi:.2f}" for lo, hi in itertools.pairwise(BUCKETS)]
    # bucket i holds BUCKETS[i] <= importance < BUCKETS[i + 1] (the last one includes 1.0)
    edges = pl.Series(BUCKETS[1:-1], dtype=pl.Float64)
    bucket = edges.search_sorted(facts["importance"], side="right")
    counts = bucket.value_counts()
    per_bucket = dict(zip(counts[bucket.name].to_list(), counts["count"].to_list(), strict=True))
    result.distribution = [
        {"importance": label, "facts": int(per_bucket.get(i, 0))} for i, label in enumerate(labels)
    ]
    result.expiry = [
        {
            "within_days": h,
            "expiring": int(facts.filter(pl.col("days_left") <= h).height),
            "remaining": int(facts.filter(pl.col("days_left") > h).height),
        }
        for h in HORIZONS
    ]
    per_scope = (
        facts.group_by(["user_id", "agent_id", "workflow_id"])
        .agg(
            facts=pl.len(),
            mean_importance=pl.col("importance").mean(),
            expiring_7d=(pl.col("days_left") <= 7).sum(),
            next_expiry_days=pl.col("days_left").min(),
        )
        .sort(
            ["facts", "user_id", "agent_id", "workflow_id"],
            descending=[True, False, False, False],
            nulls_last=True,
        )
        .head(top)
    )
    result.scopes = [
        {
            "scope": scope_label(r["user_id"], r["agent_id"], r["workflow_id"]),
            "facts": int(r["facts"]),
            "mean_importance": round(float(r["mean_importance"]), 4),
            "expiring_7d": int(r["expiring_7d"]),
            "next_expiry_days": int(r["next_expiry_days"]),
        }
        for r in per_scope.iter_rows(named=True)
    ]
    return result
