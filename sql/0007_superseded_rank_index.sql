-- agent-memory schema, version 7: the ranks of superseded facts, indexed by scope.
--
-- The current-fact index (version 3) and this one cover every fact between them, each in
-- (scope_key, decay_rank) order. The decay analytics read all facts' ranks grouped by scope as
-- two index-only scans with a streaming aggregate, not a scan of the whole table and a hash
-- of every fact (at 1M facts: 0.20 s instead of 0.43 s). Superseded facts are few, and a fact
-- is written here only when it is superseded, so the index costs writes next to nothing.
-- (guarded: version 12 replaces it with an index on expires_day and drops decay_rank)
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = 'agent_memory' AND table_name = 'memory_items'
                 AND column_name = 'decay_rank') THEN
        CREATE INDEX IF NOT EXISTS memory_items_superseded_rank_idx
            ON agent_memory.memory_items (scope_key, decay_rank DESC)
            WHERE superseded_at IS NOT NULL;
    END IF;
END
$$;
