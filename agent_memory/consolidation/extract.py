"""Step 2 of consolidating a scope, extract: the batch's memory operations, from the cache when
this content was answered before, else from the model (outside any transaction)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

from psycopg_pool import AsyncConnectionPool

from agent_memory.consolidation.load import ScopeBatch
from agent_memory.db import extractions as extraction_repo
from agent_memory.errors import ExtractionError, TransientExtractionError
from agent_memory.extraction.base import Extraction, Extractor


async def extract_batch(
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
    bounds the model calls in flight (a cached answer does not wait for it). With a level
    forced on the batch (``batch.level``), every fact names that level (filed there where the
    scope reads it, :func:`agent_memory.levels.filing_scope`).
    """
    extraction = await _extract(pool, batch, extractor, limit)
    if extraction is None or batch.level is None:
        return extraction
    # a level forced on the run (backfill --level) names every fact's level; the cache keeps
    # the model's answer, so another run of the same content files by the rules again
    operations = [op.model_copy(update={"level": batch.level}) for op in extraction.operations]
    return replace(extraction, operations=operations)


async def _extract(
    pool: AsyncConnectionPool,
    batch: ScopeBatch,
    extractor: Extractor,
    limit: asyncio.Semaphore | None,
) -> Extraction | None:
    name, version = extractor.name, extractor.prompt_version
    async with pool.connection() as conn:
        ops = await extraction_repo.get(conn, batch.checksum, name, version)
    if ops is not None:
        return Extraction(operations=ops, extractor=name, cached=True)
    if batch.seen_before:
        return None
    try:
        async with limit if limit is not None else contextlib.nullcontext():
            levels = [level.level for level in batch.scope.levels(batch.share)]
            extraction = await extractor.extract(batch.episodes, batch.known, levels)
    except (ExtractionError, TransientExtractionError) as exc:
        batch.spent.add(exc.usage)  # the batch object outlives the task's retries
        raise
    batch.spent.add(extraction.usage)
    async with pool.connection() as conn:
        await extraction_repo.put(conn, batch.checksum, name, version, extraction.operations)
    return extraction
