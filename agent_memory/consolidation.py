"""The steps of consolidating one scope, as plain async functions over a connection pool.

The Prefect tasks in ``agent_memory_tasks`` wrap these (adding retries, names and logging); the
flow in ``agent_memory_flows.consolidation`` puts them in order. Kept here so the logic is
testable and importable without Prefect.

Guarantees:

* one run per scope at a time: a run *claims* a scope with a session advisory lock held on its
  own connection (:class:`ScopeClaims`). Another run skips the scope (``busy``). If the owner
  dies, PostgreSQL drops its lock with its connection, and the next run takes the scope over,
  failing the job the dead run left ``running`` (no timeout to wait for);
* the LLM is called outside any database transaction, and its answer is cached by checksum,
  extractor and prompt version before anything else is written, so a retry or a rerun after a
  crash never pays for the same content twice;
* a scope's writes (facts with their sources, episode marks, job status and cost) commit in one
  transaction, and only episodes still pending are marked: an episode is consolidated once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agent_memory.db import episodes as episode_repo
from agent_memory.db import facts as fact_repo
from agent_memory.db import jobs as job_repo
from agent_memory.db import retries as retry_repo
from agent_memory.db.connection import Database
from agent_memory.decay import DEFAULT_REINFORCEMENT, Reinforcement, today
from agent_memory.errors import ExtractionError, TransientExtractionError
from agent_memory.extraction.base import Extraction, Extractor, Usage, checksum
from agent_memory.extraction.offline import summarize
from agent_memory.extraction.prompt import format_episodes
from agent_memory.models import DecayFrom, Episode, Fact, KnownFact, Operation, Scope, Window
from agent_memory.redact import redact
from agent_memory.settings import JobSettings

Outcome = Literal["completed", "skipped", "failed", "busy", "empty"]

_CLAIM = """
SELECT pg_try_advisory_lock(hashtextextended(agent_memory.scope_key(u, a, w), 7103))
FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS t(u, a, w, i) ORDER BY i
"""
_RELEASE = """
SELECT pg_advisory_unlock(hashtextextended(agent_memory.scope_key(u, a, w), 7103))
FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS t(u, a, w, i) ORDER BY i
"""


class ScopeClaims:
    """One run's claims on scopes: session advisory locks on a connection of its own.

    The connection lives as long as the run, so the locks disappear exactly when the run does
    (finished, crashed or killed), which is how a later run knows a 'running' job is dead. If
    the connection breaks (the database restarted), the claims are gone with it; the next
    claim reconnects. Batches already under way stay safe without their lock: a write marks
    only episodes still pending, so an overlapping run cannot consolidate one twice.
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any], database: Database) -> None:
        self.conn = conn
        self.database = database
        self._reconnecting = asyncio.Lock()

    @classmethod
    async def open(cls, database: Database) -> ScopeClaims:
        return cls(await database.aconnect(autocommit=True), database)

    async def _execute(self, query: str, params: Sequence[Any]) -> list[Any]:
        conn = self.conn
        try:
            cur = await conn.execute(query, params)
        except psycopg.OperationalError:
            if not conn.broken and not conn.closed:
                raise
            async with self._reconnecting:
                if self.conn is conn:  # the first to notice reconnects, the others reuse it
                    self.conn = await self.database.aconnect(autocommit=True)
            cur = await self.conn.execute(query, params)
        return await cur.fetchall()

    async def _each(self, query: str, scopes: Sequence[Scope]) -> list[bool]:
        """``query`` (an advisory-lock call) for each scope, in one statement, in order."""
        columns = [list(column) for column in zip(*(s.params for s in scopes), strict=True)]
        return [bool(row[0]) for row in await self._execute(query, columns)]

    async def claim(self, scope: Scope) -> bool:
        """True if this run now owns the scope; False if a live run does."""
        return (await self.claim_each([scope]))[0]

    async def claim_each(self, scopes: Sequence[Scope]) -> list[bool]:
        """:meth:`claim` for each of ``scopes``, in one round trip."""
        return await self._each(_CLAIM, scopes) if scopes else []

    async def release(self, scope: Scope) -> None:
        await self.release_each([scope])

    async def release_each(self, scopes: Sequence[Scope]) -> None:
        if scopes:
            await self._each(_RELEASE, scopes)

    async def close(self) -> None:
        await self.conn.close()


@dataclass
class ScopeBatch:
    """A scope's pending episodes, loaded and checksummed, with its job row."""

    scope: Scope
    episodes: list[Episode]
    checksum: str
    job_id: int
    seen_before: bool  # the last completed job had the same checksum: no LLM call needed
    # the scope's current facts, numbered as the prompt shows them
    known: list[KnownFact] = field(default_factory=list)
    # what every extraction attempt cost, retries and failures included (the batch outlives
    # the task's retries, so it is where the attempts add up)
    spent: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)  # e.g. an oversize episode that was cut
    more: bool = False  # pending episodes remain after this batch
    decay_from: DecayFrom = "import"

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


