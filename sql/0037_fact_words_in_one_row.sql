-- agent-memory schema, version 37: a new fact's words are counted in one row.
--
-- The full-text counts (sql/0017) were appended, for each new fact, as a row per lexeme and a
-- row for the fact itself (lexeme ''): about ten rows and ten index entries a fact, half of
-- the records a Store put wrote to the WAL, and as many rows for a fold to delete later
-- (docs/benchmarks.md, store). Now the fact's own row (lexeme '') carries the fact's lexemes
-- in ``words``: one row and one index entry a fact. It counts what the rows per lexeme
-- counted: each lexeme in ``words`` is held by ``docs`` more rows (one: only a new fact's row
-- has words).
--
-- A reader (agent_memory.db.fulltext) reads the scope's '' rows already, for the corpus's
-- size; it joins their lists (agent_memory.cat_words) and adds to each word's count how many
-- lists hold it. A fold (agent_memory.fold_fact_terms, as a Store put calls it, and
-- agent_memory.compact_term_counts, as the flows call it) writes the words of the '' rows it
-- folds into their words' rows and leaves one '' row with no list: a scope folded holds what
-- it held before. A delete or an update appends its changes per lexeme, as before; the count
-- of a word is the sum over both forms. agent_memory.term_rows reads the counts as rows of
-- one lexeme each, both forms alike.
--
-- Each fold now returns how many rows it folded (read and written again as one row per word),
-- rather than how many fewer rows there are after it: writing a list's words out as rows of
-- their own can leave more rows than it read.
--
-- Every statement is safe to re-run.

ALTER TABLE agent_memory.term_counts ADD COLUMN IF NOT EXISTS words text[];

-- The lists of words of many rows, one after another (NULL for none).
CREATE OR REPLACE AGGREGATE agent_memory.cat_words(text[]) (
    SFUNC = array_cat, STYPE = text[], PARALLEL = SAFE
);

-- The counts as rows of one lexeme each: a row as it is, and each word of a list as a row of
-- its own, held by the list's row's ``docs``. What a sum per lexeme reads (tests, an
-- operator's look); a reader of one scope reads the table itself (agent_memory.db.fulltext).
CREATE OR REPLACE VIEW agent_memory.term_rows AS
SELECT k.corpus, k.scope_key, k.lexeme, k.docs, k.size FROM agent_memory.term_counts k
UNION ALL
SELECT k.corpus, k.scope_key, w.lexeme, k.docs, 0::bigint
FROM agent_memory.term_counts k, unnest(k.words) AS w(lexeme);

CREATE OR REPLACE FUNCTION agent_memory.count_new_fact_terms() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size, words)
    VALUES ('f', NEW.scope_key, '', 1, length(NEW.search), tsvector_to_array(NEW.search));
    RETURN NULL;
END $$;

-- Fold the full-text counts of fact ``fact``'s scope once it has ``spread`` rows of facts
-- (lexeme ''), as a Store put asks (sql/0030): those rows into one, and the words their lists
-- hold into one row each, with the rows those words had. A role confined to a scope (a tenant)
-- holds no DELETE right on the counts (sql/0019), hence SECURITY DEFINER: it folds the
-- caller's own scope only, and folding keeps every sum. Another transaction folding the scope
-- is left to it; rows appended meanwhile are not in this statement's snapshot, so they are
-- neither folded nor lost. Each word's rows are read through the whole (corpus, scope_key,
-- lexeme) key, kept apart with OFFSET 0 (sql/0030 says why). How many rows it folded.
CREATE OR REPLACE FUNCTION agent_memory.fold_fact_terms(fact bigint, spread integer)
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
    SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    scope text;
    folded integer;
BEGIN
    SELECT m.scope_key INTO scope FROM agent_memory.memory_items m WHERE m.id = fact;
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
    WITH blank AS (
        SELECT k.ctid AS address, k.words FROM agent_memory.term_counts k
        WHERE k.corpus = 'f' AND k.scope_key = scope AND k.lexeme = ''
    ), listed AS (
        SELECT DISTINCT w.lexeme FROM blank b, unnest(b.words) AS w(lexeme)
    ), found AS (
        SELECT k.ctid AS address FROM listed l
        CROSS JOIN LATERAL (
            SELECT c.ctid FROM agent_memory.term_counts c
            WHERE c.corpus = 'f' AND c.scope_key = scope AND c.lexeme = l.lexeme
            OFFSET 0) AS k
    ), gone AS (
        DELETE FROM agent_memory.term_counts k
        WHERE k.ctid = ANY (ARRAY(SELECT b.address FROM blank b
                                  UNION ALL SELECT f.address FROM found f))
        RETURNING k.lexeme, k.docs, k.size, k.words
    ), written AS (
        INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
        SELECT 'f', scope, c.lexeme, sum(c.docs), sum(c.size)
        FROM (SELECT g.lexeme, g.docs, g.size FROM gone g
              UNION ALL
              SELECT w.lexeme, g.docs, 0 FROM gone g, unnest(g.words) AS w(lexeme)) AS c
        GROUP BY c.lexeme HAVING sum(c.docs) <> 0 OR sum(c.size) <> 0
    )  -- (a data-modifying CTE runs to its end whether or not it is read)
    SELECT count(*) FROM gone INTO folded;
    RETURN folded;
END
$$;

-- Fold a scope's counts into one row per corpus and lexeme (none where they cancel out): the
-- lexemes with more than one row, or in a list, and the lists' rows themselves; how many rows
-- it folded. Concurrent writers keep appending meanwhile: what they add is not in this
-- statement's snapshot, so it is neither folded nor lost. One folder per scope at a time.
CREATE OR REPLACE FUNCTION agent_memory.compact_term_counts(key text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    folded integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('agent_memory.term_counts'), hashtext(key)) THEN
        RETURN 0;  -- another transaction is folding this scope now
    END IF;
    WITH spread AS (
        SELECT k.corpus, k.lexeme FROM agent_memory.term_counts k
        WHERE k.corpus IN ('f', 's') AND k.scope_key = key
        GROUP BY k.corpus, k.lexeme
        HAVING count(*) > 1 OR sum(k.docs) = 0 OR count(k.words) > 0
        UNION
        SELECT k.corpus, w.lexeme FROM agent_memory.term_counts k, unnest(k.words) AS w(lexeme)
        WHERE k.corpus IN ('f', 's') AND k.scope_key = key AND k.lexeme = ''
    ), gone AS (
        DELETE FROM agent_memory.term_counts t USING spread
        WHERE t.corpus = spread.corpus AND t.scope_key = key AND t.lexeme = spread.lexeme
        RETURNING t.corpus, t.lexeme, t.docs, t.size, t.words
    ), written AS (
        INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
        SELECT c.corpus, key, c.lexeme, sum(c.docs), sum(c.size)
        FROM (SELECT g.corpus, g.lexeme, g.docs, g.size FROM gone g
              UNION ALL
              SELECT g.corpus, w.lexeme, g.docs, 0 FROM gone g, unnest(g.words) AS w(lexeme))
             AS c
        GROUP BY c.corpus, c.lexeme HAVING sum(c.docs) <> 0 OR sum(c.size) <> 0
    )
    SELECT count(*) FROM gone INTO folded;
    RETURN folded;
END $$;
