"""What was learned goes with what it was learned from: the facts of other levels that an
erasure's conversations alone support (docs/guarantees.md, "What an erasure removes").

A conversation's facts may be filed at another level than its exact scope (the person's, the
agent's own: agent_memory.levels), so erasing a scope's episodes leaves facts elsewhere that
name them as sources. In the erasure's transaction, after its scopes' rows went:

1. The selected scopes' episodes were locked first (`lock_episodes`), so a consolidation
   writing facts from them commits before the erasure reads anything, and one that comes later
   finds them gone and writes nothing (agent_memory.consolidation.write: its marks come first).
2. The facts of other scopes that lost a source are locked (a consolidation adding a source to
   one of them, from a conversation that stays, commits first), then read anew: one with no
   source left and not written by hand (``direct``, sql/0031) goes, with its vectors, its
   refusals and the Store rows that show it; the others stay, supported by what remains.
3. History: a fact that an erased fact had superseded, or that an erased conversation's job
   invalidated, is true again as if that conversation had never been had (revived), unless it
   rests on nothing either (no source, not by hand: an erased fact's history, which goes too);
   one whose successor was itself superseded points at what superseded that.

Deleting facts updates their full-text counts and Store rows through the tables' triggers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from agent_memory.db import term_counts
from agent_memory.db.erasure import Erased, Successor, record
from agent_memory.models import Scope

_KEYS = (
    "ARRAY(SELECT agent_memory.scope_key_inline(u, a, w)"
    " FROM unnest(%(users)s::text[], %(agents)s::text[], %(workflows)s::text[]) AS t(u, a, w))"
)
LOCK_EPISODES = f"""
SELECT id FROM agent_memory.episodes WHERE scope_key = ANY({_KEYS}) ORDER BY id FOR UPDATE
"""
LOCK_FACTS = """
SELECT id FROM agent_memory.memory_items WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE
"""
# each locked fact, with what supports it now (read after the lock: a new statement's snapshot)
SUPPORT = """
SELECT m.id, m.user_id, m.agent_id, m.workflow_id, m.content, m.superseded_at IS NULL,
       m.superseded_by, m.superseded_by_job, m.direct,
       (SELECT count(*) FROM agent_memory.fact_sources s WHERE s.fact_id = m.id)
FROM agent_memory.memory_items m WHERE m.id = ANY(%s::bigint[]) ORDER BY m.id
"""
# the facts that an erased fact superseded, or an erased job invalidated (sql/0031's indexes)
HISTORY = """
SELECT m.id, m.user_id, m.agent_id, m.workflow_id, m.content, m.superseded_by,
       m.superseded_by_job, m.direct
           OR EXISTS (SELECT 1 FROM agent_memory.fact_sources s WHERE s.fact_id = m.id)
FROM agent_memory.memory_items m
WHERE m.superseded_at IS NOT NULL
  AND (m.superseded_by = ANY(%(facts)s::bigint[])
       OR (m.superseded_by IS NULL AND m.superseded_by_job = ANY(%(jobs)s::bigint[])))
  AND m.id <> ALL(%(facts)s::bigint[])
ORDER BY m.id
FOR UPDATE
"""
# without writing (export): the facts of other scopes the scopes' conversations are sources
# of, and whether an erasure of the scopes would remove them (nothing else supports them)
LEARNED = f"""
WITH erased AS (SELECT id FROM agent_memory.episodes WHERE scope_key = ANY({_KEYS}))
SELECT m.id, NOT m.direct AND NOT EXISTS (
           SELECT 1 FROM agent_memory.fact_sources o
           WHERE o.fact_id = m.id AND o.episode_id NOT IN (SELECT id FROM erased))
FROM agent_memory.memory_items m
WHERE m.id IN (SELECT s.fact_id FROM agent_memory.fact_sources s
               WHERE s.episode_id IN (SELECT id FROM erased))
  AND m.scope_key <> ALL({_KEYS})
ORDER BY m.id
"""
# facts an erasure before schema 31 left behind: consolidated (their job named), by no hand,
# with no source left and their job erased (only an erasure deletes sources and jobs)
LEFT_BEHIND = """
SELECT m.id FROM agent_memory.memory_items m
WHERE NOT m.direct AND m.source_job_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM agent_memory.fact_sources s WHERE s.fact_id = m.id)
  AND NOT EXISTS (SELECT 1 FROM agent_memory.consolidation_jobs j WHERE j.id = m.source_job_id)
ORDER BY m.id
"""
REVIVE = """
UPDATE agent_memory.memory_items
SET superseded_at = NULL, superseded_by = NULL, superseded_by_job = NULL, valid_to = NULL,
    updated_at = now()
