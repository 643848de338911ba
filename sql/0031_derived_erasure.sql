-- agent-memory schema, version 31: what was learned goes with what it was learned from
-- (issue 51; docs/guarantees.md, "What an erasure removes").
--
-- An erasure removes, at any level, the facts whose every source is an erased conversation
-- (agent_memory.db.erasure). A fact written by hand (`facts add`, the tools, MCP, a Store put,
-- a correction) has no conversation behind it: it is its own source, and no erasure of other
-- conversations may take it, even once a conversation has said it again and become a source
-- too. Which facts were written so is recorded here: ``direct``, set when a fact is written
-- with no consolidation job (agent_memory.upsert_fact's ``p_job`` is NULL) and kept once set.
--
-- Facts written before this version: those whose latest writer was no job are marked. A fact
-- written by hand and said again in a conversation since names that conversation's job as its
-- writer and is not marked; an erasure of that conversation removes it (the dry run lists it).
-- Every statement is safe to re-run.
ALTER TABLE agent_memory.memory_items ADD COLUMN IF NOT EXISTS direct boolean NOT NULL DEFAULT false;

UPDATE agent_memory.memory_items SET direct = true
WHERE source_job_id IS NULL AND NOT direct;

-- agent_memory.upsert_fact (sql/0022), recording ``direct``; the rest as it was
CREATE OR REPLACE FUNCTION agent_memory.upsert_fact(
    p_user text, p_agent text, p_workflow text, p_content text, p_hash bytea,
    p_importance double precision, p_at timestamptz, p_kind text, p_mentions integer,
    p_boost double precision, p_growth double precision, p_max_half_life double precision,
    p_job bigint, p_valid_from timestamptz, p_shown boolean DEFAULT false
) RETURNS TABLE (id bigint, inserted boolean, content_hash bytea)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    threshold double precision;
    half_life double precision;
BEGIN
    SELECT d.purge_below,
           least(p_max_half_life,
                 coalesce((d.half_lives->>p_kind)::float8, (d.half_lives->>'general')::float8)
                 * power(p_growth, p_mentions - 1))
    INTO threshold, half_life
    FROM agent_memory.decay_policy d;
    RETURN QUERY
    INSERT INTO agent_memory.memory_items AS m
        (user_id, agent_id, workflow_id, content, content_hash, importance, importance_at,
         kind, mentions, half_life, expires_day, source_job_id, valid_from, shown, direct)
    VALUES (p_user, p_agent, p_workflow, p_content, p_hash, p_importance, p_at, p_kind,
            p_mentions, half_life,
            agent_memory.expiry(p_importance, agent_memory.day_index(p_at), half_life, threshold),
            p_job, p_valid_from, p_shown, p_job IS NULL)
    ON CONFLICT ON CONSTRAINT memory_items_scope_content_key DO UPDATE SET
        -- the clock restarts at the latest mention; the importance there is the higher of the
        -- two mentions' (decayed to that day) plus the reinforcement boost
        importance_at = greatest(m.importance_at, EXCLUDED.importance_at),
        importance    = agent_memory.reinforced(
            m.expires_day, m.half_life, EXCLUDED.expires_day, EXCLUDED.half_life,
            agent_memory.day_index(greatest(m.importance_at, EXCLUDED.importance_at)),
            p_boost, threshold),
        kind          = CASE WHEN m.kind = 'general' THEN EXCLUDED.kind ELSE m.kind END,
        mentions      = m.mentions + EXCLUDED.mentions,
        half_life     = agent_memory.grown(
            m.kind, m.half_life, m.mentions, EXCLUDED.kind, EXCLUDED.half_life,
            EXCLUDED.mentions, p_growth, p_max_half_life),
        expires_day   = agent_memory.expiry(
            agent_memory.reinforced(
                m.expires_day, m.half_life, EXCLUDED.expires_day, EXCLUDED.half_life,
                agent_memory.day_index(greatest(m.importance_at, EXCLUDED.importance_at)),
                p_boost, threshold),
            agent_memory.day_index(greatest(m.importance_at, EXCLUDED.importance_at)),
            agent_memory.grown(
                m.kind, m.half_life, m.mentions, EXCLUDED.kind, EXCLUDED.half_life,
                EXCLUDED.mentions, p_growth, p_max_half_life),
            threshold),
        content       = EXCLUDED.content,
        source_job_id = EXCLUDED.source_job_id,
        -- written by hand once: by hand for good (its own source, whatever conversations add)
        direct        = m.direct OR EXCLUDED.direct,
        updated_at    = now(),
        -- true since its earliest mention; said again after it was superseded, true again
        -- from then
        valid_from    = CASE WHEN m.superseded_at IS NULL
                             THEN least(m.valid_from, EXCLUDED.valid_from)
                             ELSE EXCLUDED.valid_from END,
        valid_to      = NULL,
        superseded_at = NULL,
        superseded_by = NULL,
        superseded_by_job = NULL
    RETURNING m.id, (m.xmax = 0), m.content_hash;
END
$$;

-- what an erasure reads to find the history of the facts it removes (agent_memory.db.derived):
-- the facts each fact superseded, and those each job invalidated
CREATE INDEX IF NOT EXISTS memory_items_superseded_by_idx
    ON agent_memory.memory_items (superseded_by) WHERE superseded_by IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_items_invalidated_by_job_idx
    ON agent_memory.memory_items (superseded_by_job)
    WHERE superseded_by IS NULL AND superseded_by_job IS NOT NULL;

-- a tenant's writes reinforce facts through upsert_fact, which now sets ``direct``: its UPDATE
-- right, as schema 19 grants each column's (agent_memory.grant_tenant_updates)
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN
        GRANT UPDATE (direct) ON agent_memory.memory_items TO agent_memory_tenant;
    END IF;
END
$$;
