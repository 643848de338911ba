"""The Store's TTLs (sql/0020_store_ttl.sql): which rows are live, a read's refresh, the sweep.

A row put with a TTL (``ttl_minutes``) expires at ``expires_at``. Reads see only live rows
(:func:`live`), so an expired item is gone at once, before any sweep; a read that refreshes
moves ``expires_at`` to now plus the TTL, for live rows only (an expired item is not brought
back by being asked for). The sweep deletes expired rows, and the fact an expired memory item
showed is invalidated, kept as history with ``valid_to`` the moment the item expired, as a
delete does (:mod:`agent_memory.db.store_writes`), unless another live item still shows it.
"""

from __future__ import annotations

from datetime import datetime

from agent_memory.db.dual import Run, Steps, Transaction

# an expired row left unswept longer than a sweep's batch takes waits for the next batch
SWEEP_BATCH = 1000


def live(alias: str) -> str:
    """The condition that row ``alias`` of ``agent_memory.store_items`` has not expired."""
    return f"({alias}.expires_at IS NULL OR {alias}.expires_at > now())"


def ident(alias: str) -> str:
    """How a read names row ``alias`` of ``agent_memory.store_items``: ``t`` and its id when
    it has a TTL (a read refreshes those), else ``s`` and its id (a fact no row shows: ``f``)."""
    return f"(CASE WHEN {alias}.ttl_minutes IS NULL THEN 's' ELSE 't' END || {alias}.id)"


# the moment a put's TTL (minutes) runs out (NULL: none; sql/0022_store_put.sql)
EXPIRES = "agent_memory.ttl_expiry(%(ttl)s::float8)"

_REFRESH = """
UPDATE agent_memory.store_items s SET expires_at = agent_memory.ttl_expiry(s.ttl_minutes)
WHERE s.id = ANY(%(ids)s) AND s.ttl_minutes IS NOT NULL AND s.expires_at > now()
"""

# the expired rows, earliest first; a row another transaction holds (a put reviving it, another
# sweep) is left to it
_EXPIRED = """
SELECT s.id FROM agent_memory.store_items s
WHERE s.expires_at <= now()
ORDER BY s.expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

_DELETE = "SELECT id, fact_id, expired_at FROM agent_memory.store_delete_expired(%(ids)s)"

# as a delete retires the fact an item showed (store_writes._RETIRE), for many facts at once
_RETIRE = """
UPDATE agent_memory.memory_items m
SET superseded_at = now(), superseded_by = NULL, superseded_by_job = NULL,
    valid_to = greatest(m.valid_from, least(e.expired_at, now()))
FROM (SELECT f.fact_id, max(f.expired_at) AS expired_at
      FROM unnest(%(facts)s::bigint[], %(times)s::timestamptz[]) AS f(fact_id, expired_at)
      GROUP BY f.fact_id) AS e
WHERE m.id = e.fact_id AND m.superseded_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM agent_memory.store_items o WHERE o.fact_id = m.id)
"""


def refresh_steps(ids: list[int]) -> Steps[None]:
    """Move the expiry of the live rows of ``ids`` that have a TTL to now plus their TTL."""
    if ids:
        yield Run(_REFRESH, {"ids": sorted(set(ids))}, "none")


def _sweep_batch_steps(limit: int) -> Steps[tuple[int, int]]:
    rows = yield Run(_EXPIRED, {"limit": limit})
    if not rows:
        return 0, 0
    deleted = yield Run(_DELETE, {"ids": [int(r[0]) for r in rows]})
    shown: list[tuple[int, datetime]] = [(int(r[1]), r[2]) for r in deleted if r[1] is not None]
    if shown:
        facts, times = zip(*shown, strict=True)
        yield Run(_RETIRE, {"facts": list(facts), "times": list(times)}, "none")
    return len(rows), len(deleted)


def sweep_steps(limit: int = SWEEP_BATCH) -> Steps[int]:
    """Delete the expired rows (see the module), ``limit`` of them per transaction; how many
    went."""
    total = 0
    while True:
        found, gone = yield Transaction(_sweep_batch_steps(limit))
        total += gone
        if found < limit or not gone:
            return int(total)
