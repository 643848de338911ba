-- agent-memory schema, version 29: the vectors' tables (pgvector), made by a migration.
-- vector migration
--
-- fact_embeddings, snippet_embeddings and ann_indexes need the `vector` extension, which is
-- optional: a server without pgvector, or a migrating role that may not create the extension
-- (many managed services), keeps working with full-text relevance. Until version 29 they were
-- made on first use by agent_memory.db.embeddings.ensure(), outside the migrations, so a change
-- to them never reached a database that had them already. Now they are made here when the
-- extension can be had, and skipped cleanly when it cannot: the migration is recorded either
-- way, and ensure() runs this file's text again when the tables are missing (pgvector installed
-- after migrating, or installed by a DBA for a role that could not), so the DDL has one home.
--
-- The rule for a later migration that changes these tables (a "vector migration"):
--   * it carries the line "-- vector migration" in its header, as this file does;
--   * it conditions every statement on the tables existing (a DO block that returns when
--     to_regclass('agent_memory.ann_indexes') IS NULL; PL/pgSQL plans a statement only when it
--     runs, so one naming the `vector` type or the tables is not planned when they are absent);
--   * it is safe to re-run: agent_memory.db.migrations.apply_vector_migrations (called by
--     ensure() when the tables are missing) runs every applied vector migration again, in order,
--     under the migration lock, so a database that gains pgvector later gets this file's tables
--     and then each later change to them.
--
-- A database whose tables the old ensure() made keeps them as they are: every statement below
-- is IF NOT EXISTS (or fills only what is missing), so its rows, indexes (the per-scope HNSW
-- indexes listed in ann_indexes among them) and policies are untouched. The policies of tenant
-- mode are schema 16's and 23's agent_memory.protect_vectors(). Every statement is safe to
-- re-run.
DO $$
BEGIN
    -- why the tables were skipped, for ensure() to read in this transaction (reset first: a
    -- reason left by an earlier run in the same transaction is not this run's)
    PERFORM set_config('agent_memory.vectors_skipped', '', true);
    BEGIN
        CREATE EXTENSION IF NOT EXISTS vector;
    EXCEPTION WHEN insufficient_privilege OR undefined_file OR feature_not_supported THEN
        -- insufficient_privilege: this role may not create it; undefined_file: the server has
        -- no pgvector (no control file); feature_not_supported: it cannot be installed here
        PERFORM set_config('agent_memory.vectors_skipped', SQLSTATE || ' ' || SQLERRM, true);
        RAISE NOTICE 'agent-memory: no vector tables (%); relevance by full text only', SQLERRM;
        RETURN;
    END;
    -- installed in a schema off this role's search_path: the statements below could not name
    -- the type (ensure() says so from the catalog)
    IF to_regtype('vector') IS NULL THEN
        RETURN;
    END IF;

    CREATE TABLE IF NOT EXISTS agent_memory.fact_embeddings (
        fact_id    bigint PRIMARY KEY
                   REFERENCES agent_memory.memory_items (id) ON DELETE CASCADE,
        model      text NOT NULL,
        embedding  vector NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX IF NOT EXISTS fact_embeddings_model_idx
        ON agent_memory.fact_embeddings (model);
    -- the messages of past conversations (sql/0009); a message the model refused has a NULL
    -- embedding, so it is not asked for again (full text still finds it)
    CREATE TABLE IF NOT EXISTS agent_memory.snippet_embeddings (
        snippet_id bigint PRIMARY KEY REFERENCES agent_memory.snippets (id) ON DELETE CASCADE,
        model      text NOT NULL,
        embedding  vector
    );
    -- each vector carries its scope, so a scope's nearest are read from its own rows (and, for
    -- a large scope, from an index of its own: agent_memory.db.ann_indexes); the UPDATEs fill
    -- the rows of tables made before the column was (none on a new database)
    ALTER TABLE agent_memory.fact_embeddings ADD COLUMN IF NOT EXISTS scope_key text COLLATE "C";
    ALTER TABLE agent_memory.snippet_embeddings
        ADD COLUMN IF NOT EXISTS scope_key text COLLATE "C";
    UPDATE agent_memory.fact_embeddings e SET scope_key = m.scope_key
    FROM agent_memory.memory_items m WHERE m.id = e.fact_id AND e.scope_key IS NULL;
    UPDATE agent_memory.snippet_embeddings e SET scope_key = m.scope_key
    FROM agent_memory.snippets m WHERE m.id = e.snippet_id AND e.scope_key IS NULL;
    CREATE INDEX IF NOT EXISTS fact_embeddings_scope_idx
        ON agent_memory.fact_embeddings (scope_key, model);
    CREATE INDEX IF NOT EXISTS snippet_embeddings_scope_idx
        ON agent_memory.snippet_embeddings (scope_key, model);
    -- the approximate nearest-neighbour (HNSW) indexes of large scopes, one per scope and model
    CREATE TABLE IF NOT EXISTS agent_memory.ann_indexes (
        kind       text NOT NULL CHECK (kind IN ('facts', 'snippets')),
        scope_key  text COLLATE "C" NOT NULL,
        model      text NOT NULL,
        dims       integer NOT NULL,
        name       text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (kind, scope_key, model)
    );
    -- a keyed hash of the scope key (sql/0019), which a large scope's own HNSW index names
    ALTER TABLE agent_memory.fact_embeddings ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
    ALTER TABLE agent_memory.snippet_embeddings
        ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
    ALTER TABLE agent_memory.ann_indexes ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
    -- tenant mode: a tenant reads its own scope's vectors (and its levels' facts' vectors) only
    PERFORM agent_memory.protect_vectors();
END
$$;
