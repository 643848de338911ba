"""What inject gives back, and how: the plan of one inject (its ranking, question and day), the
ranked facts, the relevant past messages (searched by `agent_memory.conversation_search`),
and the frame that puts them in context. A part of `agent_memory.manager.MemoryManager`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from agent_memory import decay as decay_math
from agent_memory.backend import Backend
from agent_memory.conversation_search import MAX_QUERY_CHARS, ConversationSearch, SnippetQuery
from agent_memory.db import episodes as episode_repo
from agent_memory.db import facts as fact_repo
from agent_memory.db import fusion, together
from agent_memory.db import level_reads as level_repo
from agent_memory.db import recall as recall_repo
from agent_memory.db import snippets as snippet_repo
from agent_memory.db.ann_indexes import AnnIndex
from agent_memory.db.dual import Steps, run_async, run_sync
from agent_memory.db.nearest import HNSW_DEFAULT_QUEUE
from agent_memory.db.recall import Ranking
from agent_memory.frame import Dates, frame
from agent_memory.messages import clean_text
from agent_memory.models import (
    HistoryEntry,
    InjectRanking,
    Scope,
    Snippet,
    WorkingMemoryFrame,
)
from agent_memory.reads import Reads
from agent_memory.snippet_choice import snippet_rows

log = logging.getLogger(__name__)


# A question about time or change, for which the facts' dates are worth their tokens.
_ABOUT_TIME = re.compile(
    r"\b(?:when|since|until|how long|what (?:year|month|day|date)|which (?:year|month|day)|"
    r"dates?|ago|before|after|earlier|later|first|last|latest|recent(?:ly)?|previous(?:ly)?|"
    r"still|any ?more|no longer|used to|now|nowadays|these days|current(?:ly)?|changed?|"
    r"moved|switched|new)\b",
    re.I,
)


@dataclass
class _Recall:
    """How one inject ranks: importance only; by the priors alone (no question); or by
    relevance to the question, by full text, meaning, or both fused."""

    ranking: InjectRanking
    day: date
    at: datetime  # the moment a used fact's decay clock restarts at
    before: datetime  # history up to here
    params: dict[str, Any] = field(default_factory=dict)
    vector: list[float] | None = None
    dated: bool = False  # the frame says since when each fact is true
    # the levels of memory read (Scope.levels under AGENT_MEMORY_SHARE), the scope itself first
    levels: tuple[Scope, ...] = ()

    def copy(self) -> _Recall:
        return replace(self, params=dict(self.params))

    def by_text(self) -> dict[str, Any]:
        """The parameters of the same inject ranked by full text alone (the fallback when the
        ranking by meaning fails)."""
        self.ranking, self.vector = "text", None
        self.params["text"] = self.params.get("question")
        return self.params


# what an inject's facts read: ranked facts, history, dates, levels; and with its snippets
_Recalled = tuple[recall_repo.Ranked, list[HistoryEntry], Dates | None, level_repo.Origins | None]
_Found = tuple[
    recall_repo.Ranked, list[HistoryEntry], list[Snippet], Dates | None, level_repo.Origins | None
]


class Injector:
    """Inject over ``backend``'s pools and settings: ``reads`` says where it reads,
    ``conversations`` searches the past messages to show beside the facts."""

    def __init__(self, backend: Backend, reads: Reads, conversations: ConversationSearch) -> None:
        self.settings = backend.settings
        self._queries = backend.queries
        self._ann = backend.ann
        self._reads = reads
        self._conversations = conversations

    def _plan(self, scope: Scope, query: str | None, on: date | None) -> _Recall:
        """What one inject reads: the day, the ranking and its parameters."""
        m = self.settings.memory
        day = on or decay_math.today()
        # "now" for an inject as of today; the start of the given day otherwise (tests, replays)
        at = datetime.now(UTC) if on is None else datetime.combine(on, time(), UTC)
        before = at if on is None else at + timedelta(days=1)
        dated = m.inject_dates == "always" or (
            m.inject_dates == "auto" and bool(query and _ABOUT_TIME.search(query))
        )
        levels = scope.levels(m.share)
        if m.inject_ranking == "importance":
            return _Recall("importance", day, at, before, {}, dated=dated, levels=levels)
        # a pasted document is not a question: its start says what it is about
        text = clean_text((query or "")[:MAX_QUERY_CHARS])
        params = fusion.ranked_params(
            scope,
            text if text.strip() else None,
            on=day,
            min_importance=m.inject_min_importance,
            limit=m.inject_limit,
            candidates=m.inject_candidates,
            priors=(m.inject_weight_importance, m.inject_weight_recency),
            fusion=fusion.Fusion.of(m),
        )
        params["question"] = params["text"]
        ranking: Literal["priors", "text"] = "text" if params["text"] else "priors"
        return _Recall(ranking, day, at, before, params, dated=dated, levels=levels)

    def _wants_vector(self, plan: _Recall) -> bool:
        return (
            plan.ranking == "text"
            and self.settings.memory.inject_ranking in ("hybrid", "vector")
            and self.settings.embedding.active_model is not None
        )

    def _by_meaning(self, plan: _Recall, vector: list[float] | None) -> None:
        """Rank by meaning too, once the question has a vector (else by full text alone)."""
        if vector is None:
            return
        plan.vector = vector
        plan.params["model"] = self._queries.model
        if self.settings.memory.inject_ranking == "vector":
            plan.ranking = "vector"
            plan.params["text"] = None  # the full-text side is left out
        else:
            plan.ranking = "hybrid"

    def _snippet_query(self, scope: Scope, plan: _Recall) -> SnippetQuery | None:
        """What the snippet search of this inject reads; None when it has none to make."""
        m = self.settings.memory
        question = plan.params.get("question")
        if not m.inject_snippets_tokens or not question or plan.ranking == "priors":
            return None
        params = snippet_repo.search_params(
            scope,
            question,
            on=plan.day,
            until=plan.before,
            limit=snippet_rows(m.inject_snippets_tokens),
            candidates=m.inject_candidates,
            fusion=fusion.Fusion.of(m),
            replies=m.inject_snippet_replies,
            # on the hot path the index is read for the candidates alone, with no margin for
            # sentences the range drops (it ends now, or on the day given): what is found is
            # the same on both recall sets at HNSW scale (docs/benchmarks.md, load); never a
            # shorter queue than pgvector's own default (hnsw.ef_search), whose neighbours
            # its graph is built to find
            queue=max(m.inject_candidates, HNSW_DEFAULT_QUEUE),
        )
        params["model"] = plan.params.get("model")
        # read now: the fact ranking, when run apart before the search, may fall back to text
        return SnippetQuery(scope, params, plan.vector)

    def _frame(self, scope: Scope, plan: _Recall, found: _Found) -> WorkingMemoryFrame:
        """The frame of an inject by ``plan`` that found ``found``."""
        rows, history, snippets, dates, origins = found
        tokens = self.settings.memory.inject_snippets_tokens
        return frame(scope, plan.ranking, rows, history, snippets, dates, origins, tokens)

    async def inject(
        self, scope: Scope, *, query: str | None = None, on: date | None = None
    ) -> WorkingMemoryFrame:
        """The facts to put in context for ``scope``, and its recent history.

        With ``AGENT_MEMORY_INJECT_RANKING=hybrid`` (the default) the facts most relevant to
        ``query`` (the latest user message) by full text and by meaning, importance and recency
        ordering comparable matches (see `agent_memory.db.recall`); with no query, the most
        important and recent. With ``importance``, the most important facts whatever is asked.
        ``on``: the day to evaluate decay on (default today). With a read replica
        (``AGENT_MEMORY_READ_DATABASE_URL``) it reads there while the replica keeps up, and
        writes (reinforcement) on the primary: see `agent_memory.replica`.
        """
        plan = self._plan(scope, query, on)
        if self._wants_vector(plan):
            self._by_meaning(plan, await self._queries.embed(plan.params["text"]))
        search = self._snippet_query(scope, plan)

        async def read(
            _pool: AsyncConnectionPool, conn: psycopg.AsyncConnection[Any], primary: bool
        ) -> tuple[_Recall, _Found]:
            used = plan.copy()  # a fallback to full text changes it, and a read may run twice
            return used, await run_async(conn, self._read_steps(scope, used, search, on, primary))

        (used, found), primary = await self._reads.run(read)
        # read on the replica: written on the primary
        if not primary and self._reads.reinforces(on):
            await self._reads.reinforce(scope, [r[0] for r in found[0]], used.at)
        return self._frame(scope, used, found)

    def _read_steps(
        self,
        scope: Scope,
        plan: _Recall,
        search: SnippetQuery | None,
        on: date | None,
        reinforce: bool,
    ) -> Steps[_Found]:
        """What one inject reads, on one connection: its facts and its past messages ranked
        by one statement when it ranks by relevance; each on its own otherwise, or where that
        statement failed."""
        if search is not None and plan.ranking != "importance":
            found = yield from self._together_steps(scope, plan, search, on, reinforce)
            if found is not None:
                return found
        rows, history, dates, origins = yield from self._recall_steps(
            scope, plan, on, reinforce=reinforce
        )
        snippets = yield from self._conversations.steps(search)
        return rows, history, snippets, dates, origins

    def _recall_steps(
        self, scope: Scope, plan: _Recall, on: date | None, *, reinforce: bool = True
    ) -> Steps[_Recalled]:
        """The facts of one inject (ranked, and reinforced as used unless not ``reinforce``),
        its history and dates, and, over several levels of memory, the scope each fact is
        filed under."""
        m = self.settings.memory
        origins = None
        if len(plan.levels) > 1:
            rows, origins = yield from self._levels_steps(plan)
        elif plan.ranking == "importance":
            top = yield from fact_repo.top_steps(
                scope, m.inject_min_importance, m.inject_limit, plan.day
            )
            rows = [(i, c, imp, imp) for i, c, imp in top]
        elif plan.vector is not None:
            try:
                ann = yield from self._ann.steps("facts", scope)
                rows = yield from recall_repo.ranked_steps(plan.params, plan.vector, ann)
            except psycopg.Error as exc:  # e.g. pgvector dropped: text relevance instead
                log.warning("ranking by embeddings failed (%s); by full text instead", exc)
                rows = yield from recall_repo.ranked_steps(plan.by_text())
        else:
            rows = yield from recall_repo.ranked_steps(plan.params)
        history, dates = yield from self._after_steps(scope, plan, rows, on, reinforce)
        return rows, history, dates, origins

    def _after_steps(
        self,
        scope: Scope,
        plan: _Recall,
        rows: recall_repo.Ranked,
        on: date | None,
        reinforce: bool,
    ) -> Steps[tuple[list[HistoryEntry], Dates | None]]:
        """What an inject reads after its facts: it reinforces them (unless not
        ``reinforce``), and reads its history and their dates where the settings ask."""
        m = self.settings.memory
        if reinforce and self._reads.reinforces(on):
            try:
                # a write: only the scope's own facts (the statement's scope match)
                ids = [r[0] for r in rows]
                yield from recall_repo.refresh_steps(scope, ids, plan.at, m.use_growth)
            except psycopg.Error as exc:  # best effort: the facts were read already
                log.warning("reinforcing the injected facts failed: %s", exc)
        history = (
            (yield from episode_repo.history_steps(scope, m.inject_history, plan.before))
            if m.inject_history
            else []
        )
        dates = (yield from fact_repo.dates_steps([r[0] for r in rows])) if plan.dated else None
        return history, dates

    def _together_steps(
        self,
        scope: Scope,
        plan: _Recall,
        search: SnippetQuery,
        on: date | None,
        reinforce: bool,
    ) -> Steps[_Found | None]:
        """What an inject whose facts are ranked by relevance reads, its facts and its past
        messages ranked by one statement (`agent_memory.db.together`); None when that
        statement failed (e.g. pgvector dropped), to be read again each on its own, as each
        falls back alone."""
        levels = len(plan.levels) > 1
        columns = together.LEVEL_FACT_COLUMNS if levels else together.FACT_COLUMNS
        try:
            facts = yield from self._fact_ranking_steps(scope, plan)
            snippets = yield from self._conversations.ranking_steps(search)
            fact_rows, snippet_rows = yield from together.together_steps(facts, columns, snippets)
        except psycopg.Error as exc:
            log.warning("ranking facts and messages in one statement failed (%s); apart", exc)
            return None
        origins = None
        if levels:
            rows, origins = level_repo.levels_rows(fact_rows, plan.levels)
        else:
            rows = recall_repo.ranked_rows(fact_rows)
        history, dates = yield from self._after_steps(scope, plan, rows, on, reinforce)
        return rows, history, snippet_repo.found_snippets(snippet_rows), dates, origins

    def _fact_ranking_steps(self, scope: Scope, plan: _Recall) -> Steps[Ranking]:
        """The statement ranking an inject's facts by relevance (not by importance), over its
        levels, through the HNSW indexes of those that have one."""
        if len(plan.levels) > 1:
            anns = (yield from self._level_anns(plan)) if plan.vector is not None else None
            return level_repo.levels_ranking(plan.params, plan.levels, plan.vector, anns)
        ann = (yield from self._ann.steps("facts", scope)) if plan.vector is not None else None
        return recall_repo.ranking(plan.params, plan.vector, ann)

    def _level_anns(self, plan: _Recall) -> Steps[list[AnnIndex | None]]:
        """Each level's own HNSW index of facts, if it has one."""
        anns = []
        for level in plan.levels:
            anns.append((yield from self._ann.steps("facts", level)))
        return anns

    def _levels_steps(self, plan: _Recall) -> Steps[tuple[recall_repo.Ranked, level_repo.Origins]]:
        """The facts of an inject that reads several levels, ranked together."""
        m = self.settings.memory
        if plan.ranking == "importance":
            return (
                yield from level_repo.top_levels_steps(
                    plan.levels, m.inject_min_importance, m.inject_limit, plan.day
                )
            )
        if plan.vector is not None:
            try:
                anns = yield from self._level_anns(plan)
                return (
                    yield from level_repo.ranked_levels_steps(
                        plan.params, plan.levels, plan.vector, anns
                    )
                )
            except psycopg.Error as exc:  # e.g. pgvector dropped: text relevance instead
                log.warning("ranking by embeddings failed (%s); by full text instead", exc)
                plan.by_text()
        return (yield from level_repo.ranked_levels_steps(plan.params, plan.levels))

    def inject_sync(
        self, scope: Scope, *, query: str | None = None, on: date | None = None
    ) -> WorkingMemoryFrame:
        """`inject` for sync code."""
        plan = self._plan(scope, query, on)
        if self._wants_vector(plan):
            self._by_meaning(plan, self._queries.embed_sync(plan.params["text"]))
        search = self._snippet_query(scope, plan)

        def read(
            _pool: ConnectionPool, conn: psycopg.Connection[Any], primary: bool
        ) -> tuple[_Recall, _Found]:
            used = plan.copy()
            return used, run_sync(conn, self._read_steps(scope, used, search, on, primary))

        (used, found), primary = self._reads.run_sync(read)
        if not primary and self._reads.reinforces(on):
            self._reads.reinforce_sync(scope, [r[0] for r in found[0]], used.at)
        return self._frame(scope, used, found)
