-- agent-memory schema, version 13: dated facts. A fact records when it became true, as far as
-- memory knows (valid_from: the time of the earliest conversation that said it) and, once an
-- update or a contradiction supersedes it, when it stopped being true (valid_to: the time of
-- the conversation that said so). Both are the conversations' times, not the consolidation's,
-- so a backfill dates its facts by the history it imports. superseded_at stays the moment the
-- change was written.
ALTER TABLE agent_memory.memory_items
    ADD COLUMN IF NOT EXISTS valid_from timestamptz,
    ADD COLUMN IF NOT EXISTS valid_to   timestamptz;

-- facts from before: their earliest source's time (the moment they were stored when they have
-- none), and the moment they were superseded
UPDATE agent_memory.memory_items m
SET valid_from = coalesce(
        (SELECT min(e.occurred_at)
         FROM agent_memory.fact_sources s JOIN agent_memory.episodes e ON e.id = s.episode_id
         WHERE s.fact_id = m.id),
        m.created_at),
    valid_to = m.superseded_at
WHERE m.valid_from IS NULL;

ALTER TABLE agent_memory.memory_items
    ALTER COLUMN valid_from SET DEFAULT now(),
    ALTER COLUMN valid_from SET NOT NULL;
