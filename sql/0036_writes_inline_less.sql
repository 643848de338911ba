-- agent-memory schema, version 36: a write no longer reads two functions' bodies at each
-- INSERT.
--
-- PostgreSQL prepares a stored generated column's expression anew for every statement that
-- writes its table, and preparing it inlines each SQL-language function the expression calls:
-- it reads the function's stored body (a parse tree kept as text, some kilobytes,
-- compressed), parses it and substitutes it. The scope key (agent_memory.scope_key, sql/0001)
-- is in the generated ``scope_key`` of episodes, facts, consolidation jobs, Store items and
-- tenants; a Store item's ``search`` calls agent_memory.document_text (sql/0034), whose body is
-- read and parsed, then found not inlinable (it holds a subquery). On a Store put of a memory
-- item, a fact and its item written by one call, that was about a tenth of the server's CPU
-- (docs/benchmarks.md, store).
--
-- A PL/pgSQL function is never inlined: the expression keeps the call, and PL/pgSQL plans
-- the function's own expression once per session. So:
--
-- * agent_memory.scope_key_inline is the scope key's expression, in SQL, for queries, which the
--   planner inlines (a query's comparison with a scope's key is an index condition, computed
--   once per scan; agent_memory.db.fragments);
-- * agent_memory.scope_key, which the generated columns call, is PL/pgSQL and returns
--   scope_key_inline's value: one expression for both;
-- * agent_memory.document_text is PL/pgSQL, its body unchanged.
--
-- What each function returns is unchanged, so no stored key or vector is computed again.
-- Every statement is safe to re-run.

CREATE OR REPLACE FUNCTION agent_memory.scope_key_inline(
    user_id text, agent_id text, workflow_id text
) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN quote_nullable(user_id) || ',' || quote_nullable(agent_id) || ',' || quote_nullable(workflow_id);

CREATE OR REPLACE FUNCTION agent_memory.scope_key(user_id text, agent_id text, workflow_id text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN agent_memory.scope_key_inline(user_id, agent_id, workflow_id);
END
$$;

CREATE OR REPLACE FUNCTION agent_memory.document_text(value jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT coalesce(string_agg(j.item #>> '{}', E'\n'), '')
            FROM jsonb_path_query(value, 'strict $.**') AS j(item)
            WHERE jsonb_typeof(j.item) = 'string');
END
$$;
