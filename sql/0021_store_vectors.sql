-- agent-memory schema, version 21: the Store's vector index (AgentMemoryStore(index=...),
-- LangGraph's IndexConfig, as PostgresStore has it).
--
-- One row per embedded field of an item: the field's path ("text", "items.0.name", ...) and
-- the vector the store's embeddings gave for its text. The vector is a real[] rather than a
-- pgvector column, so the migration needs no extension (a server without pgvector keeps
-- working, as agent_memory.db.embeddings' tables do) and one table holds every model's length:
-- a search casts to vector(dims) (or halfvec(dims)), and setup() with an index builds the
-- per-dims expression index that cast can use. An item's vectors go with it (ON DELETE
-- CASCADE: a delete, an erasure, a purge of its fact).
-- Every statement is safe to re-run.
CREATE TABLE IF NOT EXISTS agent_memory.store_vectors (
    item_id    bigint NOT NULL REFERENCES agent_memory.store_items (id) ON DELETE CASCADE,
    field_path text COLLATE "C" NOT NULL,
    embedding  real[] NOT NULL CHECK (cardinality(embedding) > 0),
    -- the item's scope, for row-level security (tenant mode), as store_items has it
    scope_key  text COLLATE "C",
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (item_id, field_path)
);
CREATE INDEX IF NOT EXISTS store_vectors_scope_idx
    ON agent_memory.store_vectors (scope_key) WHERE scope_key IS NOT NULL;

-- a put replaces an item's vectors: those of the fields it no longer embeds go. Tenants hold
-- no DELETE right (it would allow LOCK TABLE, sql/0019), so through this function, which
-- deletes the caller's own (a tenant's scope's) only.
CREATE OR REPLACE FUNCTION agent_memory.store_vectors_keep(item bigint, kept text[])
    RETURNS void LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
AS $$
    DELETE FROM agent_memory.store_vectors v
    WHERE v.item_id = item AND v.field_path <> ALL(kept)
      AND (agent_memory.tenant_scope() IS NULL OR v.scope_key = agent_memory.tenant_scope()
           OR (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user))
$$;
REVOKE ALL ON FUNCTION agent_memory.store_vectors_keep(bigint, text[]) FROM PUBLIC;

-- a tenant reads and writes the vectors of its own scope only (schema 19's helper: row-level
-- security by scope_key, UPDATE per column, no DELETE)
SELECT agent_memory.protect('agent_memory.store_vectors', 'SELECT, INSERT, UPDATE');
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN
        GRANT EXECUTE ON FUNCTION agent_memory.store_vectors_keep(bigint, text[])
            TO agent_memory_tenant;
    END IF;
END
$$;
