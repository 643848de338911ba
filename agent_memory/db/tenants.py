"""Tenant roles (sql/0016_tenants.sql): a login role per scope that row-level security confines
to that scope. Made, re-keyed, listed and dropped by the owner."""

from __future__ import annotations

import secrets
from typing import Any

import psycopg
from psycopg import sql

from agent_memory.db import auth
from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.db.levels import LEVEL_KEYS, levels_params
from agent_memory.errors import ConfigurationError
from agent_memory.models import Scope

GROUP = "agent_memory_tenant"
GROUP_EXISTS = "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s)"
OF_SCOPE = f"SELECT role_name FROM agent_memory.tenants WHERE {SCOPE_MATCH}"
RECORD = """
INSERT INTO agent_memory.tenants (role_name, user_id, agent_id, workflow_id)
VALUES (%(role)s, %(user_id)s, %(agent_id)s, %(workflow_id)s)
"""
NAMESPACE = "UPDATE agent_memory.tenants SET namespace = %s WHERE role_name = %s"
# the keys of the levels of memory the tenant reads (sql/0023), made by the one definition
READS = f"""UPDATE agent_memory.tenants SET read_keys = {LEVEL_KEYS}
WHERE role_name = %(role)s"""
LIST = """SELECT role_name, user_id, agent_id, workflow_id, created_at
FROM agent_memory.tenants ORDER BY created_at, role_name"""
FORGET = f"DELETE FROM agent_memory.tenants WHERE {SCOPE_MATCH} RETURNING role_name"


async def _role(conn: psycopg.AsyncConnection[Any], scope: Scope) -> str | None:
    row = await (await conn.execute(OF_SCOPE, scope.as_dict())).fetchone()
    return str(row[0]) if row else None


async def create(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    namespace: tuple[str, ...] | None,
    reads: tuple[Scope, ...] = (),
) -> tuple[str, str]:
    """The login role of ``scope`` (made now, or the one it has) with a new password: (role,
    password). ``namespace``: the scope's memory namespace in the Store (its template's; None:
    it has none), the only one under which the tenant may write Store rows (sql/0019).
    ``reads``: the levels of memory whose facts it may read besides its own (sql/0023; the
    scope's :meth:`~agent_memory.models.Scope.levels`), recorded anew each time. In the
    caller's transaction. Refused where the server lets connections in without a password."""
    await auth.refuse_trust(conn)
    row = await (await conn.execute(GROUP_EXISTS, (GROUP,))).fetchone()
    if not (row and row[0]):
        raise ConfigurationError(
            f"tenant mode is unavailable: the role {GROUP} does not exist (the migrations make"
            " it when run by a role allowed to create roles; or create it: CREATE ROLE"
            f" {GROUP} NOLOGIN, and migrate again)"
        )
    password = secrets.token_urlsafe(24)
    role = await _role(conn, scope)
    if role is None:
        # roles are the cluster's: a random name cannot meet another database's tenant
        role = f"agent_memory_t_{secrets.token_hex(8)}"
        await conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                sql.Identifier(role), sql.Identifier(GROUP)
            )
        )
        await conn.execute(RECORD, {"role": role, **scope.as_dict()})
    # a verifier, not the password: the statement's text may reach the server's log
    await conn.execute(auth.set_password(role, password))
    ns = list(namespace) if namespace is not None else None
    await conn.execute(NAMESPACE, (ns, role))
    await conn.execute(READS, {"role": role, **levels_params((scope, *reads))})
    return role, password


async def listed(conn: psycopg.AsyncConnection[Any]) -> list[tuple[str, Scope, Any]]:
    """Every tenant role: (role, scope, when made)."""
    rows = await (await conn.execute(LIST)).fetchall()
    return [(str(r[0]), Scope(r[1], r[2], r[3]), r[4]) for r in rows]


async def drop(conn: psycopg.AsyncConnection[Any], scope: Scope) -> str | None:
    """Drop ``scope``'s tenant role (its sessions end with it); the role dropped, or None."""
    row = await (await conn.execute(FORGET, scope.as_dict())).fetchone()
    if row is None:
        return None
    role = str(row[0])
    await conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
    )
    await conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    return role
