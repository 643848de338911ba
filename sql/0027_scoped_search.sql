-- agent-memory schema, version 27: a scope's conversation sentences found by their rare words
-- without reading the scope's every sentence (issue 40).
--
-- The words index of the snippets (snippets_search_idx) holds every scope's rows, so a search
-- for a scope's sentences holding a rare word read the scope's rows in time order and tested
-- each (a generic plan cannot know how many a scope has). This index holds each snippet's words
-- with one more, its scope's own (agent_memory.scope_word), so "these words AND this scope" is
-- answered from the index's entries: the scope's word narrows, the rare words drive.
-- Every statement is safe to re-run.

-- The scope's own word, as a tsquery of that one word: '~' and the hash of its key, whatever
-- characters the key holds. A text could yield the same lexeme; a search still matches the
-- scope's key itself, so the word only narrows what is read, never what is found.
CREATE OR REPLACE FUNCTION agent_memory.scope_word(scope_key text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT quote_literal('~' || md5(scope_key))::tsquery
$$;

-- A row's words with its scope's word beside them.
CREATE OR REPLACE FUNCTION agent_memory.scoped_search(scope_key text, search tsvector)
RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT search || array_to_tsvector(ARRAY['~' || md5(scope_key)])
$$;

CREATE INDEX IF NOT EXISTS snippets_scoped_search_idx
    ON agent_memory.snippets USING gin (agent_memory.scoped_search(scope_key, search));
