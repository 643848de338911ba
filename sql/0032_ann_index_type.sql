-- agent-memory schema, version 32: the type each per-scope HNSW index compares vectors as.
-- vector migration
--
-- A large scope's own HNSW index (agent_memory.db.ann_indexes) may index its vectors as
-- `vector` (four bytes a dimension) or, where the server's pgvector has it (0.7 or later), as
-- `halfvec` (two): the vectors stay stored in full in their tables, only the index holds them
-- at half precision, and a search re-ranks what the index returns by the full vectors. Which
-- one an index is must be known to read it (its expression is `embedding::halfvec(d)` or
-- `embedding::vector(d)`, and a plan uses it only when the search names the same), so each
-- index's row records it. The indexes built before this version are `vector`, as the default
-- records them. A vector migration (see sql/0029): nothing when the tables are absent, and
-- safe to re-run.
DO $$
BEGIN
    IF to_regclass('agent_memory.ann_indexes') IS NULL THEN
        RETURN;
    END IF;
    ALTER TABLE agent_memory.ann_indexes
        ADD COLUMN IF NOT EXISTS vector_type text NOT NULL DEFAULT 'vector'
        CHECK (vector_type IN ('vector', 'halfvec'));
END
$$;
