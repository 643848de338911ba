-- agent-memory schema, version 12: durable facts. Each fact has a kind and its own half-life.
--
-- A fact fades as importance(D) = purge_below * 2 ^ ((expires_day - D) / half_life): it halves
-- every half_life days and crosses the purge threshold on expires_day. Both columns are fixed
-- until the fact is written again, so decay still never rewrites a row: the purge is the range
-- "expires_day < today" on an index, and touches only what expired. half_life starts at the
-- kind's (decay_policy.half_lives) and grows with each conversation that says the fact again.
--
-- Importance-only ranking reads facts by expires_day, latest first: among facts of one
-- half-life that is the order of current importance; across kinds a lasting fact comes before a
-- fading one of the same importance today.
--
-- The stored ranks are relative to the policy's purge_below and half-lives; a change of either
-- in the settings is applied once by the decay flow (agent_memory.db.facts.sync_policy).
ALTER TABLE agent_memory.decay_policy
    ADD COLUMN IF NOT EXISTS purge_below double precision NOT NULL DEFAULT 0.05
        CHECK (purge_below > 0 AND purge_below < 1),
    ADD COLUMN IF NOT EXISTS half_lives jsonb NOT NULL DEFAULT '{}'::jsonb;
-- facts written before this version faded at the stored daily factor: they are of kind general
UPDATE agent_memory.decay_policy
SET half_lives = jsonb_build_object('general', ln(2) / -ln(factor)) || half_lives;

ALTER TABLE agent_memory.memory_items
    ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'general'
        CHECK (kind IN ('identity', 'preference', 'situation', 'event', 'plan', 'general')),
    ADD COLUMN IF NOT EXISTS mentions integer NOT NULL DEFAULT 1 CHECK (mentions >= 1),
    ADD COLUMN IF NOT EXISTS half_life double precision CHECK (half_life > 0),
    ADD COLUMN IF NOT EXISTS expires_day double precision;

-- decay_rank = ln(importance) + day * lam, so importance(D) = exp(decay_rank - D * lam):
-- the same curve with half_life = ln 2 / lam and expires_day = (decay_rank - ln(purge_below)) / lam
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = 'agent_memory' AND table_name = 'memory_items'
                 AND column_name = 'decay_rank') THEN
        UPDATE agent_memory.memory_items m
        SET half_life = ln(2) / p.lam,
            expires_day = (m.decay_rank - ln(p.purge_below)) / p.lam
        FROM (SELECT -ln(factor) AS lam, purge_below FROM agent_memory.decay_policy) AS p;
        -- its indexes (versions 1, 3, 7) go with it
        ALTER TABLE agent_memory.memory_items DROP COLUMN decay_rank;
    END IF;
END
$$;

ALTER TABLE agent_memory.memory_items
    ALTER COLUMN half_life SET NOT NULL,
    ALTER COLUMN expires_day SET NOT NULL;

-- inject's importance order and the analytics' per-scope reads (index-only: half_life included)
CREATE INDEX IF NOT EXISTS memory_items_current_rank_idx
    ON agent_memory.memory_items (scope_key, expires_day DESC) INCLUDE (half_life)
    WHERE superseded_at IS NULL;
CREATE INDEX IF NOT EXISTS memory_items_superseded_rank_idx
    ON agent_memory.memory_items (scope_key, expires_day DESC) INCLUDE (half_life)
    WHERE superseded_at IS NOT NULL;
-- the purge: a range scan from the bottom
CREATE INDEX IF NOT EXISTS memory_items_rank_idx
    ON agent_memory.memory_items (expires_day);

-- A fact's importance on a day: the one definition, used by every query (it replaces the
-- version-11 function of the daily factor). Capped at 1 (a day before the fact's clock would
-- give more) and floored so that exp never underflows; IMMUTABLE, a plain expression: inlined.
DROP FUNCTION IF EXISTS agent_memory.importance_on(double precision, double precision,
                                                   double precision);
CREATE OR REPLACE FUNCTION agent_memory.importance_on(
    expires_day double precision, day double precision, half_life double precision,
    purge_below double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN least(1.0, exp(greatest(ln(purge_below) + (expires_day - day) * ln(2) / half_life, -700)));

-- The day a fact of this importance and half-life, with its clock on day, crosses purge_below.
CREATE OR REPLACE FUNCTION agent_memory.expiry(
    importance double precision, day double precision, half_life double precision,
    purge_below double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN day + half_life * (ln(importance) - ln(purge_below)) / ln(2);
