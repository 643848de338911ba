-- agent-memory schema, version 15: the LangGraph Store (agent_memory.store.AgentMemoryStore).
--
-- Every item put through the store is a row here, with its namespace, key and value as put.
-- An item of a memory namespace (one the store's namespace template maps to a scope) is a fact
-- too, fact_id: it is visible while that fact is current and goes with the fact when decay
-- purges it or the scope is erased. Any other item is a JSON document; one whose namespace
-- starts with a scope's memory namespace belongs to that scope (the scope columns), so that
-- export and erasure find it.
CREATE TABLE IF NOT EXISTS agent_memory.store_items (
    id          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    -- C collation: labels compare and sort as Python compares strings
    namespace   text[] COLLATE "C" NOT NULL CHECK (cardinality(namespace) > 0),
    key         text COLLATE "C" NOT NULL,
    value       jsonb NOT NULL CHECK (jsonb_typeof(value) = 'object'),
    fact_id     bigint REFERENCES agent_memory.memory_items (id) ON DELETE CASCADE,
    -- false while its fact is not current (kept by the trigger below)
    visible     boolean NOT NULL DEFAULT true,
    user_id     text,
    agent_id    text,
    workflow_id text,
    scope_key   text COLLATE "C" GENERATED ALWAYS AS
                    (CASE WHEN coalesce(user_id, agent_id, workflow_id) IS NOT NULL
                          THEN agent_memory.scope_key(user_id, agent_id, workflow_id) END) STORED,
    -- what a query is matched against: the value's strings, not its keys or punctuation
    search      tsvector GENERATED ALWAYS AS
                    (jsonb_to_tsvector('english', value, '["string"]')) STORED,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, key)
);

CREATE INDEX IF NOT EXISTS store_items_fact_idx
    ON agent_memory.store_items (fact_id) WHERE fact_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS store_items_scope_idx
    ON agent_memory.store_items (scope_key) WHERE scope_key IS NOT NULL;
-- a namespace's latest items (a search without a query), read in order
CREATE INDEX IF NOT EXISTS store_items_latest_idx
    ON agent_memory.store_items (namespace, updated_at DESC) WHERE visible;

-- A fact a row shows is not shown again under a key of its own: `shown` says which, so that
-- the facts no row shows are read, latest first, from an index of their own.
ALTER TABLE agent_memory.memory_items
    ADD COLUMN IF NOT EXISTS shown boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS memory_items_unshown_idx
    ON agent_memory.memory_items (scope_key, updated_at DESC)
    WHERE superseded_at IS NULL AND NOT shown;

-- a fact superseded (or said again) hides (or shows) the rows that show it
CREATE OR REPLACE FUNCTION agent_memory.store_fact_changed() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    UPDATE agent_memory.store_items SET visible = (NEW.superseded_at IS NULL)
    WHERE fact_id = NEW.id AND visible IS DISTINCT FROM (NEW.superseded_at IS NULL);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS memory_items_store_visible ON agent_memory.memory_items;
CREATE TRIGGER memory_items_store_visible
    AFTER UPDATE OF superseded_at ON agent_memory.memory_items
    FOR EACH ROW WHEN (OLD.superseded_at IS DISTINCT FROM NEW.superseded_at)
    EXECUTE FUNCTION agent_memory.store_fact_changed();

-- a row that starts or stops showing a fact marks it
CREATE OR REPLACE FUNCTION agent_memory.store_row_changed() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.fact_id IS NOT NULL
       AND (TG_OP = 'DELETE' OR OLD.fact_id IS DISTINCT FROM NEW.fact_id) THEN
        UPDATE agent_memory.memory_items m SET shown = false
        WHERE m.id = OLD.fact_id AND m.shown
          AND NOT EXISTS (SELECT 1 FROM agent_memory.store_items o WHERE o.fact_id = OLD.fact_id);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.fact_id IS NOT NULL THEN
        UPDATE agent_memory.memory_items SET shown = true WHERE id = NEW.fact_id AND NOT shown;
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS store_items_shown ON agent_memory.store_items;
CREATE TRIGGER store_items_shown
    AFTER INSERT OR DELETE OR UPDATE OF fact_id ON agent_memory.store_items
    FOR EACH ROW EXECUTE FUNCTION agent_memory.store_row_changed();
