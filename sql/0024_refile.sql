-- agent-memory schema, version 24: a fact's vector follows the fact to another scope.
--
-- A fact's scope was fixed when it was written, until re-filing (issue 39, migration to levels
-- of memory: agent_memory.refile) began to move current facts to their level. What follows a
-- fact by itself: its scope_key (generated from its parts), its full-text statistics (the
-- update trigger of sql/0017 counts a change of scope_key as a row that left one scope and
-- came into another), the Store rows that show it (they name it by id). What did not: its
-- vector's row in fact_embeddings, which carries the scope's key and tag so that a scope's
-- nearest are read from its own rows and its own HNSW index (agent_memory.db.ann_indexes). This
-- trigger moves them with the fact; an HNSW index is partial on the tag, so the row leaves the
-- old scope's index and enters the new one's (if it has one) as PostgreSQL keeps both.
--
-- fact_embeddings is made on first use (agent_memory.db.embeddings), so it may not exist:
-- PL/pgSQL plans the UPDATE only when it runs, after the check. Every statement is safe to
-- re-run.
CREATE OR REPLACE FUNCTION agent_memory.fact_scope_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass('agent_memory.fact_embeddings') IS NOT NULL THEN
        UPDATE agent_memory.fact_embeddings
        SET scope_key = NEW.scope_key, scope_tag = agent_memory.scope_tag(NEW.scope_key)
        WHERE fact_id = NEW.id AND scope_key IS DISTINCT FROM NEW.scope_key;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS memory_items_scope_moved ON agent_memory.memory_items;
CREATE TRIGGER memory_items_scope_moved AFTER UPDATE ON agent_memory.memory_items
    FOR EACH ROW WHEN (OLD.scope_key IS DISTINCT FROM NEW.scope_key)
    EXECUTE FUNCTION agent_memory.fact_scope_moved();
