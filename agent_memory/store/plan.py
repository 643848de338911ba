"""A Store batch as `AgentMemoryStore` checks it before anything runs (see `.Plan`)."""

from __future__ import annotations

from typing import Any, NamedTuple

from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, Result, SearchOp


class Write(NamedTuple):
    """A put or delete of a batch, checked: the value as JSON text, encoded once (None for a
    delete), and for a memory item the parameters of its fact's upsert."""

    op: PutOp
    json: str | None
    fact: dict[str, Any] | None


class Plan:
    """A batch, checked whole before anything runs: its reads, its writes (the last of each
    item's), and the question vectors of its searches."""

    def __init__(self, count: int) -> None:
        self.results: list[Result] = [None] * count
        self.reads: list[tuple[int, GetOp | SearchOp | ListNamespacesOp]] = []
        self.writes: dict[tuple[tuple[str, ...], str], Write] = {}
        self.queries: dict[int, str] = {}  # search index -> its question's text
        self.vectors: dict[int, list[float] | None] = {}
        self.item_vectors: dict[tuple[tuple[str, ...], str], list[tuple[str, list[float]]]] = {}
