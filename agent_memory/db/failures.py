"""Scopes whose last consolidation failed: attempts, backoff, parking (``dead``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.db.jobs import abandoned
from agent_memory.errors import InvalidJobError, InvalidScopeError
from agent_memory.models import Scope

# failures counts the scope's failed attempts since it last consolidated; the wait before the
# next attempt doubles each time (first_wait_s, 2 x, 4 x ... up to max_wait_s)
RECORD_FAILURE = """
INSERT INTO agent_memory.scope_retries AS r
    (scope_key, user_id, agent_id, workflow_id, failures, last_job_id, last_error,
     next_attempt_at, parked)
VALUES (agent_memory.scope_key_inline(%(user_id)s, %(agent_id)s, %(workflow_id)s),
        %(user_id)s, %(agent_id)s, %(workflow_id)s, 1, %(job_id)s, %(error)s,
        now() + make_interval(secs => least(%(max_wait_s)s, %(first_wait_s)s)),
        1 >= %(max_attempts)s)
ON CONFLICT (scope_key) DO UPDATE SET
    failures = r.failures + 1,
    last_job_id = EXCLUDED.last_job_id,
    last_error = EXCLUDED.last_error,
    last_failed_at = now(),
    next_attempt_at = now() + make_interval(
        secs => least(%(max_wait_s)s, %(first_wait_s)s * power(2, r.failures))),
    parked = r.failures + 1 >= %(max_attempts)s
RETURNING failures, parked, next_attempt_at
"""

PARK_JOB = "UPDATE agent_memory.consolidation_jobs SET status = 'dead' WHERE id = %(job_id)s"

CLEAR = f"DELETE FROM agent_memory.scope_retries WHERE {SCOPE_MATCH}"

DUE = """
SELECT user_id, agent_id, workflow_id FROM agent_memory.scope_retries
WHERE NOT parked AND next_attempt_at <= now()
ORDER BY next_attempt_at
LIMIT %(limit)s
"""

RESET_ALL = """
DELETE FROM agent_memory.scope_retries RETURNING user_id, agent_id, workflow_id
"""

RESET_JOBS = """
DELETE FROM agent_memory.scope_retries r
USING agent_memory.consolidation_jobs j
WHERE j.id = ANY(%(job_ids)s) AND r.scope_key = j.scope_key
"""

JOB_SCOPES = """
SELECT id, status, user_id, agent_id, workflow_id FROM agent_memory.consolidation_jobs
WHERE id = ANY(%(job_ids)s)
"""


# the scopes with pending episodes that a run does not take now: waiting out their backoff, or
# parked until an operator retries them
HELD_BACK = """
SELECT count(*) FILTER (WHERE NOT r.parked),
       min(r.next_attempt_at) FILTER (WHERE NOT r.parked),
       count(*) FILTER (WHERE r.parked)
FROM agent_memory.scope_retries r
WHERE (r.parked OR r.next_attempt_at > now())
  AND EXISTS (SELECT 1 FROM agent_memory.episodes e
              WHERE e.scope_key = r.scope_key AND NOT e.consolidated)
