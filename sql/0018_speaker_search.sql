-- agent-memory schema, version 18: a past message is searchable by who said it, and knows its
-- role.
--
-- A message's speaker (its name when it has one, else its role) is part of what it says: its
-- "I" is that person. Indexed with the text, a question that names someone ("What did Calvin
-- buy?") matches what Calvin said, and a name becomes as common as its speaker's messages, so
-- a short message that only addresses someone ("Thanks, Calvin!") no longer outranks what they
-- said for holding the rarer word. Where speakers are only roles, "user" and "assistant" are in
-- every message and weigh nothing.
--
-- Its role (user, assistant, ...) is kept beside the speaker: once messages carry their
-- authors' names, the speaker no longer says which of them is the user, whose own words inject
-- prefers to another's restatement of them.
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

SELECT agent_memory.recount_terms('s');

-- A message's role: its role or LangChain type, mapped as message_speaker maps them.
CREATE OR REPLACE FUNCTION agent_memory.message_role(message jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE coalesce(message ->> 'role', message ->> 'type')
    WHEN 'human' THEN 'user' WHEN 'ai' THEN 'assistant' WHEN 'chat' THEN 'user'
    ELSE coalesce(message ->> 'role', message ->> 'type', 'unknown') END;

ALTER TABLE agent_memory.snippets ADD COLUMN IF NOT EXISTS role text;
UPDATE agent_memory.snippets s
SET role = agent_memory.message_role(e.messages -> s.position)
FROM agent_memory.episodes e
WHERE e.id = s.episode_id AND s.role IS NULL;

CREATE OR REPLACE FUNCTION agent_memory.index_episode() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_memory.snippets
        (episode_id, position, part, scope_key, speaker, role, occurred_at, content)
    SELECT NEW.id, m.position - 1, s.part - 1, NEW.scope_key,
           agent_memory.message_speaker(m.message), agent_memory.message_role(m.message),
           NEW.occurred_at, btrim(s.sentence)
    FROM jsonb_array_elements(NEW.messages) WITH ORDINALITY AS m(message, position)
    CROSS JOIN LATERAL unnest(agent_memory.sentences(agent_memory.message_text(m.message)))
        WITH ORDINALITY AS s(sentence, part)
    WHERE length(btrim(s.sentence)) > 0
    ON CONFLICT (episode_id, position, part) DO NOTHING;
    RETURN NULL;
END $$;
