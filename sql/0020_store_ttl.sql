-- agent-memory schema, version 20: Store items that expire (TTL, as LangGraph's PostgresStore
-- has it: agent_memory.store.ttl).
--
-- An item put with a TTL (minutes) expires ttl_minutes after it was put, or after it was last
-- read when reads refresh it: expires_at. The store hides an expired item at once; the sweep
-- (sweep_ttl, the sweeper) deletes its row and, for an item of a memory namespace, invalidates
-- its fact, which is kept, superseded, as history (as a delete does). NULL: never expires.
-- Minutes may be fractional (LangGraph's own tests put items for a tenth of a minute).
-- Every statement is safe to re-run.
ALTER TABLE agent_memory.store_items
    ADD COLUMN IF NOT EXISTS expires_at  timestamptz,
    ADD COLUMN IF NOT EXISTS ttl_minutes double precision;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'store_items_ttl_positive'
                     AND conrelid = 'agent_memory.store_items'::regclass) THEN
        ALTER TABLE agent_memory.store_items ADD CONSTRAINT store_items_ttl_positive
            CHECK ((ttl_minutes IS NULL) = (expires_at IS NULL)
                   AND (ttl_minutes IS NULL OR ttl_minutes > 0));
    END IF;
END
$$;

-- the sweep reads the expired rows, earliest first, from here
CREATE INDEX IF NOT EXISTS store_items_expires_idx
    ON agent_memory.store_items (expires_at) WHERE expires_at IS NOT NULL;

-- The rows of ``ids`` that have expired, deleted: the caller's own (a tenant's scope's) only,
-- as store_delete (sql/0019): tenants hold no DELETE right, which would let them LOCK the
-- table. The ids and facts of the rows deleted.
CREATE OR REPLACE FUNCTION agent_memory.store_delete_expired(ids bigint[])
    RETURNS TABLE (id bigint, fact_id bigint, expired_at timestamptz)
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
AS $$
    DELETE FROM agent_memory.store_items s
    WHERE s.id = ANY(ids) AND s.expires_at <= now()
      AND (agent_memory.tenant_scope() IS NULL OR s.scope_key = agent_memory.tenant_scope()
           OR (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user))
    RETURNING s.id, s.fact_id, s.expires_at
$$;
REVOKE ALL ON FUNCTION agent_memory.store_delete_expired(bigint[]) FROM PUBLIC;

-- tenants write the new columns (a put's TTL, a read's refresh): UPDATE per column, as
-- sql/0019 grants it (no table-level right, which would allow LOCK TABLE)
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN
        PERFORM agent_memory.grant_tenant_updates('agent_memory.store_items');
        GRANT EXECUTE ON FUNCTION agent_memory.store_delete_expired(bigint[])
            TO agent_memory_tenant;
    END IF;
END
$$;
