-- agent-memory schema, version 16: tenant mode. Isolation the database enforces.
--
-- A tenant is a login role of one scope (agent_memory.tenants; made by
-- MemoryManager.create_tenant, `agent-memory tenant create`). Agent-facing code (the nodes,
-- the Store, the tools, the MCP server) can connect as it; row-level security then shows and
-- admits that scope's rows only, whatever SQL the connection runs. The pipeline runs as the
-- tables' owner, which row-level security does not restrict, as does any role that is not a
-- tenant (so enabling it here changes nothing for existing deployments).
--
-- Tenant roles belong to the group role agent_memory_tenant, which holds the grants. Roles are
-- the cluster's, not the database's: the group is made once (by a role allowed to make
-- roles; without that right the migration still applies, and tenant mode is unavailable).
CREATE TABLE IF NOT EXISTS agent_memory.tenants (
    role_name   name PRIMARY KEY,
    user_id     text,
    agent_id    text,
    workflow_id text,
    scope_key   text COLLATE "C" NOT NULL UNIQUE GENERATED ALWAYS AS
                    (agent_memory.scope_key(user_id, agent_id, workflow_id)) STORED,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The scope the session's login role may see: its scope key for a tenant, '' (no scope) for a
-- member of the group with no scope, NULL for any other role (no restriction). session_user,
-- not current_user: SET ROLE cannot change it.
CREATE OR REPLACE FUNCTION agent_memory.tenant_scope() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
AS $$
    SELECT CASE
        WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN NULL
        WHEN NOT pg_has_role(session_user, 'agent_memory_tenant', 'MEMBER') THEN NULL
        ELSE coalesce((SELECT t.scope_key FROM agent_memory.tenants t
                       WHERE t.role_name = session_user), '')
    END
$$;

-- Row-level security on one table, by its scope_key column or (``via_fact``) by the fact its
-- fact_id names; ``access`` is what the group may do there.
CREATE OR REPLACE FUNCTION agent_memory.protect(
    tab regclass, access text, via_fact boolean DEFAULT false
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    rule text := CASE WHEN via_fact
        THEN 'EXISTS (SELECT 1 FROM agent_memory.memory_items m WHERE m.id = fact_id)'
        ELSE 'scope_key = (SELECT agent_memory.tenant_scope())' END;
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tab);
    EXECUTE format('DROP POLICY IF EXISTS tenant_scope ON %s', tab);
    EXECUTE format(
        'CREATE POLICY tenant_scope ON %s USING ((SELECT agent_memory.tenant_scope()) IS NULL'
        ' OR %s) WITH CHECK ((SELECT agent_memory.tenant_scope()) IS NULL OR %s)',
        tab, rule, rule);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN
        EXECUTE format('GRANT %s ON %s TO agent_memory_tenant', access, tab);
    END IF;
END
$$;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant')
       AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user
                   AND (rolsuper OR rolcreaterole)) THEN
        BEGIN
            CREATE ROLE agent_memory_tenant NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- another database of the cluster made it meanwhile
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN
        GRANT USAGE ON SCHEMA agent_memory TO agent_memory_tenant;
        GRANT USAGE ON ALL SEQUENCES IN SCHEMA agent_memory TO agent_memory_tenant;
        GRANT SELECT ON agent_memory.decay_policy, agent_memory.schema_migrations
            TO agent_memory_tenant;
        -- inject's reinforcement reads the policy FOR SHARE, which needs an UPDATE right; the
        -- one column there is a constant (CHECK (id)), so the right changes nothing
        GRANT UPDATE (id) ON agent_memory.decay_policy TO agent_memory_tenant;
    END IF;
END
$$;

-- what an agent does: record conversations, read and write its facts and Store items
SELECT agent_memory.protect('agent_memory.episodes', 'SELECT, INSERT, UPDATE');
SELECT agent_memory.protect('agent_memory.snippets', 'SELECT, INSERT');
SELECT agent_memory.protect('agent_memory.memory_items', 'SELECT, INSERT, UPDATE');
SELECT agent_memory.protect('agent_memory.store_items', 'SELECT, INSERT, UPDATE, DELETE');
-- what it may read of the pipeline's work, and never write
SELECT agent_memory.protect('agent_memory.consolidation_jobs', 'SELECT');
SELECT agent_memory.protect('agent_memory.scope_retries', 'SELECT');
SELECT agent_memory.protect('agent_memory.fact_sources', 'SELECT', true);
SELECT agent_memory.protect('agent_memory.fact_embedding_rejections', 'SELECT', true);
-- extraction_cache, decay_runs, erasures, tenants: no grant at all
-- the vectors' tables, made on first use (agent_memory.db.embeddings calls this once it has
-- made them; here for a database that has them already)
CREATE OR REPLACE FUNCTION agent_memory.protect_vectors() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass('agent_memory.ann_indexes') IS NOT NULL THEN
        PERFORM agent_memory.protect('agent_memory.fact_embeddings', 'SELECT');
        PERFORM agent_memory.protect('agent_memory.snippet_embeddings', 'SELECT');
        PERFORM agent_memory.protect('agent_memory.ann_indexes', 'SELECT');
    END IF;
END
$$;
SELECT agent_memory.protect_vectors();
