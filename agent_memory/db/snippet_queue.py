"""The recorded conversations whose sentences wait to be indexed (sql/0026_snippet_queue.sql).

A record only queues its episode; a drain makes the snippets of the queued episodes, a batch per
statement and transaction (``agent_memory.index_pending``: the batch's rows locked SKIP LOCKED,
so drains run side by side without indexing an episode twice, and a tenant drains its own
scope only). Until then the conversation search reads them from their messages
(:mod:`agent_memory.db.snippets`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.db.dual import Run, Steps, dual
from agent_memory.db.embeddings import scopes_params
from agent_memory.models import Scope

# episodes indexed per statement: a turn's episode makes a few sentences, so a batch's
# statement stays short (its locks too) and its words are counted in one
BATCH = 200

# the scopes' keys (NULL: every scope's), from their parts as agent_memory.scope_key makes them
_KEYS = """(SELECT array_agg(agent_memory.scope_key_inline(u, a, w))
          FROM unnest(%(users)s::text[], %(agents)s::text[], %(workflows)s::text[])
               AS s(u, a, w))"""
INDEX = f"SELECT agent_memory.index_pending(%(batch)s, {_KEYS})"
WAITING = f"""
SELECT count(*) FROM agent_memory.snippet_queue
WHERE %(users)s::text[] IS NULL OR scope_key = ANY ({_KEYS}::text[])
"""


def _scopes(scopes: Sequence[Scope] | None) -> dict[str, Any]:
    """The parts of ``scopes`` as three arrays (:func:`scopes_params`); None: every scope."""
    if scopes is None:
        return {"users": None, "agents": None, "workflows": None}
    return scopes_params(scopes)


def drain_steps(scopes: Sequence[Scope] | None = None, batch: int = BATCH) -> Steps[int]:
    """Index the queued episodes of ``scopes`` (None: of every scope), ``batch`` at a time,
    until fewer than a batch were left to take (those another drain holds are its own); how
    many episodes this drain indexed. Idempotent: an indexed episode is no longer queued."""
    if scopes is not None and not scopes:
        return 0
    params = {"batch": batch, **_scopes(scopes)}
    done = 0
    while True:
        row = yield Run(INDEX, params, "one")
        taken = int(row[0]) if row else 0
        done += taken
        if taken < batch:
            return done


drain, drain_sync = dual(drain_steps)


def waiting_steps(scopes: Sequence[Scope] | None = None) -> Steps[int]:
    """How many episodes of ``scopes`` (None: of every scope) wait to be indexed."""
    if scopes is not None and not scopes:
        return 0
    row = yield Run(WAITING, _scopes(scopes), "one")
    return int(row[0]) if row else 0


waiting, waiting_sync = dual(waiting_steps)
