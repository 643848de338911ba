"""The facts' ranks as the decay analytics read them: packed per scope (see
``agent_memory.analytics`` for why this shape), decoded there."""

from __future__ import annotations

from typing import Any

import psycopg

from agent_memory.db.fragments import SCOPE_MATCH, THRESHOLD
from agent_memory.models import Scope

# Each fact is two float8: the day it falls below the report's threshold (the stored expiry is
# relative to the policy's) and its half-life.
_FACT = f"""float8send(expires_day + half_life * (ln({THRESHOLD}) - ln(%(purge_below)s)) / ln(2))
                  || float8send(half_life)"""
_PACKED = f"""
SELECT scope_key, string_agg({_FACT}, ''::bytea)
FROM agent_memory.memory_items WHERE {{where}}superseded_at IS NULL GROUP BY scope_key
UNION ALL
SELECT scope_key, string_agg({_FACT}, ''::bytea)
FROM agent_memory.memory_items WHERE {{where}}superseded_at IS NOT NULL GROUP BY scope_key
"""
# two texts rather than "(%(all_scopes)s OR ...)": each gets a plan of its own (the one scope's
# through the scope index) even when psycopg prepares the statement
LOAD_ALL = _PACKED.format(where="")
AGGREGATE_WORK_MEM = "64MB"  # a constant: SET takes no placeholders
LOAD_SCOPE = _PACKED.format(where=f"{SCOPE_MATCH} AND ")


async def packed_ranks(
    conn: psycopg.AsyncConnection[Any], scope: Scope | None, purge_below: float
) -> list[tuple[str, bytes]]:
    """(scope_key, packed ranks) rows of ``scope``'s facts (all scopes when None): per fact, two
    float8, the day it falls below ``purge_below`` and its half-life."""
    # binary results: the packed ranks arrive as they are, not as hex text (twice the bytes)
    cur = conn.cursor(binary=True)
    async with conn.transaction():
        # should the planner hash the facts by scope after all (a table whose visibility map is
        # stale makes the index scans dearer), the per-scope states (8 bytes a fact) spill to
        # disk past the default work_mem at about a million facts; LOCAL: this transaction only
        await cur.execute(f"SET LOCAL work_mem = '{AGGREGATE_WORK_MEM}'")
        if scope is None:
            await cur.execute(LOAD_ALL, {"purge_below": purge_below})
        else:
            await cur.execute(LOAD_SCOPE, {**scope.as_dict(), "purge_below": purge_below})
        return await cur.fetchall()
