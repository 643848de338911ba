-- Backfill: an imported conversation carries a natural key (the source's id, or a hash of its
-- content and time), so importing the same data again adds nothing.
ALTER TABLE agent_memory.episodes ADD COLUMN IF NOT EXISTS source_key text;

CREATE UNIQUE INDEX IF NOT EXISTS episodes_source_key_idx
    ON agent_memory.episodes (scope_key, source_key)
    WHERE source_key IS NOT NULL;

-- the backfill flow consolidates a date range across scopes
CREATE INDEX IF NOT EXISTS episodes_pending_time_idx
    ON agent_memory.episodes (occurred_at)
    WHERE consolidated = false;
