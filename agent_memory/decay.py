"""Decay arithmetic: importance fades by a factor per whole UTC day.

A fact stores ``importance`` as of ``importance_at`` and a time-independent ``decay_rank``::

    lam        = -ln(factor)                     (0.0513 for 0.95)
    decay_rank = ln(importance) + day(importance_at) * lam
    importance on day D = exp(decay_rank - D * lam)
                        = importance * factor ** (D - day(importance_at))

So ranking by current importance is ranking by ``decay_rank`` (an index), "current importance
>= x on day D" is ``decay_rank >= ln(x) + D * lam`` (a range on that index), and the daily purge
deletes only the rows below a threshold. Running decay twice on one day, or retrying it, is the
same as running it once: the result depends on the day, not on how often it ran.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime

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


def lam(factor: float) -> float:
    """The decay constant of a daily factor in (0, 1)."""
    if not 0.0 < factor < 1.0:
        raise ValueError(f"decay factor must be between 0 and 1 (exclusive), got {factor!r}")
    return -math.log(factor)


def rank(importance: float, at: datetime | date, factor: float) -> float:
    return math.log(max(importance, MIN_IMPORTANCE)) + day_index(at) * lam(factor)


def current_importance(decay_rank: float, on: date, factor: float) -> float:
    return math.exp(decay_rank - day_index(on) * lam(factor))


def rank_threshold(min_importance: float, on: date, factor: float) -> float:
    """The smallest ``decay_rank`` whose importance on ``on`` is at least ``min_importance``."""
    return math.log(max(min_importance, MIN_IMPORTANCE)) + day_index(on) * lam(factor)


def days_to_purge(importance: float, factor: float, threshold: float) -> int:
    """Whole days until ``importance`` falls below ``threshold`` (0 if it already has).

    With the seed's numbers (0.95 a day, purge below 0.05) a fact of 0.85 lasts 56 days.
    """
    if importance < threshold:
        return 0
    # smallest n with importance * factor**n < threshold
    n = math.floor(math.log(threshold / importance) / math.log(factor)) + 1
    while n > 0 and importance * factor ** (n - 1) < threshold:
        n -= 1
    while importance * factor**n >= threshold:
        n += 1
    return n