@dataclass
class ScopeResult:
    """How one scope's consolidation ended (one row of the run's summary artifact)."""

    scope: Scope
    outcome: Outcome
    job_id: int | None = None
    episodes: int = 0
    facts_created: int = 0
    facts_reinforced: int = 0
    facts_updated: int = 0
    facts_invalidated: int = 0
    extractor: str | None = None
    cached: bool = False
    error: str | None = None
    repairs: list[str] = field(default_factory=list)
    more: bool = False  # the scope has pending episodes after this batch
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    cost_usd: float | None = None
    batches: int = 1
    failures: int = 0  # failed attempts in a row (for a failed scope)
    parked: bool = False  # failed too often: waits for an operator (`agent-memory jobs retry`)

    def row(self) -> dict[str, Any]:
        return {
            "scope": self.scope.label,
            "outcome": self.outcome,
            "job": self.job_id,
            "batches": self.batches,
            "episodes": self.episodes,
            "facts_created": self.facts_created,
            "facts_reinforced": self.facts_reinforced,
            "facts_updated": self.facts_updated,
            "facts_invalidated": self.facts_invalidated,
            "extractor": self.extractor or "",
            "llm_calls": self.llm_calls,
            "tokens_in": self.prompt_tokens,
            "tokens_out": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "error": self.error or "",
        }


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
) -> ScopeBatch | None:
    """Load the scope's next batch of pending episodes (oldest first, within the token
    budget and the window), checksum them and open a job row for them; its facts' decay clock
    starts as ``decay_from`` says.

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
        current = await fact_repo.known(conn, scope, KNOWN_FACTS, as_of)
    known = [KnownFact(n, *fact) for n, fact in enumerate(current, 1)]
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
    )


async def cached_extraction(
    pool: AsyncConnectionPool, digest: str, extractor: Extractor
) -> Extraction | None:
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT facts FROM agent_memory.extraction_cache
               WHERE content_checksum = %s AND extractor = %s AND prompt_version = %s""",
            (digest, extractor.name, extractor.prompt_version),
        )
        row = await cur.fetchone()
    if row is None:
        return None
    operations = [Operation.model_validate(op) for op in row[0]]
    return Extraction(operations=operations, extractor=extractor.name, cached=True)


async def store_extraction(
    pool: AsyncConnectionPool, digest: str, extractor: Extractor, extraction: Extraction
) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            """INSERT INTO agent_memory.extraction_cache
                   (content_checksum, extractor, prompt_version, facts)
               VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING""",
            (
                digest,
                extractor.name,
                extractor.prompt_version,
                Jsonb([op.model_dump() for op in extraction.operations]),
            ),
        )


async def extract(
    pool: AsyncConnectionPool,
    batch: ScopeBatch,
    extractor: Extractor,
    limit: asyncio.Semaphore | None = None,
) -> Extraction | None:
    """The batch's facts: from the cache when this content was answered before, else the model.

    The model's answer is cached before anything else is written, so a retry of the write step
    (or a rerun after a crash) never calls the model again for the same content. Content the
    scope's last completed job already consolidated (the same conversation recorded again) is
    never sent to the model: its cached facts are written again (reinforcing them, or bringing
    back what decay purged), or, with no cached answer, it is skipped (None). ``limit``
    bounds the model calls in flight (a cached answer does not wait for it).
    """
    cached = await cached_extraction(pool, batch.checksum, extractor)
    if cached is not None or batch.seen_before:
        return cached
    try:
        async with limit if limit is not None else contextlib.nullcontext():
            extraction = await extractor.extract(batch.episodes, batch.known)
    except (ExtractionError, TransientExtractionError) as exc:
        batch.spent.add(exc.usage)  # the batch object outlives the task's retries
        raise
    batch.spent.add(extraction.usage)
    await store_extraction(pool, batch.checksum, extractor, extraction)
    return extraction