"""


@dataclass(frozen=True)
class HeldBack:
    """Scopes with pending episodes that a scheduled run leaves for later, and why."""

    waiting: int = 0  # their last attempt failed: they wait out its backoff
    next_attempt_at: datetime | None = None  # the first of them due
    parked: int = 0  # failed too often: they wait for an operator

    def note(self) -> str | None:
        """What an operator reads: how many wait, until when, and the command that takes
        them now (None when no scope is held back)."""
        parts = []
        if self.waiting:
            at = (
                self.next_attempt_at.strftime("%Y-%m-%d %H:%M:%S UTC")
                if self.next_attempt_at
                else "?"
            )
            parts.append(
                f"{self.waiting} scope(s) with pending episodes wait out their retry backoff "
                f"(the first due {at})"
            )
        if self.parked:
            parts.append(f"{self.parked} scope(s) are parked after failing too often")
        if not parts:
            return None
        return "; ".join(parts) + ": `agent-memory jobs retry --all` consolidates them now"


async def held_back(conn: psycopg.AsyncConnection[Any]) -> HeldBack:
    """The scopes with pending episodes a run without ``include_waiting`` leaves out."""
    cur = await conn.execute(HELD_BACK)
    row = await cur.fetchone()
    if row is None:
        return HeldBack()
    return HeldBack(int(row[0] or 0), row[1], int(row[2] or 0))


@dataclass(frozen=True)
class Failure:
    """Where a scope stands after a failed attempt."""

    failures: int
    parked: bool
    next_attempt_at: datetime


async def record_failure(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    job_id: int,
    error: str,
    *,
    max_attempts: int,
    first_wait_s: float,
    max_wait_s: float,
) -> Failure:
    """Count a failed attempt; at ``max_attempts`` the scope is parked and the job is 'dead'."""
    cur = await conn.execute(
        RECORD_FAILURE,
        {
            **scope.as_dict(),
            "job_id": job_id,
            "error": error,
            "max_attempts": max_attempts,
            "first_wait_s": first_wait_s,
            "max_wait_s": max_wait_s,
        },
    )
    row = await cur.fetchone()
    assert row is not None
    failure = Failure(int(row[0]), bool(row[1]), row[2])
    if failure.parked:
        await conn.execute(PARK_JOB, {"job_id": job_id})
    return failure


async def clear(conn: psycopg.AsyncConnection[Any], scope: Scope) -> None:
    """The scope consolidated: its failure streak is over."""
    await conn.execute(CLEAR, scope.as_dict())


def _scopes(rows: list[tuple[Any, ...]]) -> list[Scope]:
    scopes = []
    for row in rows:
        try:
            scopes.append(Scope(*row))
        except InvalidScopeError:  # written around the library; nothing to retry it with
            continue
    return scopes


async def due(conn: psycopg.AsyncConnection[Any], limit: int) -> list[Scope]:
    """Failed scopes whose backoff has passed (parked ones wait for an operator)."""
    cur = await conn.execute(DUE, {"limit": limit})
    return _scopes(await cur.fetchall())


async def reset_all(conn: psycopg.AsyncConnection[Any]) -> list[Scope]:
    """Forget every failure streak, parked ones included; returns those scopes."""
    cur = await conn.execute(RESET_ALL)
    return _scopes(await cur.fetchall())


async def retryable(conn: psycopg.AsyncConnection[Any], job_ids: list[int]) -> list[Scope]:
    """The scopes of these jobs, each of which must exist and have failed (or be dead), or be
    left 'running' by a run that is gone.

    Raises :class:`InvalidJobError` naming a job id that does not exist, or cannot be retried
    and why.
    """
    cur = await conn.execute(JOB_SCOPES, {"job_ids": job_ids})
    found = {int(r[0]): r for r in await cur.fetchall()}
    orphans = {job.id for job in await abandoned(conn, ids=job_ids)}
    for job_id in job_ids:
        if job_id not in found:
            raise InvalidJobError(f"job {job_id} does not exist")
        status = found[job_id][1]
        if status == "running" and job_id not in orphans:
            raise InvalidJobError(
                f"job {job_id} is running: a live run holds its scope (retry it once that run "
                "has finished or stopped)"
            )
        if status not in ("failed", "dead", "running"):
            raise InvalidJobError(
                f"job {job_id} is {status}; only failed or dead jobs, or running ones whose run "
                "is gone, can be retried"
            )
    return list(dict.fromkeys(_scopes([found[j][2:] for j in job_ids])))


async def reset_jobs(conn: psycopg.AsyncConnection[Any], job_ids: list[int]) -> list[Scope]:
    """Forget the failure streaks of these failed or dead jobs' scopes; returns the scopes
    (see :func:`retryable` for the errors)."""
    scopes = await retryable(conn, job_ids)
    await conn.execute(RESET_JOBS, {"job_ids": job_ids})
    return scopes
