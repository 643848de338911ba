"""Step 1 of consolidating a scope, load: its next batch of pending episodes (oldest first,
within a token budget), checksummed, with a job row opened for it and the facts it knows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from psycopg_pool import AsyncConnectionPool

from agent_memory.db import episodes as episode_repo
from agent_memory.db import facts as fact_repo
from agent_memory.db import jobs as job_repo
from agent_memory.decay import today
from agent_memory.extraction.base import Extractor, checksum
from agent_memory.extraction.prompt import format_episodes
from agent_memory.models import DecayFrom, Episode, KnownFact, Level, Scope, Share, Window
from agent_memory.usage import Usage

KNOWN_FACTS = 50  # how many current facts the extractor sees (the most important)


@dataclass
class ScopeBatch:
    """A scope's pending episodes, loaded and checksummed, with its job row."""

    scope: Scope
    episodes: list[Episode]
    checksum: str
    job_id: int
    seen_before: bool  # the last completed job had the same checksum: no LLM call needed
    # the current facts of the levels the scope reads, numbered as the prompt shows them
    known: list[KnownFact] = field(default_factory=list)
    share: Share = "exact"  # the levels the scope reads and files facts at (Scope.levels)
    # what every extraction attempt cost, retries and failures included (the batch outlives
    # the task's retries, so it is where the attempts add up)
    spent: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)  # e.g. an oversize episode that was cut
    more: bool = False  # pending episodes remain after this batch
    decay_from: DecayFrom = "import"
    # the level every fact of the batch is filed at (backfill --level); None: by the rules
    level: Level | None = None

    @property
    def episode_ids(self) -> list[int]:
        return [e.id for e in self.episodes]

    def clock(self, numbers: Iterable[int] | None = None) -> datetime:
        """Where the decay clock of facts from these episodes (1-based numbers; None: all of
        the batch's) starts, as ``decay_from`` says (see :data:`DecayFrom`): the newest of
        their conversations, or, from ``import``, no earlier than when they were stored. A
        function of the stored episodes, so a rerun of the batch sets the same clock."""
        chosen = self.episodes if numbers is None else [self.episodes[n - 1] for n in numbers]
        if self.decay_from == "conversation":
            return max(e.occurred_at for e in chosen)
        return max(max(e.occurred_at, e.created_at) for e in chosen)

    def said_at(self, numbers: Iterable[int], *, last: bool = False) -> datetime:
        """When these episodes (1-based numbers; none: the whole batch) were said: the first
        of them, or with ``last`` the last. The conversations' own times, whatever the decay
        clock: what a fact's dates record."""
        chosen = [self.episodes[n - 1] for n in numbers] or self.episodes
        return (max if last else min)(e.occurred_at for e in chosen)


async def find_scopes(
    pool: AsyncConnectionPool,
    only: Scope | None,
    limit: int,
    window: Window | None = None,
    include_waiting: bool = False,
) -> list[Scope]:
    """The scopes with pending episodes in the window (just ``only`` if given and it has
    any). A scope whose last attempt failed waits out its backoff, and a parked one waits for
    an operator, unless it is asked for by name (``only``) or ``include_waiting``."""
    async with pool.connection() as conn:
        if only is not None:
            pending = await episode_repo.load_pending(conn, only, limit=1, window=window)
            return [only] if pending else []
        return await episode_repo.pending_scopes(
            conn, limit=limit, window=window, include_waiting=include_waiting
        )


def _truncated(episode: Episode, ratio: float) -> Episode:
    """A copy of ``episode`` whose message texts are cut to ``ratio`` of their length."""
    messages = []
    for message in episode.messages:
        content = message.get("content")
        if isinstance(content, str) and len(content) > 40:
            keep = max(20, int(len(content) * ratio))
            message = {**message, "content": content[:keep] + " [...truncated]"}
        messages.append(message)
    return episode.model_copy(update={"messages": messages})


def select_batch(
    episodes: list[Episode], extractor: Extractor, budget: int
) -> tuple[list[Episode], list[str]]:
    """The oldest episodes that fit in ``budget`` tokens (at least one), and notes.

    An episode larger than the whole budget goes alone, cut to fit, with a note: it is never
    dropped silently (the stored episode keeps its full text).
    """
    chosen: list[Episode] = []
    notes: list[str] = []
    used = 0
    for episode in episodes:
        tokens = extractor.count_tokens(format_episodes([episode]))
        if tokens > budget:
            if chosen:
                break  # it goes alone, in the next batch
            cut = _truncated(episode, budget / tokens * 0.9)
            notes.append(
                f"episode {episode.id} has {tokens} tokens, over the batch budget of {budget}: "
                f"its text was cut to about {extractor.count_tokens(format_episodes([cut]))} "
                "tokens for extraction (the stored episode is unchanged)"
            )
            return [cut], notes
        if chosen and used + tokens > budget:
            break
        chosen.append(episode)
        used += tokens
    return chosen, notes


async def load_batch(
    pool: AsyncConnectionPool,
    scope: Scope,
    extractor: Extractor,
    flow_run_id: str | None,
    max_episodes: int,
    token_budget: int = 8000,
    window: Window | None = None,
    decay_from: DecayFrom = "import",
    share: Share = "exact",
    level: Level | None = None,
) -> ScopeBatch | None:
    """Load the scope's next batch of pending episodes (oldest first, within the token
    budget and the window), checksum them and open a job row for them; its facts' decay clock
    starts as ``decay_from`` says. The extractor is shown the most important current facts of
    the levels the scope reads under ``share``, each with its scope.

    Call only while holding the scope's claim: a job still 'running' then belongs to a run that
    died, and is failed here (taken over) in the same transaction that opens the new job.
    """
    async with pool.connection() as conn, conn.transaction():
        pending = await episode_repo.load_pending(conn, scope, limit=max_episodes, window=window)
        await job_repo.abandon_running(
            conn,
            scope,
            "abandoned: its run stopped (process died or lost its database connection) "
            f"and run {flow_run_id} took the scope over",
        )
        if not pending:
            return None
        chosen, notes = select_batch(pending, extractor, token_budget)
        digest = checksum(chosen)
        last = await job_repo.last_completed_checksum(conn, scope)
        job_id = await job_repo.start(conn, scope, extractor.name, flow_run_id)
        # what the scope knew when these conversations happened (a backfill replays the past:
        # a fact from March has faded by today, but not by May)
        as_of = min(today(), max(e.occurred_at for e in chosen).astimezone(UTC).date())
        current = [
            (fact, level)
            for level in scope.levels(share)
            for fact in await fact_repo.known(conn, level, KNOWN_FACTS, as_of)
        ]
    # the most important of all levels (a stable sort: the scope's own first among equals)
    current.sort(key=lambda known: -known[0][2])
    known = [
        KnownFact(n, *fact, scope=level) for n, (fact, level) in enumerate(current[:KNOWN_FACTS], 1)
    ]
    return ScopeBatch(
        scope,
        chosen,
        digest,
        job_id,
        seen_before=(last == digest),
        known=known,
        notes=notes,
        more=len(chosen) < len(pending) or len(pending) == max_episodes,
        decay_from=decay_from,
        share=share,
        level=level,
    )
