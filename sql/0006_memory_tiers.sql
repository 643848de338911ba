-- agent-memory schema, version 6: the semantic and episodic tiers.

-- Semantic: relevance of a fact to what the user is asking, by full-text search (no model
-- needed). 'english' stems words ("prefers" matches "preference"); a generated column keeps the
-- vector in step with the content. The GIN index finds the matches of a large scope; a small
-- scope is read through its rank index and scored in place.
ALTER TABLE agent_memory.memory_items
    ADD COLUMN IF NOT EXISTS search tsvector
        GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED;
CREATE INDEX IF NOT EXISTS memory_items_search_idx
    ON agent_memory.memory_items USING gin (search)
    WHERE superseded_at IS NULL;

-- Episodic: a one-sentence summary of each consolidated episode, for "recent conversation
-- history" and for looking back at a date range.
ALTER TABLE agent_memory.episodes
    ADD COLUMN IF NOT EXISTS summary text;
