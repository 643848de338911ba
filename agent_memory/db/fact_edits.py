"""A fact added or forgotten by an agent's tool, one statement each, for the sync and the async
face alike (:mod:`agent_memory.db.dual`): the tools of :mod:`agent_memory.tools` run in sync
graphs as in async ones."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agent_memory.db.dual import Run, Steps, dual
from agent_memory.db.facts import UPSERT, upsert_params
from agent_memory.db.levels import LEVELS_MATCH, levels_params
from agent_memory.models import Fact, Scope

# Invalidate a current fact of one of the levels read, at its own level: another user's or a
# sibling scope's id is as unknown as none (SUPERSEDE's columns, over the levels' keys)
_FORGET = f"""
UPDATE agent_memory.memory_items
SET superseded_at = now(), superseded_by = NULL, superseded_by_job = NULL,
    valid_to = greatest(valid_from, now())
WHERE id = %(id)s AND {LEVELS_MATCH} AND superseded_at IS NULL
RETURNING content
"""


def add_steps(scope: Scope, fact: Fact, at: datetime) -> Steps[int]:
    """Write ``fact`` for ``scope`` as said directly at ``at`` (a known one, reworded or not,
    is reinforced instead of copied); its id."""
    row = yield Run(UPSERT, upsert_params(scope, fact, at, None), "one")
    return int(row[0])


def forget_steps(levels: Sequence[Scope], fact_id: int) -> Steps[str | None]:
    """Invalidate the current fact ``fact_id`` filed under one of ``levels`` (a scope and the
    levels of memory it reads), kept, superseded, as history; its content, or None when none
    of them has such a current fact."""
    params = {**levels_params(levels), "id": fact_id}
    row = yield Run(_FORGET, params, "one")
    return None if row is None else str(row[0])


add, add_sync = dual(add_steps)
forget, forget_sync = dual(forget_steps)