WHERE id = ANY(%s::bigint[])
"""
REPOINT = """
UPDATE agent_memory.memory_items SET superseded_by = %s, superseded_by_job = %s WHERE id = %s
"""
DELETE_REJECTIONS = (
    "DELETE FROM agent_memory.fact_embedding_rejections WHERE fact_id = ANY(%s::bigint[])"
)
DELETE = "DELETE FROM agent_memory.memory_items WHERE id = ANY(%s::bigint[])"


@dataclass(frozen=True)
class LearnedFact:
    """A fact of another level that an erasure's conversations were sources of: its id, where
    it is filed, its text, and (for one that stays) how many conversations still support it and
    whether it was also written by hand."""

    id: int
    scope: Scope
    content: str
    sources_left: int = 0
    by_hand: bool = False


@dataclass(frozen=True)
class Derived:
    """The facts of other levels an erasure took (``gone``: learned from its conversations
    alone; ``history``: what those had superseded, resting on nothing else), kept (``kept``:
    supported by other conversations or written by hand, without the erased sources) and made
    true again (``revived``: superseded or invalidated by what was erased)."""

    gone: tuple[LearnedFact, ...] = ()
    history: tuple[LearnedFact, ...] = ()
    kept: tuple[LearnedFact, ...] = ()
    revived: tuple[LearnedFact, ...] = ()

    def counts(self) -> dict[str, int]:
        """How many facts of other levels went, and were made true again."""
        return {
            "derived_facts": len(self.gone) + len(self.history),
            "revived_facts": len(self.revived),
        }

    def by_level(self) -> dict[Scope, dict[str, list[LearnedFact]]]:
        """Each level's facts by what became of them, in the order of the levels' labels."""
        levels: dict[Scope, dict[str, list[LearnedFact]]] = {}
        for what in ("gone", "history", "kept", "revived"):
            for fact in getattr(self, what):
                levels.setdefault(fact.scope, {}).setdefault(what, []).append(fact)
        return dict(sorted(levels.items(), key=lambda item: item[0].label))


def _keys_params(scopes: Iterable[Scope]) -> dict[str, list[str | None]]:
    parts = [s.params for s in scopes]
    return {
        "users": [p[0] for p in parts],
        "agents": [p[1] for p in parts],
        "workflows": [p[2] for p in parts],
    }


async def lock_episodes(conn: psycopg.AsyncConnection[Any], scopes: Iterable[Scope]) -> int:
    """Lock the episodes of ``scopes`` for the erasure's transaction (step 1); how many."""
    cur = await conn.execute(LOCK_EPISODES, _keys_params(scopes))
    return len(await cur.fetchall())


async def learned(
    conn: psycopg.AsyncConnection[Any], scopes: Iterable[Scope]
) -> list[tuple[int, bool]]:
    """The facts of other scopes that ``scopes``' conversations are sources of: (id, whether
    erasing ``scopes`` would remove it), by id. Reads only."""
    cur = await conn.execute(LEARNED, _keys_params(scopes))
    return [(int(r[0]), bool(r[1])) for r in await cur.fetchall()]


async def left_behind(conn: psycopg.AsyncConnection[Any]) -> Erased:
    """The facts earlier erasures left with no source (`LEFT_BEHIND`), as an erasure's facts
    that lost their sources: `settle` then takes them, with their history."""
    cur = await conn.execute(LEFT_BEHIND)
    return Erased(sourced={int(r[0]) for r in await cur.fetchall()})


def _fate(
    by: int | None, job: int | None, erased: Mapping[int, Successor], jobs: set[int]
) -> tuple[int | None, int | None] | None:
    """What a fact superseded by ``by`` / invalidated by ``job`` becomes once ``erased`` facts
    and ``jobs`` are gone: None (true again), or what supersedes it now."""
    seen: set[int] = set()
    while by is not None and by in erased and by not in seen:
        seen.add(by)
        successor = erased[by]
        if successor.current:
            return None
        by, job = successor.by, successor.job
    if by is None and job is not None and job in jobs:
        return None
    return by, job


async def settle(conn: psycopg.AsyncConnection[Any], erased: Erased) -> Derived:
    """Steps 2 and 3, in the erasure's transaction after its scopes' rows went: the facts of
    other levels that rest on nothing any more go, the rest stay; their history follows."""
    sourced = sorted(erased.sourced - set(erased.facts))
    gone: list[LearnedFact] = []
    kept: list[LearnedFact] = []
    facts = dict(erased.facts)
    if sourced:
        await conn.execute(LOCK_FACTS, (sourced,))
        for row in await (await conn.execute(SUPPORT, (sourced,))).fetchall():
            fact_id, scope, content = int(row[0]), Scope(*row[1:4]), str(row[4])
            left, by_hand = int(row[9]), bool(row[8])
            if left == 0 and not by_hand:
                gone.append(LearnedFact(fact_id, scope, content))
                facts[fact_id] = Successor(bool(row[5]), row[6], row[7])
            else:
                kept.append(LearnedFact(fact_id, scope, content, left, by_hand))
    history: list[LearnedFact] = []
    revived: list[LearnedFact] = []
    if facts or erased.jobs:
        params = {"facts": sorted(facts), "jobs": sorted(erased.jobs)}
        for row in await (await conn.execute(HISTORY, params)).fetchall():
            fact = LearnedFact(int(row[0]), Scope(*row[1:4]), str(row[4]))
            fate = _fate(row[5], row[6], facts, erased.jobs)
            if not row[7]:  # rests on nothing: the history of an erased fact
                history.append(fact)
            elif fate is None:
                revived.append(fact)
            elif fate != (row[5], row[6]):
                await conn.execute(REPOINT, (*fate, fact.id))
    if revived:
        await conn.execute(REVIVE, ([f.id for f in revived],))
    doomed = [f.id for f in gone + history]
    if doomed:
        await conn.execute(DELETE_REJECTIONS, (doomed,))
        await conn.execute(DELETE, (doomed,))
    derived = Derived(tuple(gone), tuple(history), tuple(kept), tuple(revived))
    for level in sorted({f.scope for f in gone + history}, key=lambda s: s.label):
        await term_counts.fold(conn, level)  # the deletions' counts, appended by a trigger
    for level, fates in derived.by_level().items():
        counts = {f"{what}_facts": len(found) for what, found in fates.items() if what != "kept"}
        if counts:
            await record(conn, level, counts)
    return derived
