"""Reading several levels of memory at once (docs/guide.md, "Levels of memory"): the scope
keys of the levels a scope reads, as SQL, and their parameters. Which levels those are is
:meth:`agent_memory.models.Scope.levels`'s rule alone; this module only carries its answer.

The keys travel as three arrays of parts (each part NULL or text) and are made in SQL by
``agent_memory.scope_key``, the one definition of a key: ``%(level_user_ids)s`` and so on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agent_memory.models import Scope

# the keys of the levels read, in the order given (the scope itself first)
LEVEL_KEYS = """ARRAY(SELECT agent_memory.scope_key_inline(l.u, l.a, l.w)
      FROM unnest(%(level_user_ids)s::text[], %(level_agent_ids)s::text[],
                  %(level_workflow_ids)s::text[]) WITH ORDINALITY AS l(u, a, w, n) ORDER BY l.n)"""
# a row of any of those levels
LEVELS_MATCH = f"scope_key = ANY({LEVEL_KEYS})"


def level_key(n: int) -> str:
    """The key of the ``n``-th level read (0: the scope itself)."""
    return f"({LEVEL_KEYS})[{int(n) + 1}]"


def merged(levels: int, branch: Callable[[int], str], order: str, limit: str) -> str:
    """The rows of ``levels`` levels, the ``n``-th level's read by ``branch(n)`` (an ordered,
    limited SELECT, of the level whose key is :func:`level_key` ``(n)``), in ``order`` and cut
    at ``limit``. Each branch is an index range scan of its own, merged in order (a Merge
    Append) and read only as far as the limit takes: the levels' first ``limit`` rows cost what
    one scope's do, where reading ``limit`` from each level and sorting them all would cost
    that many times as much."""
    each = "\n    UNION ALL ".join(f"({branch(n)})" for n in range(levels))
    return f"SELECT * FROM ({each}) AS each_level ORDER BY {order} LIMIT {limit}"


def levels_params(levels: Sequence[Scope]) -> dict[str, Any]:
    """The parameters naming ``levels`` (the scope itself first), for :data:`LEVEL_KEYS`."""
    return {
        "level_user_ids": [s.user_id for s in levels],
        "level_agent_ids": [s.agent_id for s in levels],
        "level_workflow_ids": [s.workflow_id for s in levels],
    }
