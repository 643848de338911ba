-- agent-memory schema, version 35: Chinese and Japanese messages are cut into their sentences.
--
-- A snippet is a sentence of a message (sql/0010), cut where a full stop, a question or an
-- exclamation mark and a space come before a capital, a digit, a quote or a bracket. Chinese
-- and Japanese end a sentence with a full-width mark (。！？) and no space, and Korean, whose
-- script has no capitals, with a stop and a space before a syllable: so a message in any of
-- them was one snippet whatever its length, and inject added the whole of it, or nothing,
-- where an English message gives the one sentence that answers. Now a sentence also ends
-- after a full-width mark (with whatever closing quote or bracket follows it), and after a
-- stop and a space before a CJK character. A text in another script is cut as before.
--
-- The messages indexed before are cut again: the snippets of each episode that holds such a
-- message are deleted (their words uncounted and their vectors dropped with them, as a
-- deletion does) and the episode queued, so that the next drain indexes it anew, and the
-- embedding flow embeds its new sentences. Until then its messages are searched as a queued
-- episode's are (agent_memory.db.snippets). Every statement is safe to re-run.

CREATE OR REPLACE FUNCTION agent_memory.sentences(content text)
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN regexp_split_to_array(btrim(coalesce(content, '')),
    '(?<=[.!?\u2026])\s+(?=[[:upper:][:digit:]"''\u201c\u2018\u00bf\u00a1(\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af])'
    '|(?<=[\u3002\uff01\uff1f][\u300d\u300f\uff09\u201d\u2019"'')]?)\s*(?=[^\s\u3002\uff01\uff1f\u300d\u300f\uff09\u201d\u2019"'')])');

-- the episodes whose snippets the new rule cuts otherwise: those with a snippet that holds a
-- sentence end it did not cut at
WITH cut AS (
    SELECT DISTINCT s.episode_id, s.scope_key FROM agent_memory.snippets s
    WHERE s.content ~ '[\u3002\uff01\uff1f]|[.!?\u2026]\s+[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]'
      AND cardinality(agent_memory.sentences(s.content)) > 1
), gone AS (
    DELETE FROM agent_memory.snippets s USING cut c WHERE s.episode_id = c.episode_id
    RETURNING s.episode_id
)
INSERT INTO agent_memory.snippet_queue (scope_key, episode_id)
SELECT c.scope_key, c.episode_id FROM cut c
WHERE EXISTS (SELECT 1 FROM gone g WHERE g.episode_id = c.episode_id)
ON CONFLICT DO NOTHING;
