-- agent-memory schema, version 3: facts that stay true. Consolidation may update a fact or
-- invalidate one the conversation contradicts; the old fact is kept, marked with when and by
-- what it was superseded, and inject never returns it.

ALTER TABLE agent_memory.memory_items
    ADD COLUMN IF NOT EXISTS superseded_at     timestamptz,
    ADD COLUMN IF NOT EXISTS superseded_by     bigint,          -- the fact that replaced it; NULL: invalidated
    ADD COLUMN IF NOT EXISTS superseded_by_job bigint;

-- inject reads current facts only: the scope index covers just those
-- (guarded: version 12 replaces it with an index on expires_day and drops decay_rank)
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = 'agent_memory' AND table_name = 'memory_items'
                 AND column_name = 'decay_rank') THEN
        CREATE INDEX IF NOT EXISTS memory_items_current_rank_idx
            ON agent_memory.memory_items (scope_key, decay_rank DESC)
            WHERE superseded_at IS NULL;
    END IF;
END
$$;
DROP INDEX IF EXISTS agent_memory.memory_items_scope_rank_idx;

ALTER TABLE agent_memory.consolidation_jobs
    ADD COLUMN IF NOT EXISTS facts_updated     integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS facts_invalidated integer NOT NULL DEFAULT 0;
