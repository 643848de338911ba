-- agent-memory schema, version 9: the episodic tier searchable by relevance.
--
-- Every message of every episode is a snippet: its speaker, its time and its text, with a
-- full-text vector (and, once the flows have embedded it, a vector by meaning in
-- snippet_embeddings). Inject adds the snippets most relevant to the question, so memory works
-- before consolidation has run and beyond what the extractor kept.
--
-- A trigger makes the snippets of an episode as it is inserted, so every way in (record,
-- record_many, the backfill imports) indexes what it stores, in the same statement: recording
-- stays one INSERT. Messages with no text (tool calls, images only) make no snippet.

-- The plain text of a stored message: its content, or the text parts of multimodal content.
CREATE OR REPLACE FUNCTION agent_memory.message_text(message jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE jsonb_typeof(message -> 'content')
    WHEN 'string' THEN message ->> 'content'
    WHEN 'array' THEN (
        SELECT string_agg(block ->> 'text', ' ')
        FROM jsonb_array_elements(message -> 'content') AS block
        WHERE jsonb_typeof(block) = 'object' AND block ->> 'text' IS NOT NULL)
    END;

-- Who said it: the message's name when it has one, else its role (LangChain types mapped).
CREATE OR REPLACE FUNCTION agent_memory.message_speaker(message jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN coalesce(
    nullif(message ->> 'name', ''),
    CASE coalesce(message ->> 'role', message ->> 'type')
        WHEN 'human' THEN 'user' WHEN 'ai' THEN 'assistant' WHEN 'chat' THEN 'user'
        ELSE coalesce(message ->> 'role', message ->> 'type', 'unknown') END);

CREATE TABLE IF NOT EXISTS agent_memory.snippets (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    episode_id  bigint NOT NULL REFERENCES agent_memory.episodes (id) ON DELETE CASCADE,
    position    integer NOT NULL,  -- the message's index in the episode
    scope_key   text COLLATE "C" NOT NULL,
    speaker     text NOT NULL,
    occurred_at timestamptz NOT NULL,
    content     text NOT NULL,
    search      tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED,
    UNIQUE (episode_id, position)
);
-- a scope's snippets in time order (ranges, recency), and its full-text matches
CREATE INDEX IF NOT EXISTS snippets_scope_time_idx
    ON agent_memory.snippets (scope_key, occurred_at DESC);
CREATE INDEX IF NOT EXISTS snippets_search_idx ON agent_memory.snippets USING gin (search);

CREATE OR REPLACE FUNCTION agent_memory.index_episode() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_memory.snippets (episode_id, position, scope_key, speaker, occurred_at, content)
    SELECT NEW.id, m.position - 1, NEW.scope_key, agent_memory.message_speaker(m.message),
           NEW.occurred_at, agent_memory.message_text(m.message)
    FROM jsonb_array_elements(NEW.messages) WITH ORDINALITY AS m(message, position)
    WHERE length(btrim(coalesce(agent_memory.message_text(m.message), ''))) > 0
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS episodes_index ON agent_memory.episodes;
CREATE TRIGGER episodes_index AFTER INSERT ON agent_memory.episodes
    FOR EACH ROW EXECUTE FUNCTION agent_memory.index_episode();

-- the episodes stored before this version
INSERT INTO agent_memory.snippets (episode_id, position, scope_key, speaker, occurred_at, content)
SELECT e.id, m.position - 1, e.scope_key, agent_memory.message_speaker(m.message), e.occurred_at,
       agent_memory.message_text(m.message)
FROM agent_memory.episodes e,
     jsonb_array_elements(e.messages) WITH ORDINALITY AS m(message, position)
WHERE length(btrim(coalesce(agent_memory.message_text(m.message), ''))) > 0
ON CONFLICT DO NOTHING;
