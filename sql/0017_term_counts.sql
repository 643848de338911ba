-- agent-memory schema, version 17: exact full-text statistics per scope.
--
-- BM25 weighs each word of a question by how rare it is in the scope (the number of rows that
-- hold it) and normalises a row's score by its length against the scope's average. Until now
-- both came from a sample of the scope's first 500 rows in expiry order, which a backfill, whose
-- facts share one expiry day, left to the heap's order. term_counts keeps them exactly.
--
-- It holds changes, appended by the statements that add or remove current facts and
-- conversation sentences: per scope and lexeme, how many rows holding it came or went (+n, -n),
-- and per scope (lexeme '') how many rows came or went and their total length in lexemes.
-- Appending never waits on another writer, so a turn's record and a consolidation's write cost
-- one more INSERT each and can neither block nor deadlock here. A reader sums what is there;
-- agent_memory.compact_term_counts folds a scope's changes into one row per lexeme (the flows
-- call it after writing a scope and daily for all).

CREATE TABLE IF NOT EXISTS agent_memory.term_counts (
    corpus    "char" NOT NULL CHECK (corpus IN ('f', 's')),  -- facts, snippets
    scope_key text COLLATE "C" NOT NULL,
    lexeme    text COLLATE "C" NOT NULL,  -- '': the rows themselves
    docs      integer NOT NULL,           -- change in the number of rows (holding the lexeme)
    size      bigint NOT NULL DEFAULT 0   -- lexeme '': change in the rows' total length
);
CREATE INDEX IF NOT EXISTS term_counts_key_idx
    ON agent_memory.term_counts (corpus, scope_key, lexeme);

-- The changes a statement made, from its transition table (``changed``: the rows an INSERT
-- added count +1 each, those a DELETE removed -1). A fact counts while it is current (not
-- superseded); every sentence of a message counts.
CREATE OR REPLACE FUNCTION agent_memory.count_fact_terms() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
    SELECT 'f', c.scope_key, lexeme, sign * count(*), 0 FROM changed c,
           unnest(tsvector_to_array(c.search)) AS lexeme
    WHERE c.superseded_at IS NULL GROUP BY c.scope_key, lexeme
    UNION ALL
    SELECT 'f', c.scope_key, '', sign * count(*), sign * sum(length(c.search)) FROM changed c
    WHERE c.superseded_at IS NULL GROUP BY c.scope_key;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION agent_memory.count_snippet_terms() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
    SELECT 's', c.scope_key, lexeme, sign * count(*), 0 FROM changed c,
           unnest(tsvector_to_array(c.search)) AS lexeme
    GROUP BY c.scope_key, lexeme
    UNION ALL
    SELECT 's', c.scope_key, '', sign * count(*), sign * sum(length(c.search)) FROM changed c
    GROUP BY c.scope_key;
    RETURN NULL;
END $$;

-- An update changes the counts only where it changes what counts: a row's words, its scope,
-- or (a fact) whether it is current. Row by row, behind a WHEN that PostgreSQL checks without
-- calling anything, since inject's reinforcement updates facts on every turn and must not pay.
CREATE OR REPLACE FUNCTION agent_memory.count_changed_fact_terms() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
    SELECT 'f', c.scope_key, r.lexeme, sum(c.sign), sum(r.size)
    FROM (SELECT OLD.scope_key, -1, OLD.search WHERE OLD.superseded_at IS NULL
          UNION ALL
          SELECT NEW.scope_key, 1, NEW.search WHERE NEW.superseded_at IS NULL)
         AS c(scope_key, sign, search)
    CROSS JOIN LATERAL (
        SELECT lexeme, 0::bigint AS size FROM unnest(tsvector_to_array(c.search)) AS lexeme
        UNION ALL
        SELECT '', c.sign * length(c.search)) AS r
    GROUP BY c.scope_key, r.lexeme
    HAVING sum(c.sign) <> 0 OR sum(r.size) <> 0;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION agent_memory.count_changed_snippet_terms() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
    SELECT 's', c.scope_key, r.lexeme, sum(c.sign), sum(r.size)
    FROM (SELECT OLD.scope_key, -1, OLD.search UNION ALL SELECT NEW.scope_key, 1, NEW.search)
         AS c(scope_key, sign, search)
    CROSS JOIN LATERAL (
        SELECT lexeme, 0::bigint AS size FROM unnest(tsvector_to_array(c.search)) AS lexeme
        UNION ALL
        SELECT '', c.sign * length(c.search)) AS r
    GROUP BY c.scope_key, r.lexeme
    HAVING sum(c.sign) <> 0 OR sum(r.size) <> 0;
    RETURN NULL;
END $$;

