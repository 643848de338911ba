-- agent-memory schema, version 26: a turn's record is one cheap INSERT again (issue 40).
--
-- Since version 9 a trigger split every recorded message into sentences and inserted them as
-- snippets, each with its full-text vector, its GIN entries and (version 17) its words'
-- counts, in the agent's own INSERT: most of what a record cost. Now the INSERT only queues
-- the episode (one small row in snippet_queue), and agent_memory.index_pending makes its
-- snippets later, off the agent's path: many episodes per statement, exactly the rows the
-- trigger made. The consolidation flow drains the queue before it loads episodes, the manager
-- a moment after it records (MemoryManager.index_pending), and `agent-memory index` on demand.
-- Until then the conversation search reads a waiting episode's sentences from its messages
-- (agent_memory.db.snippets). The episodes indexed before this version keep their snippets.
-- Every statement is safe to re-run.

-- The episodes whose sentences are not indexed yet. No foreign key: checking one would lock
-- the episode's row on every record; a row whose episode is gone is dropped by the next drain.
CREATE TABLE IF NOT EXISTS agent_memory.snippet_queue (
    scope_key  text COLLATE "C" NOT NULL,
    episode_id bigint NOT NULL,
    PRIMARY KEY (scope_key, episode_id)
);

-- The snippets of an episode's messages: each sentence of each message with text, numbered by
-- its message (position, from 0) and within it (part, from 0), with its speaker and role. What
-- the trigger of version 18 inserted, and what a search reads of an episode still queued.
CREATE OR REPLACE FUNCTION agent_memory.episode_snippets(messages jsonb)
RETURNS TABLE ("position" integer, part integer, speaker text, role text, content text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (m.position - 1)::integer, (s.part - 1)::integer,
           agent_memory.message_speaker(m.message), agent_memory.message_role(m.message),
           btrim(s.sentence)
    FROM jsonb_array_elements(messages) WITH ORDINALITY AS m(message, position)
    CROSS JOIN LATERAL unnest(agent_memory.sentences(agent_memory.message_text(m.message)))
        WITH ORDINALITY AS s(sentence, part)
    WHERE length(btrim(s.sentence)) > 0
$$;

-- every way in (record, record_many, the backfill imports) queues what it stores
CREATE OR REPLACE FUNCTION agent_memory.queue_episode() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_memory.snippet_queue (scope_key, episode_id) VALUES (NEW.scope_key, NEW.id);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS episodes_index ON agent_memory.episodes;
DROP FUNCTION IF EXISTS agent_memory.index_episode();
DROP TRIGGER IF EXISTS episodes_queue ON agent_memory.episodes;
CREATE TRIGGER episodes_queue AFTER INSERT ON agent_memory.episodes
    FOR EACH ROW EXECUTE FUNCTION agent_memory.queue_episode();

-- Index up to ``batch`` queued episodes (of the scopes ``keys``, NULL: of any): their snippets
-- inserted in one statement (so their words are counted in one), their queue rows deleted, in
-- one transaction; how many were taken. Rows another drain holds are skipped, so drains can
-- run side by side and none indexes an episode twice (and the snippets' key would refuse it).
-- A tenant drains its own scope only. SECURITY DEFINER: a tenant may neither delete queue
-- rows nor write the counts itself.
CREATE OR REPLACE FUNCTION agent_memory.index_pending(batch integer, keys text[] DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    mine text := agent_memory.tenant_scope();
    taken integer;
BEGIN
    IF mine IS NOT NULL AND (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user) THEN
        mine := NULL;  -- a superuser is a member of every role, the tenants' group too
    END IF;
    WITH chosen AS (
        SELECT q.scope_key, q.episode_id FROM agent_memory.snippet_queue q
        WHERE (keys IS NULL OR q.scope_key = ANY (keys)) AND (mine IS NULL OR q.scope_key = mine)
        LIMIT greatest(batch, 1)
        FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM agent_memory.snippet_queue q USING chosen c
        WHERE q.scope_key = c.scope_key AND q.episode_id = c.episode_id
        RETURNING q.episode_id
    ), made AS (
        INSERT INTO agent_memory.snippets
            (episode_id, position, part, scope_key, speaker, role, occurred_at, content)
        SELECT e.id, p.position, p.part, e.scope_key, p.speaker, p.role, e.occurred_at, p.content
        FROM gone g
        JOIN agent_memory.episodes e ON e.id = g.episode_id
        CROSS JOIN LATERAL agent_memory.episode_snippets(e.messages) AS p
        ORDER BY e.id, p.position, p.part
        ON CONFLICT (episode_id, position, part) DO NOTHING
        RETURNING 1
    )
    SELECT count(*) INTO taken FROM gone;
    RETURN taken;
END $$;
REVOKE ALL ON FUNCTION agent_memory.index_pending(integer, text[]) FROM PUBLIC;

-- a tenant's record queues its episode, and its search reads its own scope's queue
SELECT agent_memory.protect('agent_memory.snippet_queue', 'SELECT, INSERT');
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN
        GRANT EXECUTE ON FUNCTION agent_memory.index_pending(integer, text[])
            TO agent_memory_tenant;
    END IF;
END
$$;
