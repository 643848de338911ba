-- agent-memory schema, version 2: exactly-once claims, cost accounting, provenance.

-- At most one running job per scope. A run claims a scope by inserting its running job; a
-- second run's insert conflicts and it leaves the scope alone. The owner also holds a session
-- advisory lock on the job id, so a job whose owner died (its connection closed) is detected
-- at once and taken over, without waiting for a timeout.
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