async def write(
    pool: AsyncConnectionPool,
    batch: ScopeBatch,
    extraction: Extraction | None,
    reinforce: Reinforcement = DEFAULT_REINFORCEMENT,
) -> ScopeResult:
    """Upsert facts (with their source episodes), mark episodes and finish the job, in one
    transaction.

    ``extraction`` is None for a batch whose content was already consolidated (checksum seen):
    its episodes are marked and the job is ``skipped``. If another run marked any of these
    episodes meanwhile, nothing is written and the job is ``skipped`` too.
    """
    scope = batch.scope
    usage = batch.spent
    async with pool.connection() as conn, conn.transaction():
        # a decay-factor change (rebase) must not interleave with ranks computed here
        await conn.execute("SELECT factor FROM agent_memory.decay_policy FOR SHARE")
        # the episodic tier: every consolidated episode gets its summary (the model's, or the
        # deterministic one when the model gave none or no call was needed), set as it is marked
        given = extraction.summaries if extraction is not None else {}
        summaries = {
            e.id: given.get(n) or summarize(e) for n, e in enumerate(batch.episodes, start=1)
        }
        marked = await episode_repo.mark_consolidated(conn, summaries, batch.job_id)
        if marked != len(batch.episodes):
            ours = await episode_repo.count_marked_by(conn, batch.episode_ids, batch.job_id)
            if ours == len(batch.episodes):
                # a retry after our own commit whose acknowledgement was lost: already done
                raise _AlreadyDone()
            raise _Overlap(marked)
        applied = Applied()
        status: Literal["completed", "skipped"] = "skipped"
        if extraction is not None:
            applied = await _apply(conn, batch, extraction, reinforce)
            status = "completed"
        await job_repo.finish(
            conn,
            batch.job_id,
            status,
            episodes=len(batch.episodes),
            facts=applied.created,
            updated=applied.updated,
            invalidated=applied.invalidated,
            checksum=batch.checksum,
            usage=usage,
            model=extraction.extractor if extraction else None,
        )
        await retry_repo.clear(conn, scope)  # a failure streak ends with a consolidation
    return ScopeResult(
        scope=scope,
        outcome=status,
        job_id=batch.job_id,
        episodes=len(batch.episodes),
        facts_created=applied.created,
        facts_reinforced=applied.reinforced,
        facts_updated=applied.updated,
        facts_invalidated=applied.invalidated,
        extractor=extraction.extractor if extraction else None,
        cached=bool(extraction and extraction.cached),
        repairs=batch.notes + (extraction.repairs if extraction else []),
        more=batch.more,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        llm_calls=usage.calls,
        cost_usd=usage.cost_usd,
    )


KNOWN_FACTS = 50  # how many current facts the extractor sees (the most important)


def merge(scope: Scope, results: list[ScopeResult]) -> ScopeResult:
    """One scope's batches as one summary row: failed if any batch failed."""
    if len(results) == 1:
        return results[0]
    outcomes = [r.outcome for r in results]
    outcome: Outcome = next(
        (o for o in ("failed", "completed", "skipped") if o in outcomes), outcomes[-1]
    )
    costs = [r.cost_usd for r in results if r.cost_usd is not None]
    return ScopeResult(
        scope=scope,
        outcome=outcome,
        job_id=results[-1].job_id,
        episodes=sum(r.episodes for r in results),
        facts_created=sum(r.facts_created for r in results),
        facts_reinforced=sum(r.facts_reinforced for r in results),
        facts_updated=sum(r.facts_updated for r in results),
        facts_invalidated=sum(r.facts_invalidated for r in results),
        extractor=next((r.extractor for r in results if r.extractor), None),
        error=next((r.error for r in results if r.error), None),
        repairs=[x for r in results for x in r.repairs],
        prompt_tokens=sum(r.prompt_tokens for r in results),
        completion_tokens=sum(r.completion_tokens for r in results),
        llm_calls=sum(r.llm_calls for r in results),
        cost_usd=sum(costs) if costs else None,
        batches=len(results),
    )


@dataclass
class Applied:
    """What a batch's operations did to the scope's memory."""

    created: int = 0
    reinforced: int = 0
    updated: int = 0
    invalidated: int = 0


def _by_source(
    batch: ScopeBatch, ops: Sequence[Operation]
) -> list[tuple[list[Fact], list[int], int]]:
    """The facts the operations write, one per content (the highest importance given, the
    episodes that said it merged), grouped by the episodes they come from (1-based numbers;
    a fact whose extractor named none comes from the whole batch), with how many independent
    mentions each group's facts had: the conversations named (one when none was)."""
    whole = list(range(1, len(batch.episodes) + 1))
    said: dict[bytes, tuple[Fact, set[int]]] = {}
    for op in ops:
        if op.op not in ("add", "update"):
            continue
        fact, key = op.fact, fact_repo.content_hash(op.fact.content)
        best, numbers = said.get(key, (fact, set()))
        if fact.importance > best.importance:
            fact, best = best, fact
        if best.kind == "general" and fact.kind != "general":
            best = best.model_copy(update={"kind": fact.kind})
        # numbers outside the batch cannot come from a parsed answer; never index past it
        named = {n for n in op.sources if n <= len(batch.episodes)}
        said[key] = (best, numbers | named)
    groups: dict[tuple[int, ...], list[Fact]] = {}
    for fact, numbers in said.values():
        groups.setdefault(tuple(sorted(numbers)), []).append(fact)
    return [
        (facts, list(numbers) or whole, max(len(numbers), 1)) for numbers, facts in groups.items()
    ]


