-- agent-memory schema, version 28: a superuser is the owner, never a tenant.
--
-- agent_memory.tenant_scope() asked whether the session's role is a member of the tenants'
-- group, and PostgreSQL counts a superuser a member of every role: once tenant mode's group
-- existed in the cluster (the migrations make it), a superuser got the scope '' (a tenant with
-- no scope) instead of NULL (no restriction). Row-level security never applies to a superuser,
-- and the functions that confine a tenant each made an exception for one (0019-0026), but the
-- code that decides whether to migrate did not: an embedded database, whose role is a superuser,
-- could not be upgraded ("a tenant's role cannot migrate it"). Now the one definition says so.
-- Every statement is safe to re-run.

CREATE OR REPLACE FUNCTION agent_memory.tenant_scope() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
AS $$
    SELECT CASE
        WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_tenant') THEN NULL
        WHEN (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user) THEN NULL
        WHEN NOT pg_has_role(session_user, 'agent_memory_tenant', 'MEMBER') THEN NULL
        ELSE coalesce((SELECT t.scope_key FROM agent_memory.tenants t
                       WHERE t.role_name = session_user), '')
    END
$$;
