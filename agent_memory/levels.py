"""Where consolidation files a fact among the levels of memory its scope reads (what a scope
reads is :meth:`Scope.levels`; docs/guide.md, "Levels of memory").

A fact goes to the level the extractor names for it; else, for an update, to the level of the
fact it replaces; else by its kind: who the user is and what they prefer (``identity``,
``preference``) are about the person, and go to the person's level; anything else (a situation,
an event, a plan) stays in the scope it was said in. A level the scope does not read under the
setting (``AGENT_MEMORY_SHARE``) is never written: the fact stays in the scope, so that with
``exact`` nothing is filed anywhere else.
"""

from __future__ import annotations

from agent_memory.models import FactKind, Level, Scope, Share

# the kinds of fact that are about the person, wherever they were said
PERSONAL_KINDS: tuple[FactKind, ...] = ("identity", "preference")


def level_scope(scope: Scope, level: Level) -> Scope | None:
    """The scope of ``level`` as seen from ``scope``: ``user`` the person, ``user_agent`` the
    person with the scope's agent, ``agent`` the agent's own knowledge; ``workflow`` and
    ``scope`` the scope itself. None when the scope has no such level (no user, no agent)."""
    user, agent, _ = scope.params
    if level == "user":
        return Scope(user) if user is not None else None
    if level == "user_agent":
        return Scope(user, agent) if user is not None and agent is not None else None
    if level == "agent":
        return Scope(agent_id=agent) if agent is not None else None
    return scope


def filing_scope(
    scope: Scope,
    share: Share,
    kind: FactKind,
    named: Level | None = None,
    replaced: Scope | None = None,
) -> Scope:
    """The scope a fact said in ``scope`` is filed under (see the module): the level ``named``
    by the extractor, else that of the fact it ``replaced``, else by ``kind``; always one that
    ``scope`` reads under ``share``."""
    if named is not None:
        chosen = level_scope(scope, named)
    elif replaced is not None:
        chosen = replaced
    elif kind in PERSONAL_KINDS:
        chosen = level_scope(scope, "user")
    else:
        chosen = scope
    return chosen if chosen is not None and chosen in scope.levels(share) else scope
