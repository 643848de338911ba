"""Export: everything memory holds about a scope, or a person, as one JSON-ready document.

A person's export covers the scopes their erasure takes (:mod:`agent_memory.erasure`: every
scope whose user is theirs, narrowed by an agent or workflow where given) and their checkpoint
threads, each with the values of its latest checkpoint (its messages, the working memory
injected into it) as LangGraph's own saver reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import psycopg
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from agent_memory.db import episodes as episode_repo
from agent_memory.db import facts as fact_repo
from agent_memory.db import store as store_repo
from agent_memory.decay import today
from agent_memory.messages import message_to_json
from agent_memory.models import Scope

# an export holds every row of the scope: no limit a person could exceed
_ALL = 2**62


async def scope_document(conn: psycopg.AsyncConnection[Any], scope: Scope) -> dict[str, Any] | None:
    """``scope``'s facts (with history and provenance), episodes and Store items; None when
    memory holds none of them."""
    facts = await fact_repo.items(conn, scope, today(), _ALL, history=True)
    episodes = await episode_repo.between(conn, scope, None, None, _ALL)
    sources = await fact_repo.source_ids(conn, [f.id for f in facts])
    stored = await store_repo.of_scope(conn, scope)
    if not facts and not episodes and not stored:
        return None
    return {
        "scope": scope.as_dict(),
        # the level of memory its facts are filed at: "user" (about the person, shared by all
        # their agents), "user_agent", "workflow", "agent" (docs/guide.md, "Levels of memory")
        "level": scope.level,
        "exported_at": datetime.now(UTC).isoformat(),
        "facts": [
            {**f.model_dump(mode="json"), "source_episodes": sources.get(f.id, [])} for f in facts
        ],
        "episodes": [e.model_dump(mode="json") for e in episodes],
        "store_items": stored,
    }


def _json(value: Any) -> Any:
    """A checkpoint's channel value, JSON-ready (messages as OpenAI-style dicts)."""
    if isinstance(value, BaseMessage):
        return message_to_json(value)
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


async def thread_documents(
    saver: BaseCheckpointSaver[Any], threads: Mapping[str, Scope]
) -> list[dict[str, Any]]:
    """Each thread's id, scope and the values of its latest checkpoint, by thread id."""
    documents = []
    for thread in sorted(threads):
        latest = await saver.aget_tuple({"configurable": {"thread_id": thread}})
        values = latest.checkpoint["channel_values"] if latest else {}
        documents.append(
            {
                "thread_id": thread,
                "scope": threads[thread].as_dict(),
                "values": {k: _json(v) for k, v in values.items() if not k.startswith("__")},
            }
        )
    return documents
