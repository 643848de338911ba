"""Claims on scopes: a row lock per scope on ``agent_memory.scope_claims`` (sql/0019), held by a
transaction left open on a connection of its own until the claim is released, and taken for
many scopes in one statement (in order: the n-th answer is the n-th scope's).

Row locks, not advisory locks: any role may take any advisory lock, so a tenant holding a
scope's key would have kept every run off that scope for good. Tenants have no right on
scope_claims, which neither reading, locking nor ``LOCK TABLE`` gets round. Like a session
lock, a row lock ends with its connection: a run that crashes or is killed lets go of its
scopes at once. The price is an open transaction per group of scopes being consolidated: it
holds a transaction id, so VACUUM keeps the rows deleted meanwhile until the group is done."""

from __future__ import annotations

from collections.abc import Sequence

from agent_memory.models import Scope

# the claim rows of the scopes, made once (committed before they are locked, so that a run
# that finds a row held skips it rather than waiting on an uncommitted insert)
ENSURE = """
INSERT INTO agent_memory.scope_claims (scope_key)
SELECT DISTINCT agent_memory.scope_key_inline(u, a, w)
FROM unnest(%s::text[], %s::text[], %s::text[]) AS t(u, a, w)
ORDER BY 1
ON CONFLICT DO NOTHING
"""

# in the claiming transaction: per scope, in order, whether this transaction now holds it
# (a row another transaction holds is skipped, not waited for)
CLAIM = """
WITH wanted AS (
    SELECT agent_memory.scope_key_inline(u, a, w) AS k, i
    FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS t(u, a, w, i)
), held AS MATERIALIZED (
    SELECT c.scope_key FROM agent_memory.scope_claims c
    WHERE c.scope_key IN (SELECT k FROM wanted)
    ORDER BY c.scope_key
    FOR UPDATE SKIP LOCKED
)
SELECT EXISTS (SELECT 1 FROM held h WHERE h.scope_key = w.k) FROM wanted w ORDER BY w.i
"""

# whether any transaction holds the claim of scope key ``{key}`` (an SQL expression): a row
# this statement can lock is one nobody holds (the lock is released when the statement's
# transaction ends)
HELD = """(EXISTS (SELECT 1 FROM agent_memory.scope_claims c WHERE c.scope_key = {key})
    AND NOT EXISTS (SELECT 1 FROM agent_memory.scope_claims c WHERE c.scope_key = {key}
                    FOR KEY SHARE SKIP LOCKED))"""


def columns(scopes: Sequence[Scope]) -> list[list[str | None]]:
    """The scopes' keys as the three arrays :data:`ENSURE` and :data:`CLAIM` take."""
    return [list(column) for column in zip(*(s.params for s in scopes), strict=True)]
