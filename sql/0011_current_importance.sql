-- agent-memory schema, version 11: one definition of a fact's current importance.
--
-- A fact stores decay_rank = ln(importance) + day * lam (lam = -ln(factor) of the decay
-- policy), so its importance on a day is exp(decay_rank - day * lam), capped at 1 (a day
-- before the fact's clock would give more) and floored so that exp never underflows. Every
-- query that reports or ranks by importance calls this, with the policy's lam, so they cannot
-- drift apart. IMMUTABLE and a plain expression: the planner inlines it.
CREATE OR REPLACE FUNCTION agent_memory.importance_on(
    decay_rank double precision, day double precision, lam double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN least(1.0, exp(greatest(decay_rank - day * lam, -700)));
