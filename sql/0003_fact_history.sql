-- agent-memory schema, version 3: facts that stay true. Consolidation may update a fact or
-- invalidate one the conversation contradicts; the old fact is kept, marked with when and by
-- what it was superseded, and inject never returns it.

ALTER TABLE agent_memory.memory_items
    ADD COLUMN IF NOT EXISTS superseded_at     timestamptz,
    ADD COLUMN IF NOT EXISTS superseded_by     bigint,          -- the fact that replaced it; NULL: invalidated
    ADD COLUMN IF NOT EXISTS superseded_by_job bigint;

-- inject reads current facts only: the scope index covers just those
CREATE INDEX IF NOT EXISTS memory_items_current_rank_idx
    ON agent_memory.memory_items (scope_key, decay_rank DESC)
    WHERE superseded_at IS NULL;
DROP INDEX IF EXISTS agent_memory.memory_items_scope_rank_idx;

ALTER TABLE agent_memory.consolidation_jobs
    ADD COLUMN IF NOT EXISTS facts_updated     integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS facts_invalidated integer NOT NULL DEFAULT 0;
