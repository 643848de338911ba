"""Export: everything memory holds about a scope, or a person, as one JSON-ready document.

A person's export covers the scopes their erasure takes (:mod:`agent_memory.erasure`: every
scope whose user is theirs, narrowed by an agent or workflow where given) and their checkpoint
threads, each with the values of its latest checkpoint (its messages, the working memory
injected into it) as LangGraph's own saver reads them, and the facts filed at other levels
that those scopes' conversations taught (``derived_facts``), each saying whether the erasure
removes it: so the export shows what the erasure would take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import psycopg
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from agent_memory.db import derived as derived_repo
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


async def derived_documents(
    conn: psycopg.AsyncConnection[Any], scopes: Iterable[Scope]
) -> list[dict[str, Any]]:
    """The facts filed at other levels (the person's, an agent's own) that ``scopes``'
    conversations are sources of, each with where it is filed, its sources, and what erasing
    ``scopes`` does to it: ``"erasure": "removes"`` (those conversations alone support it) or
    ``"keeps"`` (another conversation does, or it was written by hand)."""
    found = await derived_repo.learned(conn, scopes)
    sources = await fact_repo.source_ids(conn, [fact_id for fact_id, _ in found])
    documents = []
    for fact_id, removed in found:
        fact = await fact_repo.get(conn, fact_id, today())
        if fact is None:  # gone since (a concurrent decay purge)
            continue
        filed = Scope(fact.user_id, fact.agent_id, fact.workflow_id)
        documents.append(
            {
                **fact.model_dump(mode="json"),
                "scope": filed.as_dict(),
                "level": filed.level,
                "source_episodes": sources.get(fact_id, []),
                "erasure": "removes" if removed else "keeps",
            }
        )
    return documents


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
