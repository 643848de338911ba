-- agent-memory schema, version 23: a tenant reads the levels of memory its scope reads
-- (issue 39; docs/guide.md, "Levels of memory").
--
-- Schema 16 confined a tenant to the rows of its scope. A scope now reads its own facts and
-- those of the levels above it that AGENT_MEMORY_SHARE names (Scope.levels: the person's
-- (user_id alone), the person with the agent, the agent's own knowledge). Which keys those are
-- is recorded per tenant when it is made (tenants.read_keys, by MemoryManager.create_tenant
-- under its settings), so the rule stays in one place, the library's, and the database only
-- enforces its answer. A tenant made before this version has none recorded and reads its own
-- scope alone, as before, until `tenant create` is run for it again.
--
-- Reads only: a permissive SELECT policy beside schema 16's, which keeps confining every
-- write (INSERT's check, UPDATE's and SELECT ... FOR UPDATE's rows) to the exact scope. Writes
-- across levels are consolidation's, as the owner. Every statement is safe to re-run.
ALTER TABLE agent_memory.tenants ADD COLUMN IF NOT EXISTS read_keys text[] COLLATE "C";

-- The keys the session's tenant may read: those recorded, its own scope's when none are (and
-- always its own); NULL where tenant_scope() is NULL (no restriction).
CREATE OR REPLACE FUNCTION agent_memory.tenant_levels() RETURNS text[]
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
AS $$
    SELECT CASE WHEN own.k IS NULL THEN NULL
                ELSE array_append(coalesce((SELECT t.read_keys FROM agent_memory.tenants t
                                            WHERE t.role_name = session_user), '{}'), own.k)
           END
    FROM (SELECT agent_memory.tenant_scope() AS k) AS own
$$;

-- ``tab``'s rows of the levels the tenant reads become visible to SELECT (not to any write)
CREATE OR REPLACE FUNCTION agent_memory.share_levels(tab regclass) RETURNS void
    LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DROP POLICY IF EXISTS tenant_levels ON %s', tab);
    EXECUTE format(
        'CREATE POLICY tenant_levels ON %s FOR SELECT USING ('
        '(SELECT agent_memory.tenant_scope()) IS NULL'
        ' OR scope_key = ANY((SELECT agent_memory.tenant_levels())::text[]))', tab);
END
$$;

-- the facts, their full-text statistics and their vectors (ranked together over the levels);
-- episodes and conversation snippets stay with their exact scope (conversations do not cross)
SELECT agent_memory.share_levels('agent_memory.memory_items');
SELECT agent_memory.share_levels('agent_memory.term_counts');

-- the vectors' tables, made on first use (agent_memory.db.embeddings calls this once it has
-- made them): schema 16's, and the facts' vectors and the levels' own indexes shared
CREATE OR REPLACE FUNCTION agent_memory.protect_vectors() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass('agent_memory.ann_indexes') IS NOT NULL THEN
        PERFORM agent_memory.protect('agent_memory.fact_embeddings', 'SELECT');
        PERFORM agent_memory.protect('agent_memory.snippet_embeddings', 'SELECT');
        PERFORM agent_memory.protect('agent_memory.ann_indexes', 'SELECT');
        PERFORM agent_memory.share_levels('agent_memory.fact_embeddings');
        PERFORM agent_memory.share_levels('agent_memory.ann_indexes');
    END IF;
END
$$;
SELECT agent_memory.protect_vectors();

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN
        GRANT EXECUTE ON FUNCTION agent_memory.tenant_levels() TO agent_memory_tenant;
    END IF;
END
$$;
