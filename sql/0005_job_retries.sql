-- Retrying failed scopes: attempts counted, a backoff between them, and a scope that keeps
-- failing parked ('dead') with its last error until an operator retries it explicitly.

ALTER TABLE agent_memory.consolidation_jobs
    DROP CONSTRAINT IF EXISTS consolidation_jobs_status_check;
ALTER TABLE agent_memory.consolidation_jobs
    ADD CONSTRAINT consolidation_jobs_status_check
    CHECK (status IN ('running', 'completed', 'skipped', 'failed', 'dead'));

-- One row per scope whose last attempt failed; removed when the scope consolidates again.
CREATE TABLE IF NOT EXISTS agent_memory.scope_retries (
    scope_key       text COLLATE "C" PRIMARY KEY,
    user_id         text,
    agent_id        text,
    workflow_id     text,
    failures        integer NOT NULL CHECK (failures > 0),
    last_job_id     bigint NOT NULL REFERENCES agent_memory.consolidation_jobs (id),
    last_error      text,
    last_failed_at  timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL,
    parked          boolean NOT NULL DEFAULT false
);

CREATE INDEX IF NOT EXISTS scope_retries_due_idx
    ON agent_memory.scope_retries (next_attempt_at) WHERE NOT parked;
