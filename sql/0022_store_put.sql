-- agent-memory schema, version 22: a fact's upsert and a memory item's put as functions.
--
-- A put of a memory item read the fact its key showed, wrote the new fact, pointed the row at
-- it and retired the old one: four statements and a transaction, each a round trip from the
-- client. Here it is one call of agent_memory.store_put_memory, which the Store runs on its own
-- (one statement is a transaction) when a batch is that one put, and which folds the
-- full-text counts of the words it wrote once they have spread. The fact's upsert, which
-- consolidation and the tools run too, becomes agent_memory.upsert_fact so that every writer
-- uses the one definition. Every statement is safe to re-run.

-- The moment a TTL of ``minutes`` that starts now runs out (NULL: none).
CREATE OR REPLACE FUNCTION agent_memory.ttl_expiry(minutes double precision)
    RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN now() + minutes * interval '1 minute';

-- A fact said again on ``day`` (the later of its two mentions): its importance then, the higher
-- of the two mentions' (the row's, ``old_*``, and the new one's, ``new_*``) decayed to that day,
-- plus ``boost``.
CREATE OR REPLACE FUNCTION agent_memory.reinforced(
    old_expires double precision, old_half_life double precision,
    new_expires double precision, new_half_life double precision,
    day double precision, boost double precision, threshold double precision
) RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN least(1.0, greatest(
    agent_memory.importance_on(old_expires, day, old_half_life, threshold),
    agent_memory.importance_on(new_expires, day, new_half_life, threshold)) + boost);

-- ... and its half-life, grown by ``growth`` once for each new mention (the new mention's own,
-- grown for each of the row's, when it gives a kind other than general to a fact of kind
-- general).
CREATE OR REPLACE FUNCTION agent_memory.grown(
    old_kind text, old_half_life double precision, old_mentions integer,
    new_kind text, new_half_life double precision, new_mentions integer,
    growth double precision, max_half_life double precision
) RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN least(max_half_life,
    CASE WHEN old_kind = 'general' AND new_kind <> 'general'
         THEN new_half_life * power(growth, old_mentions)
         ELSE old_half_life * power(growth, new_mentions) END);

-- Write a fact of a scope, or reinforce the one the scope has with the same content hash: a
-- fact mentioned again is not copied; its importance is raised by ``boost``, its decay clock
-- restarts at the newer mention, its half-life grows by ``growth`` (all evaluated on the row's
-- values before the update), and a fact of kind general takes the kind a later mention gives
-- it. A new fact's half-life is its kind's, grown once for each other conversation that said
-- it. ``p_shown``: an item of the Store shows a new fact from the start (the caller points one
-- at it in the same statement), which spares the row a second version. Its id, whether it was
-- new, and its content hash.
CREATE OR REPLACE FUNCTION agent_memory.upsert_fact(
    p_user text, p_agent text, p_workflow text, p_content text, p_hash bytea,
    p_importance double precision, p_at timestamptz, p_kind text, p_mentions integer,
    p_boost double precision, p_growth double precision, p_max_half_life double precision,
    p_job bigint, p_valid_from timestamptz, p_shown boolean DEFAULT false
) RETURNS TABLE (id bigint, inserted boolean, content_hash bytea)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    threshold double precision;
    half_life double precision;
