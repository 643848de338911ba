-- agent-memory schema, version 2: exactly-once claims, cost accounting, provenance.

-- At most one running job per scope. A run claims a scope by inserting its running job; a
-- second run's insert conflicts and it leaves the scope alone. The owner also holds a session
-- advisory lock on the job id, so a job whose owner died (its connection closed) is detected
-- at once and taken over, without waiting for a timeout.
UPDATE agent_memory.consolidation_jobs AS j
SET status = 'failed', finished_at = now(),
    error = 'abandoned: left running by a run before schema version 2'
WHERE status = 'running'
  AND EXISTS (SELECT 1 FROM agent_memory.consolidation_jobs AS k
              WHERE k.scope_key = j.scope_key AND k.status = 'running' AND k.id > j.id);

CREATE UNIQUE INDEX IF NOT EXISTS consolidation_jobs_one_running_idx
    ON agent_memory.consolidation_jobs (scope_key)
    WHERE status = 'running';

-- What each job cost.
ALTER TABLE agent_memory.consolidation_jobs
    ADD COLUMN IF NOT EXISTS model             text,
    ADD COLUMN IF NOT EXISTS prompt_tokens     integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS completion_tokens integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS llm_calls         integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS latency_ms        integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cost_usd          double precision;

-- Which episodes a fact came from (kept while the fact lives).
CREATE TABLE IF NOT EXISTS agent_memory.fact_sources (
    fact_id    bigint NOT NULL REFERENCES agent_memory.memory_items (id) ON DELETE CASCADE,
    episode_id bigint NOT NULL,
    job_id     bigint,
    added_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (fact_id, episode_id)
);
CREATE INDEX IF NOT EXISTS fact_sources_episode_idx ON agent_memory.fact_sources (episode_id);

-- The seed's factor until a decay run applies the configured one; without a row, every reader
-- and writer of decay_rank would see NULL.
INSERT INTO agent_memory.decay_policy (id, factor) VALUES (true, 0.95) ON CONFLICT DO NOTHING;

-- Scope parts the library would refuse must not enter through SQL either (NOT VALID: rows
-- already there are left alone, and the flows skip them with a warning).
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['episodes', 'memory_items', 'consolidation_jobs'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_constraint
                       WHERE conname = t || '_scope_parts_check'
                         AND conrelid = ('agent_memory.' || t)::regclass) THEN
            EXECUTE format(
                'ALTER TABLE agent_memory.%I ADD CONSTRAINT %I CHECK ('
                '(user_id IS NULL OR length(user_id) BETWEEN 1 AND 256) AND '
                '(agent_id IS NULL OR length(agent_id) BETWEEN 1 AND 256) AND '
                '(workflow_id IS NULL OR length(workflow_id) BETWEEN 1 AND 256)) NOT VALID',
                t, t || '_scope_parts_check');
        END IF;
    END LOOP;
END $$;