async def _apply(
    conn: Any, batch: ScopeBatch, extraction: Extraction, reinforce: Reinforcement
) -> Applied:
    """Apply the operations: write facts, then supersede what updates replaced and deletes
    invalidated. The superseded facts stay, marked with when and by which fact and job.

    Each fact is written with the episodes it comes from as its sources, and its decay clock
    starts at theirs (:meth:`ScopeBatch.clock`), not at the batch's newest."""
    ops = extraction.operations
    written = fact_repo.UpsertResult()
    for facts, numbers, mentions in _by_source(batch, ops):
        group = await fact_repo.upsert(
            conn,
            batch.scope,
            facts,
            batch.clock(numbers),
            batch.job_id,
            [batch.episodes[n - 1].id for n in numbers],
            boost=reinforce.boost,
            mentions=mentions,
            growth=reinforce.growth,
            valid_from=batch.said_at(numbers),
        )
        written.created += group.created
        written.reinforced += group.reinforced
        written.ids.update(group.ids)
    applied = Applied(created=written.created, reinforced=written.reinforced)
    for op in ops:
        target = op.target
        if target is None and op.replaces is not None:  # a fact of this batch, written above
            target = written.ids.get(fact_repo.content_hash(op.replaces))
        if op.op not in ("update", "delete") or target is None:
            continue
        by = written.ids.get(fact_repo.content_hash(op.content)) if op.content else None
        if by == target:  # "updated" to the same fact: a reinforcement, nothing to supersede
            continue
        # it stopped being true when the conversation that changed it was had
        named = [n for n in op.sources if n <= len(batch.episodes)]
        until = batch.said_at(named, last=True)
        if await fact_repo.supersede(conn, batch.scope, target, by, batch.job_id, until):
            if op.op == "update":
                applied.updated += 1
            else:
                applied.invalidated += 1
    return applied


class _AlreadyDone(Exception):
    """This job's write committed before (its acknowledgement was lost); nothing to redo."""


class _Overlap(Exception):
    """Another run consolidated some of this batch's episodes first."""

    def __init__(self, marked: int) -> None:
        super().__init__(f"{marked} episodes were still pending; another run took the rest")


async def write_or_yield(
    pool: AsyncConnectionPool,
    batch: ScopeBatch,
    extraction: Extraction | None,
    reinforce: Reinforcement = DEFAULT_REINFORCEMENT,
) -> ScopeResult:
    """:func:`write`, turning an overlap with another run into a ``skipped`` job."""
    try:
        return await write(pool, batch, extraction, reinforce)
    except _AlreadyDone:
        async with pool.connection() as conn:
            job = await job_repo.get(conn, batch.job_id)
        assert job is not None
        return ScopeResult(
            batch.scope,
            "completed",
            batch.job_id,
            episodes=job.episodes_processed,
            facts_created=job.facts_created,
            extractor=job.extractor,
        )
    except _Overlap as overlap:
        async with pool.connection() as conn:
            await job_repo.finish(conn, batch.job_id, "skipped", error=f"overlap: {overlap}")
        return ScopeResult(batch.scope, "skipped", batch.job_id, error=f"overlap: {overlap}")


async def fail(
    pool: AsyncConnectionPool,
    scope: Scope,
    job_id: int | None,
    error: BaseException,
    secrets: list[str | None],
    policy: JobSettings,
    batch: ScopeBatch | None = None,
) -> ScopeResult:
    """Record a failed scope: its job row says why and what it cost, ``policy`` when it is
    tried again; its episodes stay pending."""
    message = redact(f"{type(error).__name__}: {error}", secrets)
    spent = batch.spent if batch is not None else Usage()
    failure = None
    if job_id is not None:
        async with pool.connection() as conn, conn.transaction():
            await job_repo.finish(conn, job_id, "failed", error=message, usage=spent)
            failure = await retry_repo.record_failure(
                conn,
                scope,
                job_id,
                message,
                max_attempts=policy.attempts,
                first_wait_s=policy.backoff_s,
                max_wait_s=policy.backoff_max_s,
            )
    return ScopeResult(
        scope,
        "failed",
        job_id,
        error=message,
        failures=failure.failures if failure else 0,
        parked=failure.parked if failure else False,
        llm_calls=spent.calls,
        prompt_tokens=spent.prompt_tokens,
        completion_tokens=spent.completion_tokens,
        cost_usd=spent.cost_usd,
    )
