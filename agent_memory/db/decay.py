"""Decay in the database: the purge of faded facts in bounded batches, the decay policy in
force (each kind's half-life, the purge threshold) and its changes, the lock a write holds on
it, and the record of each decay run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date
from typing import Any

import psycopg

from agent_memory.db.fragments import SCOPE_MATCH, THRESHOLD, importance_on
from agent_memory.db.migrations import policy_params
from agent_memory.decay import DecayPolicy, day_index
from agent_memory.models import Scope
from agent_memory.settings import MAX_HALF_LIFE

# Faded below purge_below on day: at the policy's threshold exactly "expires_day < day", a
# range of the rank index. Another threshold scales each fact's distance from its expiry by its
# half-life, so the range widens by what the longest half-life allows and each row is checked.
_FADED = f"""expires_day < %(day)s
        + greatest(0.0, %(max_half_life)s * ln(%(purge_below)s / {THRESHOLD}) / ln(2))
  AND (%(purge_below)s = {THRESHOLD} OR {importance_on()} < %(purge_below)s)"""

# Bounded batches, so the purge never holds many row locks or one long transaction. ORDER BY
# expires_day makes it a range scan of the rank index from the bottom: the bound comes from a
# subquery, so the planner cannot estimate it, and without the order it chose a sequential
# scan that re-read the whole table (and earlier batches' dead rows) for every batch - 7.4x the
# seed's decay instead of 13x at 1M facts, and 160-220 ms for a day with nothing to purge.
PURGE_BATCH = f"""
WITH doomed AS (
    SELECT id FROM agent_memory.memory_items
    WHERE {_FADED}
      AND (%(all_scopes)s OR {SCOPE_MATCH})
    ORDER BY expires_day
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM agent_memory.memory_items m USING doomed WHERE m.id = doomed.id
"""

# facts of these scopes that the next decay would purge (their importance on the day is below
# the threshold)
FADED = f"""
SELECT count(*) FROM agent_memory.memory_items
WHERE {_FADED}
  AND scope_key IN (SELECT agent_memory.scope_key_inline(u, a, w)
                    FROM unnest(%(users)s::text[], %(agents)s::text[], %(workflows)s::text[])
                         AS s(u, a, w))
"""


async def count_faded(
    conn: psycopg.AsyncConnection[Any], scopes: Sequence[Scope], purge_below: float, on: date
) -> int:
    """How many facts of ``scopes`` have an importance below ``purge_below`` on ``on``: those
    the decay of that day purges."""
    if not scopes:
        return 0
    cur = await conn.execute(
        FADED,
        {
            "users": [s.user_id for s in scopes],
            "agents": [s.agent_id for s in scopes],
            "workflows": [s.workflow_id for s in scopes],
            "purge_below": purge_below,
            "day": day_index(on),
            "max_half_life": MAX_HALF_LIFE,
        },
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


def purge_params(
    purge_below: float, on: date, scope: Scope | None = None, batch: int = 5_000
) -> dict[str, Any]:
    """The parameters of :data:`PURGE_BATCH` (see :func:`purge`)."""
    return {
        **(scope or Scope()).as_dict(),
        "all_scopes": scope is None,
        "purge_below": purge_below,
        "day": day_index(on),
        "batch": batch,
        "max_half_life": MAX_HALF_LIFE,
    }


async def purge(
    conn: psycopg.AsyncConnection[Any],
    purge_below: float,
    on: date,
    scope: Scope | None = None,
    batch: int = 5_000,
    on_batch: Callable[[int], object] | None = None,
) -> int:
    """Delete facts whose importance on ``on`` is below ``purge_below``; returns how many.

    Runs in autocommit batches of ``batch`` rows, ``on_batch`` told how many each deleted.
    """
    params = purge_params(purge_below, on, scope, batch)
    total = 0
    while True:
        async with conn.transaction():
            cur = await conn.execute(PURGE_BATCH, params)
        total += cur.rowcount
        if on_batch is not None:
            on_batch(cur.rowcount)
        if cur.rowcount < batch:
            return total


POLICY = "SELECT half_lives, purge_below FROM agent_memory.decay_policy"


async def policy(conn: psycopg.AsyncConnection[Any]) -> DecayPolicy | None:
    """The decay policy the stored expiry days were computed with."""
    cur = await conn.execute(POLICY)
    row = await cur.fetchone()
    return DecayPolicy(half_lives=dict(row[0]), purge_below=float(row[1])) if row else None


# A kind's half-life changes from h to h * r: each fact of the kind keeps its importance on the
# day and fades at the new rate from there (its distance to its expiry scales by r too).
_REKIND = f"""
UPDATE agent_memory.memory_items
SET importance = {importance_on()},
    importance_at = (%(on)s::date)::timestamp AT TIME ZONE 'UTC',
    half_life = least(%(max_half_life)s, half_life * %(ratio)s),
    expires_day = %(day)s + (expires_day - %(day)s)
                  * least(%(max_half_life)s, half_life * %(ratio)s) / half_life
WHERE kind = %(kind)s
"""

# The threshold changes from T to T': importance is the same every day, the expiry moves.
_RETHRESHOLD = f"""
UPDATE agent_memory.memory_items
SET expires_day = expires_day + half_life * (ln({THRESHOLD}) - ln(%(purge_below)s)) / ln(2)
"""


async def sync_policy(conn: psycopg.AsyncConnection[Any], wanted: DecayPolicy, on: date) -> int:
    """Switch to ``wanted`` half-lives and threshold: every fact keeps its importance as of
    ``on``. Returns the rows rewritten (only facts of a kind whose half-life changed, or all
    of them when the threshold did; none when nothing changed)."""
    day = day_index(on)
    rewritten = 0
    async with conn.transaction():
        cur = await conn.execute(POLICY + " FOR UPDATE")
        row = await cur.fetchone()
        if row is None:
            raise LookupError("agent_memory.decay_policy has no row: run the migrations")
        stored: dict[str, float] = dict(row[0])
        for kind, days in wanted.half_lives.items():
            old = stored.get(kind)
            if old is not None and abs(old - days) > 1e-9 * days:
                cur = await conn.execute(
                    _REKIND,
                    {
                        "kind": kind,
                        "ratio": days / old,
                        "day": day,
                        "on": on,
                        "max_half_life": MAX_HALF_LIFE,
                    },
                )
                rewritten += cur.rowcount
        if abs(float(row[1]) - wanted.purge_below) > 1e-12:
            cur = await conn.execute(_RETHRESHOLD, {"purge_below": wanted.purge_below})
            rewritten = max(rewritten, cur.rowcount)
        await conn.execute(
            "UPDATE agent_memory.decay_policy SET half_lives = half_lives || %(half_lives)s::jsonb,"
            " purge_below = %(purge_below)s, factor = %(factor)s, updated_at = now()",
            policy_params(wanted),
        )
    return rewritten


HOLD_FACTOR = "SELECT factor FROM agent_memory.decay_policy FOR SHARE"


async def hold_decay_factor(conn: psycopg.AsyncConnection[Any]) -> None:
    """Keep the decay factor from changing until this transaction ends: a rebase must not
    interleave with ranks computed in it."""
    await conn.execute(HOLD_FACTOR)


RECORD_DECAY_RUN = """
INSERT INTO agent_memory.decay_runs
    (as_of_day, user_id, agent_id, workflow_id, all_scopes, factor, purge_below, facts_purged)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
"""


async def record_decay_run(
    conn: psycopg.AsyncConnection[Any],
    as_of: date,
    scope: Scope | None,
    factor: float,
    purge_below: float,
    purged: int,
) -> None:
    """A decay run's row: the day, the scope (None: all), the policy and what it purged."""
    params = (as_of, *(scope or Scope()).params, scope is None, factor, purge_below, purged)
    await conn.execute(RECORD_DECAY_RUN, params)
