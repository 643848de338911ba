"""The store's rows (`agent_memory.db.store.Row`) as LangGraph's ``Item`` and
``SearchItem``."""

from __future__ import annotations

from langgraph.store.base import Item, SearchItem

from agent_memory.db import store as store_repo

__all__ = ["item", "search_item"]


def item(row: store_repo.Row) -> Item:
    return Item(namespace=row[0], key=row[1], value=row[2], created_at=row[3], updated_at=row[4])


def search_item(row: store_repo.Row) -> SearchItem:
    return SearchItem(
        namespace=row[0],
        key=row[1],
        value=row[2],
        created_at=row[3],
        updated_at=row[4],
        score=row[5],
    )
