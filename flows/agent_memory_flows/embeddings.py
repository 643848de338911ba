"""The re-embedding flow: embed every current fact that has no embedding from the configured
model. Run it after changing ``AGENT_MEMORY_EMBEDDING_MODEL`` (``agent-memory embed``); until it
finishes, facts not yet re-embedded count as not relevant by meaning, nothing breaks. The
consolidation flow embeds new facts as it writes them, so this is not needed day to day.
"""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from pydantic import BaseModel, ConfigDict, Field

from agent_memory import progress
from agent_memory.db import embeddings as embedding_repo
from agent_memory.db.connection import resolve
from agent_memory.db.pool import open_pool
from agent_memory.embedding import make_embedder, vectors_ready
from agent_memory.errors import EmbeddingError
from agent_memory.pseudonyms import summarise
from agent_memory.settings import get_settings
from agent_memory_tasks.consolidation import embed_facts
from agent_memory_tasks.policy import configured

SUMMARY_KEY = "memory-reembed-summary"
MAX_REFUSALS_SHOWN = 20


class EmbedParams(BaseModel):
    """What one re-embedding run covers."""

    model_config = ConfigDict(extra="forbid")

    limit: int | None = Field(
        default=None, ge=1, description="facts to embed in this run, at most (None: all)"
    )
    retry_rejected: bool = Field(
        default=False,
        description="ask the model again for the facts it refused before (after raising a "
        "limit of the model, say)",
    )


@flow(name="memory-reembed", flow_run_name="re-embed facts", persist_result=False)
async def reembed_flow(
    params: EmbedParams = EmbedParams(),  # noqa: B008 - immutable in practice
) -> dict[str, Any]:
    """Embed the facts the configured embedding model has not embedded yet."""
    settings = get_settings()
    embedder = make_embedder(settings.embedding)
    if embedder is None:
        raise EmbeddingError(
            "relevance by meaning is off (AGENT_MEMORY_EMBEDDING_ENABLED=false): nothing to "
            "embed with"
        )
    reason = await asyncio.to_thread(vectors_ready, resolve(settings.db))
    if reason is not None:
        raise EmbeddingError(f"this database cannot store embeddings: {reason}")
    async with open_pool(settings, max_size=2) as pool:
        if params.retry_rejected:
            async with pool.connection() as conn:
                retried = await embedding_repo.forget_rejections(conn, embedder.model)
            get_run_logger().info("asking %s again for %d refused fact(s)", embedder.model, retried)
        if progress.watched():  # a count of every fact: only for someone who watches
            async with pool.connection() as conn:
                left = (await embedding_repo.counts(conn, embedder.model))[1]
            progress.plan("facts", left if params.limit is None else min(left, params.limit))
        progress.note("embedding")
        embed = configured(embed_facts, settings.task_retries)
        done = await embed(pool, None, embedder, "all scopes", params.limit)
        async with pool.connection() as conn:
            embedded, left, refused = await embedding_repo.counts(conn, embedder.model)
    shown = [
        {"fact_id": fact_id, "reason": reason}
        for fact_id, reason in done.refusals[:MAX_REFUSALS_SHOWN]
    ]
    summary: dict[str, Any] = {
        "model": embedder.model,
        "embedded_now": done.stored,
        "messages_embedded_now": done.snippets,
        "refused_now": done.refused,
        "embedded": embedded,
        "left": left,
        "refused": refused,
        # the reasons, for the CLI and the artifact; all of them are in the run's log
        "refusals": shown,
    }
    lines = [
        f"**{done.stored}** fact(s) embedded with `{embedder.model}`, {done.refused} refused by "
        f"it; {embedded} current fact(s) have its embedding, {left} still to do, {refused} "
        "refused.",
    ]
    if done.refusals:
        lines += ["", "| fact | why the model refused it |", "|---|---|"]
        # the model's reason may quote the fact: said by size and hash in Prefect
        for row in shown:
            said = summarise("refusal: " + str(row["reason"]))
            lines.append(f"| {row['fact_id']} | {said} |")
        if done.refused > MAX_REFUSALS_SHOWN:
            lines.append(f"\n{done.refused - MAX_REFUSALS_SHOWN} more in the run's log.")
    await acreate_markdown_artifact(
        key=SUMMARY_KEY, markdown="\n".join(lines), description="Re-embedding run"
    )
    return summary
