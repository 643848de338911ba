"""The Store's reads (``get`` and ``search`` without a vector index) as steps run by
`agent_memory.store.AgentMemoryStore`: what a namespace shows is its rows and, under a
memory namespace, the scope's facts no row shows (`agent_memory.db.store`)."""

from __future__ import annotations

from typing import Any, NamedTuple

from langgraph.store.base import GetOp, Item, SearchItem, SearchOp

from agent_memory.db import fusion, level_reads, store_vectors
from agent_memory.db import recall as recall_repo
from agent_memory.db import store as store_repo
from agent_memory.db.dual import Steps
from agent_memory.decay import day_index, today
from agent_memory.models import Scope
from agent_memory.settings import MemorySettings
from agent_memory.store.items import item, search_item
from agent_memory.store.namespaces import NamespaceTemplate
from agent_memory.store.ttl import refresh_steps

# a filtered ranking that keeps too few is asked again for this many times more facts, up to
_WIDEN = 4
_MAX_RANKED = 100_000


class Ranking(NamedTuple):
    """How the scope's facts are ranked: the memory settings, and the embedding model of the
    question's vector (None: no vector)."""

    memory: MemorySettings
    model: str | None


def halves(
    template: NamespaceTemplate,
    namespace: tuple[str, ...],
    exact: bool,
    params: dict[str, Any],
    rows_where: str = "TRUE",
    facts_where: str = "TRUE",
) -> list[str]:
    """The SELECTs of what a read of ``namespace`` sees (`agent_memory.db.store.items_cte`)
    under ``template``; fills ``params``."""
    binding = template.binding(namespace)
    bound = binding.bound if binding.possible and (binding.exact or not exact) else None
    params["day"] = day_index(today())
    t = template
    reading = t.reading(namespace)
    return store_repo.items_cte(
        t.labels,
        t.fields,
        t.fixed,
        bound,
        namespace=namespace,
        exact=exact,
        params=params,
        rows_where=rows_where,
        facts_where=facts_where,
        levels=reading[1] if reading else (),
    )


def get_steps(template: NamespaceTemplate, op: GetOp) -> Steps[Item | None]:
    """A ``get``: the item, or None; a TTL it has is refreshed (``op.refresh_ttl``)."""
    params: dict[str, Any] = {"key": op.key, "named": store_repo.fact_of_key(op.key)}
    parts = halves(
        template, tuple(op.namespace), True, params, "s.key = %(key)s", "m.id = %(named)s"
    )
    rows = yield from store_repo.get_steps(parts, params)
    yield from refresh_steps(op.refresh_ttl, rows)
    return item(rows[0]) if rows else None


def search_steps(
    template: NamespaceTemplate,
    ranking: Ranking,
    op: SearchOp,
    text: str,
    vector: list[float] | None,
) -> Steps[list[SearchItem]]:
    """A ``search`` without a vector index: with a question (``text``), the memory scope's
    facts by the project's ranking and the documents by full text, best first, then what
    matches nothing; without one, the latest updated first."""
    prefix = tuple(op.namespace_prefix)
    filter_params: dict[str, Any] = {}
    condition = store_repo.filter_sql(op.filter, "items", filter_params)
    params = dict(filter_params)
    parts = halves(template, prefix, False, params)
    need = op.offset + op.limit
    ranked: list[store_repo.Row] = []
    if text and need:
        reading = template.reading(prefix)
        facts: list[store_repo.Row] = []
        if reading is not None:
            levels = tuple(dict.fromkeys((reading[0], *reading[1])))
            if template.memory_scope(prefix) is None:  # a level namespace shows its levels'
                levels = reading[1]
            facts = yield from ranked_facts_steps(
                template, ranking, levels, prefix, text, vector, condition, filter_params, need
            )
        doc_params: dict[str, Any] = {"ns": list(prefix)}
        doc_condition = store_repo.filter_sql(op.filter, "m", doc_params)
        ranked = [row for row in facts if row[5]]
        ranked += yield from store_repo.ranked_documents_steps(
            doc_params, doc_condition, text, need
        )
        ranked.sort(key=lambda row: -(row[5] or 0.0))
        # what matches nothing follows: first the scope's facts, as recall orders them
        # (most important, most recent first), since a fact put through the store has no
        # vector until consolidation embeds it and may answer the question all the same;
        # then every other item, the latest updated first
        ranked += [row for row in facts if not row[5]]
    page = ranked[op.offset : need]
    if len(page) < op.limit:
        rest = yield from store_repo.latest_steps(
            parts,
            params,
            condition,
            op.limit - len(page),
            max(0, op.offset - len(ranked)),
            [row[6] for row in ranked],
        )
        page += [(*row[:5], 0.0 if text else None, row[6]) for row in rest]
    yield from refresh_steps(op.refresh_ttl, page)
    return [search_item(row) for row in page]