-- TRUNCATE leaves no row to count: the corpus's counts go with it
CREATE OR REPLACE FUNCTION agent_memory.clear_term_counts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM agent_memory.term_counts WHERE corpus = TG_ARGV[0]::"char";
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS memory_items_terms_added ON agent_memory.memory_items;
CREATE TRIGGER memory_items_terms_added AFTER INSERT ON agent_memory.memory_items
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION agent_memory.count_fact_terms();
DROP TRIGGER IF EXISTS memory_items_terms_removed ON agent_memory.memory_items;
CREATE TRIGGER memory_items_terms_removed AFTER DELETE ON agent_memory.memory_items
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION agent_memory.count_fact_terms();
DROP TRIGGER IF EXISTS memory_items_terms_changed ON agent_memory.memory_items;
CREATE TRIGGER memory_items_terms_changed AFTER UPDATE ON agent_memory.memory_items
    FOR EACH ROW WHEN (OLD.search IS DISTINCT FROM NEW.search
                       OR OLD.scope_key IS DISTINCT FROM NEW.scope_key
                       OR (OLD.superseded_at IS NULL) <> (NEW.superseded_at IS NULL))
    EXECUTE FUNCTION agent_memory.count_changed_fact_terms();
DROP TRIGGER IF EXISTS memory_items_terms_cleared ON agent_memory.memory_items;
CREATE TRIGGER memory_items_terms_cleared AFTER TRUNCATE ON agent_memory.memory_items
    FOR EACH STATEMENT EXECUTE FUNCTION agent_memory.clear_term_counts('f');

DROP TRIGGER IF EXISTS snippets_terms_added ON agent_memory.snippets;
CREATE TRIGGER snippets_terms_added AFTER INSERT ON agent_memory.snippets
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION agent_memory.count_snippet_terms();
DROP TRIGGER IF EXISTS snippets_terms_removed ON agent_memory.snippets;
CREATE TRIGGER snippets_terms_removed AFTER DELETE ON agent_memory.snippets
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION agent_memory.count_snippet_terms();
DROP TRIGGER IF EXISTS snippets_terms_changed ON agent_memory.snippets;
CREATE TRIGGER snippets_terms_changed AFTER UPDATE ON agent_memory.snippets
    FOR EACH ROW WHEN (OLD.search IS DISTINCT FROM NEW.search
                       OR OLD.scope_key IS DISTINCT FROM NEW.scope_key)
    EXECUTE FUNCTION agent_memory.count_changed_snippet_terms();
DROP TRIGGER IF EXISTS snippets_terms_cleared ON agent_memory.snippets;
CREATE TRIGGER snippets_terms_cleared AFTER TRUNCATE ON agent_memory.snippets
    FOR EACH STATEMENT EXECUTE FUNCTION agent_memory.clear_term_counts('s');

-- Fold a scope's changes into one row per corpus and lexeme (none where they cancel out),
-- rewriting only the lexemes that have more than one; how many rows it removed. Concurrent writers keep appending meanwhile: what they add is not in
-- this statement's snapshot, so it is neither folded nor lost. One folder per scope at a time.
CREATE OR REPLACE FUNCTION agent_memory.compact_term_counts(key text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    removed integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('agent_memory.term_counts'), hashtext(key)) THEN
        RETURN 0;  -- another transaction is folding this scope now
    END IF;
    WITH spread AS (
        SELECT corpus, lexeme FROM agent_memory.term_counts
        WHERE corpus IN ('f', 's') AND scope_key = key
        GROUP BY corpus, lexeme HAVING count(*) > 1 OR sum(docs) = 0
    ), gone AS (
        DELETE FROM agent_memory.term_counts t USING spread
        WHERE t.corpus = spread.corpus AND t.scope_key = key AND t.lexeme = spread.lexeme
        RETURNING t.corpus, t.lexeme, t.docs, t.size
    ), folded AS (
        INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
        SELECT corpus, key, lexeme, sum(docs), sum(size) FROM gone
        GROUP BY corpus, lexeme HAVING sum(docs) <> 0 OR sum(size) <> 0
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone) - (SELECT count(*) FROM folded) INTO removed;
    RETURN removed;
END $$;

-- Count a corpus anew from what its table holds (this migration, and a later one that changes
-- what a row's words are). Writers are kept out by the caller: a migration's DDL on the table
-- holds its lock until it commits.
CREATE OR REPLACE FUNCTION agent_memory.recount_terms(which "char") RETURNS void
LANGUAGE sql AS $$
DELETE FROM agent_memory.term_counts WHERE corpus = which;
INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
SELECT which, r.scope_key, lexeme, count(*), 0
FROM (SELECT m.scope_key, m.search FROM agent_memory.memory_items m
      WHERE which = 'f' AND m.superseded_at IS NULL
      UNION ALL
      SELECT s.scope_key, s.search FROM agent_memory.snippets s WHERE which = 's') AS r,
     unnest(tsvector_to_array(r.search)) AS lexeme
GROUP BY r.scope_key, lexeme
UNION ALL
SELECT which, r.scope_key, '', count(*), sum(length(r.search))
FROM (SELECT m.scope_key, m.search FROM agent_memory.memory_items m
      WHERE which = 'f' AND m.superseded_at IS NULL
      UNION ALL
      SELECT s.scope_key, s.search FROM agent_memory.snippets s WHERE which = 's') AS r
GROUP BY r.scope_key;
$$;

-- The counts of what the tables hold now (a rerun of this file starts them again; its triggers
-- were made first, and their locks keep writers out until it commits).
SELECT agent_memory.recount_terms('f');
SELECT agent_memory.recount_terms('s');

-- a tenant reads its own scope's counts, and its writes append to them through the triggers
SELECT agent_memory.protect('agent_memory.term_counts', 'SELECT, INSERT');
