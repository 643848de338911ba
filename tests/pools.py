"""Test settings for a MemoryManager with a pool of its own size."""

from __future__ import annotations

from typing import Any

from agent_memory.settings import DatabaseSettings, Settings


def with_pool(settings: Settings, connections: int = 1, **db: Any) -> Settings:
    """``settings`` with a pool of exactly ``connections`` connections and these other
    database settings (e.g. ``generic_plans=False``)."""
    fields = {
        **settings.db.model_dump(),
        "pool_min_size": connections,
        "pool_max_size": connections,
        **db,
    }
    return settings.model_copy(update={"db": DatabaseSettings(**fields)})
