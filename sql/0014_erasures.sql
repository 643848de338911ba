-- agent-memory schema, version 14: erasures. Erasing a scope removes everything memory holds
-- about it (agent_memory.db.erasure); what stays is the record that it happened: when, the
-- SHA-256 of the scope's key (not the key: it names the person), and how many rows of each
-- table went. No content.
CREATE TABLE IF NOT EXISTS agent_memory.erasures (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    erased_at        timestamptz NOT NULL DEFAULT now(),
    scope_key_sha256 bytea NOT NULL,
    rows_removed     jsonb NOT NULL
);
