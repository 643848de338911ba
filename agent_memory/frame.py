"""The frame one inject returns (`agent_memory.models.WorkingMemoryFrame`), made from what it
read: its ranked facts, with their scores, dates and levels, the past messages chosen to go
beside them, and its history, rendered for a prompt."""

from __future__ import annotations

from datetime import UTC, datetime

from agent_memory.db.level_reads import Origins
from agent_memory.db.recall import Ranked
from agent_memory.models import (
    FactKind,
    HistoryEntry,
    InjectRanking,
    Scope,
    Snippet,
    WorkingMemoryFrame,
)
from agent_memory.snippet_choice import chosen_snippets

# fact id -> its kind and since when it is true
Dates = dict[int, tuple[FactKind, datetime]]


def date_phrase(kind: str, since: datetime) -> str:
    """How a prompt says when a fact became true: an event happened on a day, a plan was
    said on one, anything else holds since."""
    day = since.astimezone(UTC).date().isoformat()
    return {"event": f"on {day}", "plan": f"said on {day}"}.get(kind, f"since {day}")


def frame(
    scope: Scope,
    ranking: InjectRanking,
    rows: Ranked,
    history: list[HistoryEntry],
    snippets: list[Snippet] | None,
    dates: Dates | None,
    origins: Origins | None,
    snippet_tokens: int,
) -> WorkingMemoryFrame:
    """The frame of an inject of ``scope`` that ranked ``rows`` by ``ranking``, found
    ``snippets`` (those within ``snippet_tokens`` that no fact says are shown), and read
    ``history``, ``dates`` and the facts' levels (``origins``) where it asked for them."""
    made = WorkingMemoryFrame(
        user_id=scope.user_id,
        agent_id=scope.agent_id,
        workflow_id=scope.workflow_id,
        injected_facts=[content for _, content, _, _ in rows],
        fact_ids=[fact_id for fact_id, _, _, _ in rows],
        importances=[round(importance, 6) for _, _, importance, _ in rows],
        ranking=ranking,
        scores=[round(score, 6) for _, _, _, score in rows] if ranking != "importance" else [],
        history=history,
        snippets=chosen_snippets(snippets or [], rows, snippet_tokens),
        fact_dates=[date_phrase(*dates[fact_id]) for fact_id, _, _, _ in rows] if dates else [],
        fact_levels=[origins[fact_id].level for fact_id, _, _, _ in rows] if origins else [],
    )
    made.context = made.render()
    return made
