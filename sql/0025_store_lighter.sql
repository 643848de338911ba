-- agent-memory schema, version 25: a search's documents found by an index of their own, and a
-- memory item's put that calls the fold of its counts only when there is something to fold.
--
-- A search with a query looks for documents (items that show no fact) under the namespace
-- through the index of its visible rows, so that in a memory namespace, which holds none, it
-- read every item to find that; they now have a partial index of their own. A put of a memory
-- item (sql/0022) called agent_memory.fold_fact_terms, which is SECURITY DEFINER and reads the
-- fact's row first, on every put, to learn about 31 times in 32 that the scope's counts had
-- not spread yet; the put now asks that first. Every statement is safe to re-run.

CREATE INDEX IF NOT EXISTS store_items_documents_idx
    ON agent_memory.store_items (namespace, updated_at DESC) WHERE visible AND fact_id IS NULL;

-- Put memory item ``item_key`` of namespace ``ns`` (a scope's: ``p_user``, ``p_agent``,
-- ``p_workflow``) with ``item_value``, showing the fact of ``p_content`` (the rest of the
-- fact's parameters as agent_memory.upsert_fact takes them), expiring ``ttl`` minutes from now
-- when given. A new wording replaces the fact the item showed, which is retired unless another
-- item still shows it; the same wording keeps it (its value alone changes). When the key has
-- no row, the fact it shows is the one ``named`` by the key (a fact's own key), if no item
-- shows that one. The fact's id.
--
-- Two writers of one key take turns on the key's row, whichever process they run in: the row
-- is locked before the fact it shows is read, so the second reads what the first wrote and
-- the key ends with one item and one current fact (see agent_memory.db.store_writes). A key
-- with no row has nothing to lock: the row is inserted at the end, and a writer that finds it
-- inserted meanwhile by another starts again from the lock (each statement of a function sees
-- what committed before it began).
CREATE OR REPLACE FUNCTION agent_memory.store_put_memory(
    ns text[], item_key text, item_value jsonb, ttl double precision, named bigint,
    p_user text, p_agent text, p_workflow text, p_content text, p_hash bytea,
    p_importance double precision, p_at timestamptz, p_kind text, p_mentions integer,
    p_boost double precision, p_growth double precision, p_max_half_life double precision,
    p_valid_from timestamptz
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    scope text := agent_memory.scope_key(p_user, p_agent, p_workflow);
    row_id bigint;
    row_fact bigint;
    shown bigint;
    shown_hash bytea;
    fact bigint;
    written boolean := false;
    turns integer := 0;
BEGIN
    LOOP
        turns := turns + 1;
        IF turns > 3 THEN  -- a row of the key this role cannot see (another tenant's)
            RAISE EXCEPTION 'store item % of % is not this role''s to write', item_key, ns
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        shown := NULL;
        SELECT s.id, s.fact_id INTO row_id, row_fact FROM agent_memory.store_items s
        WHERE s.namespace = ns COLLATE "C" AND s.key = item_key COLLATE "C" FOR UPDATE;
        IF FOUND THEN
            SELECT f.id, f.content_hash INTO shown, shown_hash FROM agent_memory.memory_items f
            WHERE f.id = row_fact AND f.superseded_at IS NULL;
        ELSIF named IS NOT NULL THEN  -- (a plan for any ``named`` would scan the scope)
            SELECT f.id, f.content_hash INTO shown, shown_hash FROM agent_memory.memory_items f
            WHERE f.id = named AND f.scope_key = scope COLLATE "C" AND f.superseded_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM agent_memory.store_items o WHERE o.fact_id = f.id);
        END IF;
        IF shown IS NOT NULL AND shown_hash = p_hash THEN
            fact := shown;  -- the same fact, said the same way
        ELSIF NOT written THEN  -- (once: a later turn keeps what an earlier one wrote)
            SELECT u.id INTO fact FROM agent_memory.upsert_fact(
                p_user, p_agent, p_workflow, p_content, p_hash, p_importance, p_at, p_kind,
                p_mentions, p_boost, p_growth, p_max_half_life, NULL, p_valid_from, true) u;
            written := true;
        END IF;
        IF row_id IS NOT NULL THEN
            UPDATE agent_memory.store_items SET
                value = item_value, fact_id = fact, user_id = p_user, agent_id = p_agent,
                workflow_id = p_workflow, visible = true, updated_at = now(),
                expires_at = agent_memory.ttl_expiry(ttl), ttl_minutes = ttl
            WHERE id = row_id;
            EXIT;
        END IF;
        INSERT INTO agent_memory.store_items
            (namespace, key, value, fact_id, user_id, agent_id, workflow_id, expires_at,
             ttl_minutes)
        VALUES (ns, item_key, item_value, fact, p_user, p_agent, p_workflow,
                agent_memory.ttl_expiry(ttl), ttl)
        ON CONFLICT (namespace, key) DO NOTHING
        RETURNING id INTO row_id;
        EXIT WHEN row_id IS NOT NULL;
    END LOOP;
    IF shown IS NOT NULL AND shown <> fact THEN
        PERFORM agent_memory.store_retire(shown, fact, scope);
    END IF;
    -- (fold_fact_terms checks this too; asked here first, the put calls it about once in 32)
    IF written AND (SELECT count(*) FROM (SELECT FROM agent_memory.term_counts k
                                          WHERE k.corpus = 'f' AND k.scope_key = scope COLLATE "C"
                                            AND k.lexeme = '' LIMIT 32) AS r) >= 32 THEN
        PERFORM agent_memory.fold_fact_terms(fact, 32);
    END IF;
    RETURN fact;
END
$$;