BEGIN
    SELECT d.purge_below,
           least(p_max_half_life,
                 coalesce((d.half_lives->>p_kind)::float8, (d.half_lives->>'general')::float8)
                 * power(p_growth, p_mentions - 1))
    INTO threshold, half_life
    FROM agent_memory.decay_policy d;
    RETURN QUERY
    INSERT INTO agent_memory.memory_items AS m
        (user_id, agent_id, workflow_id, content, content_hash, importance, importance_at,
         kind, mentions, half_life, expires_day, source_job_id, valid_from, shown)
    VALUES (p_user, p_agent, p_workflow, p_content, p_hash, p_importance, p_at, p_kind,
            p_mentions, half_life,
            agent_memory.expiry(p_importance, agent_memory.day_index(p_at), half_life, threshold),
            p_job, p_valid_from, p_shown)
    ON CONFLICT ON CONSTRAINT memory_items_scope_content_key DO UPDATE SET
        -- the clock restarts at the latest mention; the importance there is the higher of the
        -- two mentions' (decayed to that day) plus the reinforcement boost
        importance_at = greatest(m.importance_at, EXCLUDED.importance_at),
        importance    = agent_memory.reinforced(
            m.expires_day, m.half_life, EXCLUDED.expires_day, EXCLUDED.half_life,
            agent_memory.day_index(greatest(m.importance_at, EXCLUDED.importance_at)),
            p_boost, threshold),
        kind          = CASE WHEN m.kind = 'general' THEN EXCLUDED.kind ELSE m.kind END,
        mentions      = m.mentions + EXCLUDED.mentions,
        half_life     = agent_memory.grown(
            m.kind, m.half_life, m.mentions, EXCLUDED.kind, EXCLUDED.half_life,
            EXCLUDED.mentions, p_growth, p_max_half_life),
        expires_day   = agent_memory.expiry(
            agent_memory.reinforced(
                m.expires_day, m.half_life, EXCLUDED.expires_day, EXCLUDED.half_life,
                agent_memory.day_index(greatest(m.importance_at, EXCLUDED.importance_at)),
                p_boost, threshold),
            agent_memory.day_index(greatest(m.importance_at, EXCLUDED.importance_at)),
            agent_memory.grown(
                m.kind, m.half_life, m.mentions, EXCLUDED.kind, EXCLUDED.half_life,
                EXCLUDED.mentions, p_growth, p_max_half_life),
            threshold),
        content       = EXCLUDED.content,
        source_job_id = EXCLUDED.source_job_id,
        updated_at    = now(),
        -- true since its earliest mention; said again after it was superseded, true again
        -- from then
        valid_from    = CASE WHEN m.superseded_at IS NULL
                             THEN least(m.valid_from, EXCLUDED.valid_from)
                             ELSE EXCLUDED.valid_from END,
        valid_to      = NULL,
        superseded_at = NULL,
        superseded_by = NULL,
        superseded_by_job = NULL
    RETURNING m.id, (m.xmax = 0), m.content_hash;
END
$$;

-- A fact no item of the Store shows any more is no longer true: kept, superseded (by ``by``,
-- when given), as history. Only a current fact of scope ``scope`` (a key of
-- agent_memory.scope_key) is retired: even a wrong id touches no other scope.
CREATE OR REPLACE FUNCTION agent_memory.store_retire(fact bigint, by bigint, scope text)
    RETURNS void LANGUAGE sql VOLATILE
AS $$
    UPDATE agent_memory.memory_items m
    SET superseded_at = now(), superseded_by = by, superseded_by_job = NULL,
        valid_to = greatest(m.valid_from, now())
    WHERE m.id = fact AND m.scope_key = scope COLLATE "C" AND m.superseded_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM agent_memory.store_items o WHERE o.fact_id = fact)
$$;

-- Fold the full-text counts of fact ``fact``'s scope into one row per word (sql/0017: every
-- write appends about ten rows, and every reader sums them) for the fact's words and the
-- scope's rows (lexeme ''), once the scope's rows' entry has spread over ``spread`` rows: about
-- every ``spread`` puts to a scope. The flows fold a scope whole after writing it; the Store's
-- puts, which no flow follows, fold this way, which keeps what a reader sums for a word near
-- ``spread`` rows (a word in a share p of the puts gathers about p * spread / p between two
-- folds that meet it) at the cost of one index probe a put. Probing each of the fact's words
-- instead would cost a probe per word, each visiting up to ``spread`` rows. A scope another
-- transaction is folding is left to it, as agent_memory.compact_term_counts does. Tenants hold
-- no DELETE right on the counts (it would allow LOCK TABLE, sql/0019), hence SECURITY
-- DEFINER; it folds the caller's own (a tenant's scope's) counts only, and folding keeps every
-- sum. How many rows it removed.
CREATE OR REPLACE FUNCTION agent_memory.fold_fact_terms(fact bigint, spread integer)
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
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
    -- the words as a value (= ANY): a join with them could read the scope's every count
    WITH spread_words AS (
        SELECT k.lexeme FROM agent_memory.term_counts k
        WHERE k.corpus = 'f' AND k.scope_key = scope AND k.lexeme = ANY (words)
        GROUP BY k.lexeme HAVING count(*) > 1
    ), gone AS (
        DELETE FROM agent_memory.term_counts k
        WHERE k.corpus = 'f' AND k.scope_key = scope
          AND k.lexeme = ANY (ARRAY(SELECT lexeme FROM spread_words))
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
    IF written THEN
        PERFORM agent_memory.fold_fact_terms(fact, 32);
    END IF;
    RETURN fact;
END
$$;
