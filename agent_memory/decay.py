"""Decay arithmetic: a fact's importance halves every ``half_life`` days, counted in whole UTC
days from its clock (``importance_at``).

A fact stores its ``half_life`` and the (fractional) day it will fall below the purge
threshold ``T``::

    expires_day         = day(importance_at) + half_life * log2(importance / T)
    importance on day D = T * 2 ** ((expires_day - D) / half_life)
                        = importance * 2 ** (-(D - day(importance_at)) / half_life)

Neither changes with time, so "faded on day D" is ``expires_day < D`` (a range on an index) and
the daily purge deletes only the rows below it. Running decay twice on one day, or retrying it,
is the same as running it once: the result depends on the day, not on how often it ran.

The half-life comes from the fact's kind (:data:`agent_memory.models.FactKind`, settings
``AGENT_MEMORY_HALF_LIFE_*``) and is multiplied by ``AGENT_MEMORY_MENTION_GROWTH`` each time
another conversation says the fact again: a fact repeated over time lasts longer, as
memories do with spaced repetition (MemoryBank's use of the Ebbinghaus curve).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime

from agent_memory.models import FactKind
from agent_memory.settings import MemorySettings

EPOCH = date(1970, 1, 1)
MIN_IMPORTANCE = 1e-6


def day_index(moment: datetime | date) -> int:
    """Whole UTC days since 1970-01-01."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            raise ValueError(f"naive datetime {moment.isoformat()} has no time zone")
        moment = moment.astimezone(UTC).date()
    return (moment - EPOCH).days


def today() -> date:
    return datetime.now(UTC).date()


@dataclass(frozen=True)
class DecayPolicy:
    """What the stored expiry days are computed with: each kind's half-life (days) and the
    purge threshold. The database keeps the one in force (``agent_memory.decay_policy``)."""

    half_lives: dict[FactKind, float]
    purge_below: float

    @classmethod
    def of(cls, memory: MemorySettings) -> DecayPolicy:
        return cls(half_lives=memory.half_lives(), purge_below=memory.purge_threshold)


@dataclass(frozen=True)
class Reinforcement:
    """What a fact said again gains: ``boost`` added to its importance (capped at 1), its
    half-life multiplied by ``growth`` for each further conversation that said it."""

    boost: float = 0.05
    growth: float = 2.0

    @classmethod
    def of(cls, memory: MemorySettings) -> Reinforcement:
        return cls(boost=memory.reinforce_boost, growth=memory.mention_growth)


DEFAULT_REINFORCEMENT = Reinforcement()


def importance_floor(min_importance: float) -> float:
    """The bound a query compares importance with for "at least ``min_importance``": a hair
    lower, so a fact stored at exactly that importance is not lost to the rounding of
    computing it back from its expiry day."""
    return max(min_importance, MIN_IMPORTANCE) * (1 - 1e-9)


def importance_on(expires_day: float, on: date, half_life: float, purge_below: float) -> float:
    """A fact's importance on ``on`` (at most 1), as agent_memory.importance_on computes it."""
    exponent = math.log(purge_below) + (expires_day - day_index(on)) * math.log(2) / half_life
    return min(1.0, math.exp(max(exponent, -700.0)))


def days_to_purge(importance: float, half_life: float, threshold: float) -> int:
    """Whole days until ``importance`` falls below ``threshold`` (0 if it already has).

    With the seed's numbers (0.95 a day: a half-life of 13.5 days, purge below 0.05) a fact of
    0.85 lasts 56 days.
    """
    if importance < threshold:
        return 0
    # the first whole day after the expiry day
    return math.floor(half_life * math.log2(importance / threshold)) + 1
