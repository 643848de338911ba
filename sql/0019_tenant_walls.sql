-- agent-memory schema, version 19: tenants that cannot touch each other (issue 37).
--
-- Schema 16 confined a tenant's rows to its scope. Four ways round it remained, closed here:
--   * a Store row whose namespace is another user's (the owner's store reads by namespace):
--     a tenant's rows must lie under its own memory namespace, recorded with its role;
--   * consolidation's per-scope advisory lock, which any role can take for any key: a run now
--     claims a scope by locking its row of scope_claims, a table tenants cannot read or lock;
--   * LOCK TABLE, which a table-level UPDATE or DELETE right allows in every mode (so one
--     tenant could stall every reader): tenants now hold UPDATE per column, which allows
--     what their writes need (UPDATE, INSERT ... ON CONFLICT, SELECT FOR UPDATE) and no LOCK
--     beyond ROW EXCLUSIVE; the Store's deletes and the decay policy's share lock go through
--     SECURITY DEFINER functions;
--   * per-scope HNSW indexes whose predicates (in pg_indexes, readable by all) named the scope
--     key: they name a keyed hash of it now, whose key tenants cannot read.
-- Every statement is safe to re-run.

-- ---- consolidation claims -------------------------------------------------------------------
-- one row per scope ever claimed; a run holds a scope by a row lock (FOR UPDATE SKIP LOCKED)
-- in an open transaction on a connection of its own, which ends with the run, however it ends
CREATE TABLE IF NOT EXISTS agent_memory.scope_claims (
    scope_key text COLLATE "C" PRIMARY KEY
);
REVOKE ALL ON agent_memory.scope_claims FROM PUBLIC;

-- ---- Store namespaces -----------------------------------------------------------------------
-- a tenant's memory namespace, as its store renders its scope (``tenant create`` records it;
-- NULL: the scope has none, and the tenant writes no Store rows). Tenants made before this
-- version get the default template's, ('memories', user_id), where their scope has one.
ALTER TABLE agent_memory.tenants ADD COLUMN IF NOT EXISTS namespace text[] COLLATE "C";
UPDATE agent_memory.tenants SET namespace = ARRAY['memories', user_id]
WHERE namespace IS NULL AND agent_id IS NULL AND workflow_id IS NULL
  AND user_id <> '' AND strpos(user_id, '.') = 0;

CREATE OR REPLACE FUNCTION agent_memory.tenant_namespace() RETURNS text[]
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
AS $$
    SELECT t.namespace FROM agent_memory.tenants t WHERE t.role_name = session_user
$$;

-- a tenant's Store row lies under its own memory namespace (and is of its scope, as before):
-- bob's namespace takes bob's rows only. Checked before the primary key is, so a refused
-- insert says nothing of the keys there.
ALTER TABLE agent_memory.store_items ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_scope ON agent_memory.store_items;
CREATE POLICY tenant_scope ON agent_memory.store_items
    USING ((SELECT agent_memory.tenant_scope()) IS NULL
           OR scope_key = (SELECT agent_memory.tenant_scope()))
    WITH CHECK ((SELECT agent_memory.tenant_scope()) IS NULL
                OR (scope_key = (SELECT agent_memory.tenant_scope())
                    AND namespace[1:cardinality((SELECT agent_memory.tenant_namespace()))]
                        = (SELECT agent_memory.tenant_namespace()) COLLATE "C"));

-- a Store item deleted: the caller's own (a tenant's scope's) only. Tenants hold no DELETE
-- right, which would let them LOCK the table. (A superuser is a member of every role, so
-- tenant_scope() restricts it too; row-level security never applied to it, nor does this.)
CREATE OR REPLACE FUNCTION agent_memory.store_delete(ns text[], item_key text) RETURNS void
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
AS $$
    DELETE FROM agent_memory.store_items s
    WHERE s.namespace = ns COLLATE "C" AND s.key = item_key COLLATE "C"
      AND (agent_memory.tenant_scope() IS NULL OR s.scope_key = agent_memory.tenant_scope()
           OR (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user))
$$;
REVOKE ALL ON FUNCTION agent_memory.store_delete(text[], text) FROM PUBLIC;

-- the decay policy's purge threshold, unless the policy is being changed (the row held FOR
-- SHARE, SKIP LOCKED: inject's reinforcement then skips). The lock needs an UPDATE right, with
-- which a tenant could also hold the row FOR UPDATE and stop everyone's reinforcement.
CREATE OR REPLACE FUNCTION agent_memory.shared_purge_below() RETURNS SETOF double precision
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
AS $$
    SELECT purge_below FROM agent_memory.decay_policy FOR SHARE SKIP LOCKED
$$;
REVOKE ALL ON FUNCTION agent_memory.shared_purge_below() FROM PUBLIC;

-- ---- writes without LOCK ------------------------------------------------------------------
-- ``tab``'s UPDATE right for the group, per column: LOCK TABLE checks table-level rights only
CREATE OR REPLACE FUNCTION agent_memory.grant_tenant_updates(tab regclass) RETURNS void
    LANGUAGE plpgsql AS $$
