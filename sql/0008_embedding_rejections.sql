-- agent-memory schema, version 8: facts an embedding model refused.
--
-- A fact whose text the model refuses (longer than its context, against its content policy, no
-- usable vector) is recorded here with the model's reason, so embedding runs go on past it
-- instead of asking again forever and holding back every fact after it. The fact stays in
-- memory without an embedding from that model; a change of model tries it again, and so does
-- `agent-memory embed --retry-rejected`. One row per fact: the model it was last tried with.
--
-- A migration, not created with fact_embeddings on first use: it needs no pgvector, and the
-- role that migrates may create tables where the application's role may not. No foreign key:
-- its cascade would cost the daily purge a trigger per purged fact, for a table that is nearly
-- always empty; the rows of purged facts are pruned whenever refusals are recorded (fact ids
-- are never reused, so such a row matches nothing meanwhile).
CREATE TABLE IF NOT EXISTS agent_memory.fact_embedding_rejections (
    fact_id     bigint PRIMARY KEY,
    model       text NOT NULL,
    reason      text NOT NULL,
    rejected_at timestamptz NOT NULL DEFAULT now()
);
