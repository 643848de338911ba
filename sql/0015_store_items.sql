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
    ON agent_memory.store_items (namespace, updated_at DESC);