DECLARE
    cols text;
BEGIN
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute
    WHERE attrelid = tab AND attnum > 0 AND NOT attisdropped
      AND attgenerated = '' AND attidentity <> 'a';
    -- revoking the table's right revokes the columns' too: grant them after
    EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON %s FROM agent_memory_tenant', tab);
    EXECUTE format('GRANT UPDATE (%s) ON %s TO agent_memory_tenant', cols, tab);
END
$$;

-- schema 16's protect(), now granting UPDATE per column and refusing DELETE and TRUNCATE
-- (a tenant's delete goes through a SECURITY DEFINER function, as store_delete)
CREATE OR REPLACE FUNCTION agent_memory.protect(
    tab regclass, access text, via_fact boolean DEFAULT false
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    rule text := CASE WHEN via_fact
        THEN 'EXISTS (SELECT 1 FROM agent_memory.memory_items m WHERE m.id = fact_id)'
        ELSE 'scope_key = (SELECT agent_memory.tenant_scope())' END;
    wanted text[] := ARRAY(SELECT upper(btrim(a)) FROM unnest(string_to_array(access, ',')) a);
BEGIN
    IF wanted && ARRAY['DELETE', 'TRUNCATE', 'ALL'] THEN
        RAISE EXCEPTION 'tenants get no % right on % (it allows LOCK TABLE): delete through'
            ' a SECURITY DEFINER function', access, tab;
    END IF;
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tab);
    EXECUTE format('DROP POLICY IF EXISTS tenant_scope ON %s', tab);
    EXECUTE format(
        'CREATE POLICY tenant_scope ON %s USING ((SELECT agent_memory.tenant_scope()) IS NULL'
        ' OR %s) WITH CHECK ((SELECT agent_memory.tenant_scope()) IS NULL OR %s)',
        tab, rule, rule);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN
        IF cardinality(array_remove(wanted, 'UPDATE')) > 0 THEN
            EXECUTE format('GRANT %s ON %s TO agent_memory_tenant',
                           array_to_string(array_remove(wanted, 'UPDATE'), ', '), tab);
        END IF;
        IF 'UPDATE' = ANY(wanted) THEN
            PERFORM agent_memory.grant_tenant_updates(tab);
        END IF;
    END IF;
END
$$;

DO $$
DECLARE
    tab regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN
        RETURN;
    END IF;
    -- no table-level UPDATE, DELETE or TRUNCATE anywhere in the schema
    FOR tab IN SELECT c.oid::regclass FROM pg_class c
               WHERE c.relnamespace = 'agent_memory'::regnamespace
                 AND c.relkind IN ('r', 'p') LOOP
        EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON %s FROM agent_memory_tenant', tab);
    END LOOP;
    PERFORM agent_memory.grant_tenant_updates('agent_memory.episodes');
    PERFORM agent_memory.grant_tenant_updates('agent_memory.memory_items');
    PERFORM agent_memory.grant_tenant_updates('agent_memory.store_items');
    REVOKE UPDATE (id) ON agent_memory.decay_policy FROM agent_memory_tenant;
    GRANT EXECUTE ON FUNCTION agent_memory.store_delete(text[], text) TO agent_memory_tenant;
    GRANT EXECUTE ON FUNCTION agent_memory.shared_purge_below() TO agent_memory_tenant;
END
$$;

-- ---- HNSW predicates that name no scope ---------------------------------------------------
-- A per-database secret; scope_tag(k) is a keyed hash of scope key k. Tenants cannot read
-- the secret, so the tag in an index's predicate (pg_indexes is readable by all) cannot be
-- matched against a guessed user id.
CREATE TABLE IF NOT EXISTS agent_memory.scope_salt (
    id   boolean PRIMARY KEY DEFAULT true CHECK (id),
    salt text NOT NULL
);
REVOKE ALL ON agent_memory.scope_salt FROM PUBLIC;
INSERT INTO agent_memory.scope_salt (salt)
VALUES (replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))
ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION agent_memory.scope_tag(key text) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
RETURN (SELECT left(encode(sha256(convert_to(s.salt || key, 'UTF8')), 'hex'), 32)
        FROM agent_memory.scope_salt s);

-- the vectors' tables, made on first use (agent_memory.db.embeddings): where they exist, the
-- tag column, and the indexes whose predicates named a scope dropped (the flows build them
-- again, named by tag, once the scope is due; inject compares exactly meanwhile)
DO $$
DECLARE
    idx text;
BEGIN
    IF to_regclass('agent_memory.ann_indexes') IS NULL THEN
        RETURN;
    END IF;
    ALTER TABLE agent_memory.fact_embeddings ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
    ALTER TABLE agent_memory.snippet_embeddings
        ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
    ALTER TABLE agent_memory.ann_indexes ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
    FOR idx IN DELETE FROM agent_memory.ann_indexes WHERE scope_tag IS NULL RETURNING name LOOP
        EXECUTE format('DROP INDEX IF EXISTS agent_memory.%I', idx);
    END LOOP;
END
$$;
