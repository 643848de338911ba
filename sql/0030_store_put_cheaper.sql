-- agent-memory schema, version 30: a Store put of a memory item costs less on the server.
--
-- What a put paid for besides writing its fact and its item, measured on the server's own CPU
-- time (docs/benchmarks.md, store):
--
-- * The full-text counts (sql/0017) were appended by a trigger for each statement, which
--   gathers the statement's rows in a transition table first. Every fact is written by a
--   statement of its own (agent_memory.upsert_fact), so that gathering bought nothing: the
--   count of a new fact is now appended by a trigger for each row, behind a WHEN that spares a
--   superseded row the call. Deletes (decay purges many rows at once) keep the statement's.
-- * The item's row called a trigger on insert to mark its fact shown, which for a fact the put
--   had just inserted (already shown: upsert_fact's p_shown) found nothing to do. The put now
--   marks the fact itself when it points a new row at a fact it did not insert (the same
--   wording written earlier by a flow, or the fact its key names), and the trigger runs only
--   for a delete or a change of the fact a row shows. Nothing else inserts a row that shows a
--   fact (agent_memory.db.store_writes writes documents alone).
-- * A put asked, for each new fact, whether the scope's counts had spread over 32 rows, which
--   reads the rows earlier folds deleted until a vacuum removes them; one new fact in four (by
--   a hash of its id, so no pattern of writers skips a scope) asks now, so a scope's rows of a
--   word reach about 32 plus the few puts before the next one that asks.
-- * agent_memory.fold_fact_terms (sql/0022), about one put in 32, found the rows of the fact's
--   words with ``lexeme = ANY (words)``, which PL/pgSQL's kept plan read as a scan of the
--   scope's every count, filtered; and a plan kept from the first puts into an empty table went
--   on scanning after the table had grown, until the next ANALYZE. Each word is now looked up
--   on its own, through the whole (corpus, scope_key, lexeme) key (a lateral subquery kept apart
--   with OFFSET 0, as agent_memory.db.fulltext reads them), the rows found are deleted by
--   their row address, and the function is planned for the table as it is at each call
--   (plan_cache_mode), which at one call in 32 costs little. The advisory lock on the scope
--   keeps any other fold away from those rows meanwhile, and rows appended by concurrent writers
--   are not in the statement's snapshot, so they are neither folded nor lost (as before).
--
-- What is counted, and what a fold does, is unchanged. Every statement is safe to re-run.

CREATE OR REPLACE FUNCTION agent_memory.count_new_fact_terms() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
    SELECT 'f', NEW.scope_key, lexeme, 1, 0 FROM unnest(tsvector_to_array(NEW.search)) AS lexeme
    UNION ALL
    SELECT 'f', NEW.scope_key, '', 1, length(NEW.search);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS memory_items_terms_added ON agent_memory.memory_items;
CREATE TRIGGER memory_items_terms_added AFTER INSERT ON agent_memory.memory_items
    FOR EACH ROW WHEN (NEW.superseded_at IS NULL)
    EXECUTE FUNCTION agent_memory.count_new_fact_terms();

-- (agent_memory.store_row_changed, sql/0015, handles a delete and a change of fact_id)
DROP TRIGGER IF EXISTS store_items_shown ON agent_memory.store_items;
CREATE TRIGGER store_items_shown
    AFTER DELETE ON agent_memory.store_items
    FOR EACH ROW EXECUTE FUNCTION agent_memory.store_row_changed();
DROP TRIGGER IF EXISTS store_items_shown_changed ON agent_memory.store_items;
CREATE TRIGGER store_items_shown_changed
    AFTER UPDATE OF fact_id ON agent_memory.store_items
    FOR EACH ROW WHEN (OLD.fact_id IS DISTINCT FROM NEW.fact_id)
    EXECUTE FUNCTION agent_memory.store_row_changed();

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
    fresh boolean := false;  -- the fact is the one this put inserted (shown from the start)
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
            SELECT u.id, u.inserted INTO fact, fresh FROM agent_memory.upsert_fact(
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
        IF row_id IS NOT NULL THEN
            -- (a fact this put inserted is shown already: agent_memory.upsert_fact's p_shown)
            IF NOT (written AND fresh) THEN
                UPDATE agent_memory.memory_items m SET shown = true
                WHERE m.id = fact AND NOT m.shown;
            END IF;
            EXIT;
        END IF;
    END LOOP;
    IF shown IS NOT NULL AND shown <> fact THEN
        PERFORM agent_memory.store_retire(shown, fact, scope);
    END IF;
    -- one new fact in four, chosen by its id's hash, asks whether the scope's counts have
    -- spread (fold_fact_terms checks it too; asked here first, the put calls it about once in
    -- 32): the question reads the rows a fold left dead until a vacuum, every time
    IF written AND (hashint8(fact) & 3) = 0 THEN
        IF (SELECT count(*) FROM (SELECT FROM agent_memory.term_counts k
                                  WHERE k.corpus = 'f' AND k.scope_key = scope COLLATE "C"
                                    AND k.lexeme = '' LIMIT 32) AS r) >= 32 THEN
            PERFORM agent_memory.fold_fact_terms(fact, 32);
        END IF;
    END IF;
    RETURN fact;
END
$$;

-- Fold the full-text counts of fact ``fact``'s scope (sql/0022 says when and why).
CREATE OR REPLACE FUNCTION agent_memory.fold_fact_terms(fact bigint, spread integer)
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
    SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    scope text;
    words text[];
    removed integer;
BEGIN
    SELECT m.scope_key, tsvector_to_array(m.search) || ARRAY['']::text[] INTO scope, words
    FROM agent_memory.memory_items m WHERE m.id = fact;
    IF scope IS NULL
       OR (SELECT count(*) FROM (SELECT FROM agent_memory.term_counts k
                                 WHERE k.corpus = 'f' AND k.scope_key = scope AND k.lexeme = ''
                                 LIMIT spread) AS r) < spread
       OR NOT (agent_memory.tenant_scope() IS NULL OR scope = agent_memory.tenant_scope()
               OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user))
       OR NOT pg_try_advisory_xact_lock(hashtext('agent_memory.term_counts'), hashtext(scope))
    THEN
        RETURN 0;
    END IF;
    WITH found AS (
        SELECT k.ctid AS address, k.lexeme
        FROM unnest(words) AS w(lexeme)
        CROSS JOIN LATERAL (
            SELECT c.ctid, c.lexeme FROM agent_memory.term_counts c
            WHERE c.corpus = 'f' AND c.scope_key = scope AND c.lexeme = w.lexeme
            OFFSET 0) AS k
    ), spread_words AS (
        SELECT f.lexeme FROM found f GROUP BY f.lexeme HAVING count(*) > 1
    ), gone AS (
        DELETE FROM agent_memory.term_counts k
        WHERE k.ctid = ANY (ARRAY(SELECT f.address FROM found f
                                  WHERE f.lexeme IN (SELECT lexeme FROM spread_words)))
        RETURNING k.lexeme, k.docs, k.size
    ), folded AS (
        INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
        SELECT 'f', scope, lexeme, sum(docs), sum(size) FROM gone GROUP BY lexeme
        HAVING sum(docs) <> 0 OR sum(size) <> 0
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone) - (SELECT count(*) FROM folded) INTO removed;
    RETURN removed;
END
$$;
