"""A fact added or forgotten by an agent's tool, one statement each, for the sync and the async
face alike (:mod:`agent_memory.db.dual`): the tools of :mod:`agent_memory.tools` run in sync
graphs as in async ones."""

from __future__ import annotations

from datetime import datetime

from agent_memory.db.dual import Run, Steps, dual
from agent_memory.db.facts import SUPERSEDE, UPSERT, upsert_params
from agent_memory.models import Fact, Scope

# SUPERSEDE touches only a current fact of the scope: another scope's id is as unknown as none
_FORGET = SUPERSEDE + "RETURNING content"


def add_steps(scope: Scope, fact: Fact, at: datetime) -> Steps[int]:
    """Write ``fact`` for ``scope`` as said directly at ``at`` (a known one, reworded or not,
    is reinforced instead of copied); its id."""
    row = yield Run(UPSERT, upsert_params(scope, fact, at, None), "one")
    return int(row[0])


def forget_steps(scope: Scope, fact_id: int) -> Steps[str | None]:
    """Invalidate ``scope``'s current fact ``fact_id`` (kept, superseded, as history); its
    content, or None when the scope has no such current fact."""
    params = {**scope.as_dict(), "id": fact_id, "by": None, "job_id": None, "valid_to": None}
    row = yield Run(_FORGET, params, "one")
    return None if row is None else str(row[0])


add, add_sync = dual(add_steps)
forget, forget_sync = dual(forget_steps)
