"""Consolidation jobs: one row per attempt at one scope, with its outcome."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from agent_memory.db.claims import HELD
from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.errors import InvalidScopeError
from agent_memory.models import ConsolidationJob, JobStatus, Scope
from agent_memory.usage import Usage

_COLUMNS = """id, user_id, agent_id, workflow_id, status, episodes_processed, facts_created,
    content_checksum, extractor, flow_run_id, started_at, finished_at, error, model,
    facts_updated, facts_invalidated,
    prompt_tokens, completion_tokens, llm_calls, latency_ms, cost_usd"""

START = """
INSERT INTO agent_memory.consolidation_jobs
    (user_id, agent_id, workflow_id, status, extractor, flow_run_id)
VALUES (%(user_id)s, %(agent_id)s, %(workflow_id)s, 'running', %(extractor)s, %(flow_run_id)s)
RETURNING id
"""

LAST_COMPLETED_CHECKSUM = f"""
SELECT content_checksum FROM agent_memory.consolidation_jobs
WHERE {SCOPE_MATCH} AND status = 'completed' AND content_checksum IS NOT NULL
ORDER BY started_at DESC, id DESC
LIMIT 1
"""

FINISH = """
UPDATE agent_memory.consolidation_jobs
SET status = %(status)s, episodes_processed = %(episodes)s, facts_created = %(facts)s,
    content_checksum = %(checksum)s, finished_at = now(), error = %(error)s,
    facts_updated = %(updated)s, facts_invalidated = %(invalidated)s,
    model = %(model)s, prompt_tokens = %(prompt_tokens)s, completion_tokens = %(completion_tokens)s,
    llm_calls = %(llm_calls)s, latency_ms = %(latency_ms)s, cost_usd = %(cost_usd)s
WHERE id = %(job_id)s
"""

# Called by the run that holds the scope's claim: any job still 'running' lost its owner.
ABANDON = f"""
UPDATE agent_memory.consolidation_jobs
SET status = 'failed', finished_at = now(), error = %(error)s
WHERE {SCOPE_MATCH} AND status = 'running'
RETURNING id
"""

# A run holds each scope it consolidates by a row lock on the scope's claim (ScopeClaims in
# agent_memory.consolidation, agent_memory.db.claims), which PostgreSQL releases when the run's
# process dies: a job still 'running' whose scope nobody holds was left by a run that is gone.
_UNCLAIMED = f"NOT {HELD.format(key='j.scope_key')}"

ABANDONED = f"""
SELECT j.id, j.user_id, j.agent_id, j.workflow_id, j.flow_run_id
FROM agent_memory.consolidation_jobs j
WHERE j.status = 'running' AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s))
  AND {_UNCLAIMED}
ORDER BY j.id
LIMIT %(limit)s
"""

FAILED_OF_RUN = """
SELECT id FROM agent_memory.consolidation_jobs
WHERE flow_run_id = %(flow_run_id)s AND status IN ('failed', 'dead')
ORDER BY id
"""

LIST = f"""
SELECT {_COLUMNS} FROM agent_memory.consolidation_jobs
WHERE (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY started_at DESC, id DESC
LIMIT %(limit)s
"""

MAX_ERROR_CHARS = 4000


async def start(
    conn: psycopg.AsyncConnection[Any], scope: Scope, extractor: str, flow_run_id: str | None
) -> int:
    cur = await conn.execute(
        START, {**scope.as_dict(), "extractor": extractor, "flow_run_id": flow_run_id}
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def last_completed_checksum(conn: psycopg.AsyncConnection[Any], scope: Scope) -> str | None:
    cur = await conn.execute(LAST_COMPLETED_CHECKSUM, scope.as_dict())
    row = await cur.fetchone()
    return str(row[0]) if row else None


async def finish(
    conn: psycopg.AsyncConnection[Any],
    job_id: int,
    status: JobStatus,
    *,
    episodes: int = 0,
    facts: int = 0,
    updated: int = 0,
    invalidated: int = 0,
    checksum: str | None = None,
    error: str | None = None,
    usage: Usage | None = None,
    model: str | None = None,
) -> None:
    """Record a job's outcome and cost. The caller has already redacted ``error``."""
    usage = usage or Usage()
    await conn.execute(
        FINISH,
        {
            "job_id": job_id,
            "status": status,
            "episodes": episodes,
            "facts": facts,
            "updated": updated,
            "invalidated": invalidated,
            "checksum": checksum,
            "error": error[:MAX_ERROR_CHARS] if error else None,
            "model": model,
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "llm_calls": usage.calls,
            "latency_ms": round(usage.latency_s * 1000),
            "cost_usd": usage.cost_usd,
        },
    )


async def abandon_running(
    conn: psycopg.AsyncConnection[Any], scope: Scope, takeover: str
) -> list[int]:
    """Fail the scope's jobs left 'running' by a run that died; returns their ids."""
    cur = await conn.execute(ABANDON, {**scope.as_dict(), "error": takeover})
    return [int(r[0]) for r in await cur.fetchall()]


@dataclass(frozen=True)
class AbandonedJob:
    """A job left 'running' by a run that is gone (no session holds its scope's claim)."""

    id: int
    scope: Scope
    flow_run_id: str | None


async def abandoned(
    conn: psycopg.AsyncConnection[Any], limit: int = 10_000, ids: list[int] | None = None
) -> list[AbandonedJob]:
    """Jobs left 'running' by runs that died (killed, crashed, lost the database), oldest
    first (only those of ``ids`` if given). A later run of their scope fails them as it takes
    the scope over."""
    cur = await conn.execute(ABANDONED, {"limit": limit, "ids": ids})
    found = []
    for job_id, user_id, agent_id, workflow_id, flow_run_id in await cur.fetchall():
        try:
            scope = Scope(user_id, agent_id, workflow_id)
        except InvalidScopeError:  # written around the library; nothing to consolidate it with
            continue
        found.append(AbandonedJob(int(job_id), scope, str(flow_run_id) if flow_run_id else None))
    return found


async def failed_of_run(conn: psycopg.AsyncConnection[Any], flow_run_id: str) -> list[int]:
    """The jobs of one flow run that failed (or were parked), oldest first."""
    cur = await conn.execute(FAILED_OF_RUN, {"flow_run_id": flow_run_id})
    return [int(r[0]) for r in await cur.fetchall()]


async def get(conn: psycopg.AsyncConnection[Any], job_id: int) -> ConsolidationJob | None:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {_COLUMNS} FROM agent_memory.consolidation_jobs WHERE id = %s", (job_id,)
        )
        row = await cur.fetchone()
    return ConsolidationJob.model_validate(row) if row else None


async def list_jobs(
    conn: psycopg.AsyncConnection[Any], status: JobStatus | None = None, limit: int = 50
) -> list[ConsolidationJob]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(LIST, {"status": status, "limit": limit})
        return [ConsolidationJob.model_validate(r) for r in await cur.fetchall()]


async def counts_by_status(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    """How many job rows have each status."""
    cur = await conn.execute(
        "SELECT status, count(*) FROM agent_memory.consolidation_jobs GROUP BY 1 ORDER BY 1"
    )
    return {status: int(n) for status, n in await cur.fetchall()}
