"""Claims on scopes: session advisory locks, one per scope, taken and released for many scopes
in one statement (in order: the n-th answer is the n-th scope's)."""

from __future__ import annotations

from collections.abc import Sequence

from agent_memory.models import Scope

# 7103 keeps these locks apart from any other use of the scope key's hash
CLAIM = """
SELECT pg_try_advisory_lock(hashtextextended(agent_memory.scope_key(u, a, w), 7103))
FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS t(u, a, w, i) ORDER BY i
"""
RELEASE = """
SELECT pg_advisory_unlock(hashtextextended(agent_memory.scope_key(u, a, w), 7103))
FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS t(u, a, w, i) ORDER BY i
"""


def columns(scopes: Sequence[Scope]) -> list[list[str | None]]:
    """The scopes' keys as the three arrays :data:`CLAIM` and :data:`RELEASE` take."""
    return [list(column) for column in zip(*(s.params for s in scopes), strict=True)]
