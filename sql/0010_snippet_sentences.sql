-- agent-memory schema, version 10: a snippet is a sentence of a message.
--
-- A message often says several things ("Traffic was terrible. I planted basil in the
-- backyard. The neighbours are renovating."). Indexed whole, the one sentence a question is
-- about is diluted by the others, by full text (BM25 normalises by length) and by meaning (a
-- vector of the whole), and a one-sentence restatement of it ranks above it. So each sentence
-- is a snippet of its own, still attributed to its message (episode, position) and numbered
-- within it (part), and inject adds the sentence that answers rather than the whole message.
-- Text with no sentence break (a short reply, a pasted block) stays one snippet.

-- The sentences of a text, in order: split where . ! ? or an ellipsis and white space come
-- before a capital, a digit, a quote or a bracket (so "e.g. the" and "2.5" stay whole).
CREATE OR REPLACE FUNCTION agent_memory.sentences(content text)
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN regexp_split_to_array(btrim(coalesce(content, '')),
                             '(?<=[.!?\u2026])\s+(?=[[:upper:][:digit:]"''\u201c\u2018\u00bf\u00a1(])');

ALTER TABLE agent_memory.snippets ADD COLUMN IF NOT EXISTS part integer NOT NULL DEFAULT 0;
ALTER TABLE agent_memory.snippets DROP CONSTRAINT IF EXISTS snippets_episode_id_position_key;
CREATE UNIQUE INDEX IF NOT EXISTS snippets_episode_position_part_key
    ON agent_memory.snippets (episode_id, position, part);

CREATE OR REPLACE FUNCTION agent_memory.index_episode() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_memory.snippets
        (episode_id, position, part, scope_key, speaker, occurred_at, content)
    SELECT NEW.id, m.position - 1, s.part - 1, NEW.scope_key,
           agent_memory.message_speaker(m.message), NEW.occurred_at, btrim(s.sentence)
    FROM jsonb_array_elements(NEW.messages) WITH ORDINALITY AS m(message, position)
    CROSS JOIN LATERAL unnest(agent_memory.sentences(agent_memory.message_text(m.message)))
        WITH ORDINALITY AS s(sentence, part)
    WHERE length(btrim(s.sentence)) > 0
    ON CONFLICT (episode_id, position, part) DO NOTHING;
    RETURN NULL;
END $$;

-- The messages indexed whole by version 9 that hold more than one sentence: their sentences
-- replace them (their vectors go with them; the flows' embedding step embeds the sentences).
CREATE TEMPORARY TABLE split_snippets ON COMMIT DROP AS
SELECT episode_id, position, scope_key, speaker, occurred_at, content
FROM agent_memory.snippets
WHERE cardinality(agent_memory.sentences(content)) > 1;

DELETE FROM agent_memory.snippets s
USING split_snippets x
WHERE s.episode_id = x.episode_id AND s.position = x.position;

INSERT INTO agent_memory.snippets
    (episode_id, position, part, scope_key, speaker, occurred_at, content)
SELECT x.episode_id, x.position, p.part - 1, x.scope_key, x.speaker, x.occurred_at,
       btrim(p.sentence)
FROM split_snippets x
CROSS JOIN LATERAL unnest(agent_memory.sentences(x.content)) WITH ORDINALITY AS p(sentence, part)
WHERE length(btrim(p.sentence)) > 0
ON CONFLICT (episode_id, position, part) DO NOTHING;
