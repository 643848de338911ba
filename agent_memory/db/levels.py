"""Reading several levels of memory at once (docs/guide.md, "Levels of memory"): the scope
keys of the levels a scope reads, as SQL, and their parameters. Which levels those are is
:meth:`agent_memory.models.Scope.levels`'s rule alone; this module only carries its answer.

The keys travel as three arrays of parts (each part NULL or text) and are made in SQL by
``agent_memory.scope_key``, the one definition of a key: ``%(level_user_ids)s`` and so on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.models import Scope

# the keys of the levels read, in the order given (the scope itself first)
LEVEL_KEYS = """ARRAY(SELECT agent_memory.scope_key(l.u, l.a, l.w)
      FROM unnest(%(level_user_ids)s::text[], %(level_agent_ids)s::text[],
                  %(level_workflow_ids)s::text[]) WITH ORDINALITY AS l(u, a, w, n) ORDER BY l.n)"""
# a row of any of those levels
LEVELS_MATCH = f"scope_key = ANY({LEVEL_KEYS})"
# a row of the one level ``lk.key`` (inside ``unnest(LEVEL_KEYS) AS lk(key)``): a scan of the
# scope's index in its own order, per level, where ANY over the keys would sort them all
ONE_LEVEL = "scope_key = lk.key"


def level_key(n: int) -> str:
    """The key of the ``n``-th level read (0: the scope itself)."""
    return f"({LEVEL_KEYS})[{int(n) + 1}]"


def levels_params(levels: Sequence[Scope]) -> dict[str, Any]:
    """The parameters naming ``levels`` (the scope itself first), for :data:`LEVEL_KEYS`."""
    return {
        "level_user_ids": [s.user_id for s in levels],
        "level_agent_ids": [s.agent_id for s in levels],
        "level_workflow_ids": [s.workflow_id for s in levels],
    }