def ranked_facts_steps(
    template: NamespaceTemplate,
    ranking_of: Ranking,
    levels: tuple[Scope, ...],
    namespace: tuple[str, ...],
    text: str,
    vector: list[float] | None,
    condition: str,
    filter_params: dict[str, Any],
    need: int,
) -> Steps[list[store_repo.Row]]:
    """The facts of ``levels`` (the scope read first, then the levels of memory it shows)
    that match ``text`` (and ``vector``), ranked together, best first, as items that pass
    ``condition``: at least ``need`` of them when the levels have as many; when fewer match,
    the others follow, as recall orders them, with score 0."""
    m = ranking_of.memory
    limit = need
    while True:
        ranking = fusion.search_params(
            m, levels[0], text, limit, by_meaning=vector is not None, on=today()
        )
        if vector is not None:
            ranking["model"] = ranking_of.model
        if len(levels) == 1:
            rows = yield from recall_repo.ranked_steps(ranking, vector)
        else:
            rows, _ = yield from level_reads.ranked_levels_steps(ranking, levels, vector)
        scores = {fact_id: max(score, 0.0) for fact_id, _, _, score in rows}
        params: dict[str, Any] = {**filter_params, "ids": list(scores)}
        parts = halves(
            template, namespace, True, params, "s.fact_id = ANY(%(ids)s)", "m.id = ANY(%(ids)s)"
        )
        found = yield from store_repo.of_facts_steps(parts, params, condition)
        order = {fact_id: i for i, fact_id in enumerate(scores)}
        found.sort(key=lambda pair: order[pair[1]])
        matched = sum(1 for score in scores.values() if score > 0)
        if (
            matched < limit
            or limit >= _MAX_RANKED
            or sum(1 for _, fact_id in found if scores[fact_id] > 0) >= need
        ):
            return [(*row[:5], scores[fact_id], row[6]) for row, fact_id in found]
        limit *= _WIDEN


def facts_after_vectors_steps(
    template: NamespaceTemplate, op: SearchOp, found: list[SearchItem]
) -> Steps[list[SearchItem]]:
    """A vector search's page (``found``, the items of `agent_memory.store.index`),
    completed with the memory scope's facts that no item shows (consolidation's, or those
    ``add_fact`` wrote: they have no vector), after every item, with no score, the latest
    updated first: as the items kept out of the index come, so that an agent (LangMem's store
    manager) that searches with a query finds them too."""
    prefix = tuple(op.namespace_prefix)
    if len(found) >= op.limit or not template.binding(prefix).possible:
        return found
    if found or not op.offset:  # the items ran out on this page
        before = op.offset + len(found)
    else:
        item_params: dict[str, Any] = {}
        condition = store_repo.filter_sql(op.filter, "s", item_params)
        before = yield from store_vectors.count_steps(prefix, condition, item_params)
    params: dict[str, Any] = {}
    condition = store_repo.filter_sql(op.filter, "items", params)
    # the facts' halves, after the rows'
    facts = halves(template, prefix, False, params)[store_repo.row_halves(prefix, False) :]
    rows = yield from store_repo.latest_steps(
        facts, params, condition, op.limit - len(found), max(0, op.offset - before), []
    )
    return found + [search_item(row) for row in rows]
