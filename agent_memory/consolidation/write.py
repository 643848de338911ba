"""Step 3 of consolidating a scope, write: the facts (with their source episodes), the episodes'
marks and summaries, and the job's status and cost, in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg_pool import AsyncConnectionPool

from agent_memory.consolidation.load import ScopeBatch
from agent_memory.consolidation.results import ScopeResult
from agent_memory.db import decay as decay_repo
from agent_memory.db import episodes as episode_repo
from agent_memory.db import facts as fact_repo
from agent_memory.db import failures as failure_repo
from agent_memory.db import jobs as job_repo
from agent_memory.db import term_counts
from agent_memory.decay import DEFAULT_REINFORCEMENT, Reinforcement
from agent_memory.extraction.base import Extraction
from agent_memory.extraction.summary import episode_summary
from agent_memory.levels import filing_scope
from agent_memory.models import Fact, Operation, Scope


async def write_batch(
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
        await decay_repo.hold_decay_factor(conn)
        # the episodic tier: every consolidated episode gets its summary (the model's, or the
        # deterministic one when the model gave none or no call was needed), set as it is marked
        given = extraction.summaries if extraction is not None else {}
        summaries = {
            e.id: given.get(n) or episode_summary(e) for n, e in enumerate(batch.episodes, start=1)
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
        await failure_repo.clear(conn, scope)  # a failure streak ends with a consolidation
        # the scope's full-text statistics: what this batch and the turns since the last wrote
        await term_counts.compact(conn, scope)
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


@dataclass
class Applied:
    """What a batch's operations did to the scope's memory."""

    created: int = 0
    reinforced: int = 0
    updated: int = 0
    invalidated: int = 0


def _filed(batch: ScopeBatch, ops: Sequence[Operation]) -> list[Scope]:
    """The scope each operation's fact is filed under (agent_memory.levels): the level the
    extractor named, else that of the fact it replaces (a known fact's, or one this answer
    adds), else by its kind."""
    known = {k.fact_id: k.scope for k in batch.known}
    added: dict[bytes, Scope] = {}
    filed: list[Scope] = []
    for op in ops:
        replaced = None
        if op.op == "update" and op.target is not None:
            replaced = known.get(op.target)
        elif op.op == "update" and op.replaces is not None:
            replaced = added.get(fact_repo.content_hash(op.replaces))
        scope = filing_scope(batch.scope, batch.share, op.kind, op.level, replaced)
        if op.op == "add" and op.content is not None:
            added.setdefault(fact_repo.content_hash(op.content), scope)
        filed.append(scope)
    return filed


def _by_source(
    batch: ScopeBatch, ops: Sequence[Operation], filed: Sequence[Scope]
) -> list[tuple[Scope, list[Fact], list[int], int]]:
    """The facts the operations write, one per content and scope (the highest importance
    given, the episodes that said it merged), grouped by the scope they are filed under and the
    episodes they come from (1-based numbers; a fact whose extractor named none comes from the
    whole batch), with how many independent mentions each group's facts had: the
    conversations named (one when none was)."""
    whole = list(range(1, len(batch.episodes) + 1))
    said: dict[tuple[Scope, bytes], tuple[Fact, set[int]]] = {}
    for op, scope in zip(ops, filed, strict=True):
        if op.op not in ("add", "update"):
            continue
        fact, key = op.fact, (scope, fact_repo.content_hash(op.fact.content))
        best, numbers = said.get(key, (fact, set()))
        if fact.importance > best.importance:
            fact, best = best, fact
        if best.kind == "general" and fact.kind != "general":
            best = best.model_copy(update={"kind": fact.kind})
        # numbers outside the batch cannot come from a parsed answer; never index past it
        named = {n for n in op.sources if n <= len(batch.episodes)}
        said[key] = (best, numbers | named)
    groups: dict[tuple[Scope, tuple[int, ...]], list[Fact]] = {}
    for (scope, _), (fact, numbers) in said.items():
        groups.setdefault((scope, tuple(sorted(numbers))), []).append(fact)
    return [
        (scope, facts, list(numbers) or whole, max(len(numbers), 1))
        for (scope, numbers), facts in groups.items()
    ]


async def _apply(
    conn: psycopg.AsyncConnection[Any],
    batch: ScopeBatch,
    extraction: Extraction,
    reinforce: Reinforcement,
) -> Applied:
    """Apply the operations: write facts, each under the level it is filed at, then supersede
    what updates replaced and deletes invalidated, each at its own level. The superseded facts
    stay, marked with when and by which fact and job.

    Each fact is written with the episodes it comes from as its sources (whose scopes say
    exactly where it was learned), and its decay clock starts at theirs
    (:meth:`ScopeBatch.clock`), not at the batch's newest."""
    ops = extraction.operations
    filed = _filed(batch, ops)
    written: dict[tuple[Scope, bytes], int] = {}
    applied = Applied()
    for scope, facts, numbers, mentions in _by_source(batch, ops, filed):
        group = await fact_repo.upsert(
            conn,
            scope,
            facts,
            batch.clock(numbers),
            batch.job_id,
            [batch.episodes[n - 1].id for n in numbers],
            boost=reinforce.boost,
            mentions=mentions,
            growth=reinforce.growth,
            valid_from=batch.said_at(numbers),
        )
        applied.created += group.created
        applied.reinforced += group.reinforced
        written.update({(scope, key): fact_id for key, fact_id in group.ids.items()})
    known = {k.fact_id: k.scope or batch.scope for k in batch.known}
    in_batch = {key: (fact_id, scope) for (scope, key), fact_id in written.items()}
    for op, scope in zip(ops, filed, strict=True):
        if op.op not in ("update", "delete"):
            continue
        target: int | None
        if op.target is not None:  # a known fact, at the level it is filed
            target, level = op.target, known.get(op.target, batch.scope)
        elif op.replaces is not None:  # a fact of this batch, written above
            target, level = in_batch.get(fact_repo.content_hash(op.replaces), (None, scope))
        else:
            continue
        if target is None:
            continue
        by = written.get((scope, fact_repo.content_hash(op.content))) if op.content else None
        if by == target:  # "updated" to the same fact: a reinforcement, nothing to supersede
            continue
        # it stopped being true when the conversation that changed it was had
        named = [n for n in op.sources if n <= len(batch.episodes)]
        until = batch.said_at(named, last=True)
        if await fact_repo.supersede(conn, level, target, by, batch.job_id, until):
            if op.op == "update":
                applied.updated += 1
            else:
                applied.invalidated += 1
    for scope in {scope for scope, _ in written} - {batch.scope}:
        await term_counts.compact(conn, scope)  # the levels' statistics (the scope's: below)
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
    """:func:`write_batch`, turning an overlap with another run into a ``skipped`` job."""
    try:
        return await write_batch(pool, batch, extraction, reinforce)
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
