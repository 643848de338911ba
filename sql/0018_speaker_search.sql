-- agent-memory schema, version 18: a past message is searchable by who said it.
--
-- A message's speaker (its name when it has one, else its role) is part of what it says: its
-- "I" is that person. Indexed with the text, a question that names someone ("What did Calvin
-- buy?") matches what Calvin said, and a name becomes as common as its speaker's messages, so
-- a short message that only addresses someone ("Thanks, Calvin!") no longer outranks what they
-- said for holding the rarer word. Where speakers are only roles, "user" and "assistant" are in
-- every message and weigh nothing.
--
-- PostgreSQL 16 cannot change a generated column's expression: the column is made anew (its
-- trigger and index with it), and the full-text statistics of the messages counted again.

DROP TRIGGER IF EXISTS snippets_terms_changed ON agent_memory.snippets;
ALTER TABLE agent_memory.snippets DROP COLUMN IF EXISTS search;
ALTER TABLE agent_memory.snippets ADD COLUMN search tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, speaker || ': ' || content)) STORED;
CREATE INDEX IF NOT EXISTS snippets_search_idx ON agent_memory.snippets USING gin (search);
CREATE TRIGGER snippets_terms_changed AFTER UPDATE ON agent_memory.snippets
    FOR EACH ROW WHEN (OLD.search IS DISTINCT FROM NEW.search
                       OR OLD.scope_key IS DISTINCT FROM NEW.scope_key)
    EXECUTE FUNCTION agent_memory.count_changed_snippet_terms();

DELETE FROM agent_memory.term_counts WHERE corpus = 's';
INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs, size)
SELECT 's', s.scope_key, lexeme, count(*), 0
FROM agent_memory.snippets s, unnest(tsvector_to_array(s.search)) AS lexeme
GROUP BY s.scope_key, lexeme
UNION ALL
SELECT 's', s.scope_key, '', count(*), sum(length(s.search))
FROM agent_memory.snippets s GROUP BY s.scope_key;
