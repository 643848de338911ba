"""The LangGraph Store's writes (``agent_memory.store_items``): documents, memory items and
the facts they show, and deletes; each serialized per key.

A memory item's put reads the fact the key shows, writes the new one, points the row at it and
retires the old one. Two writers of one key that interleave these steps both read the same
old fact: one of them then retires a fact that is already retired, and the fact the other
wrote stays current with no row showing it, so that the store lists it under a key of its own
(a ghost key). So a put or delete of a memory item first takes the key's row lock, inserting
the row when the key has none (:data:`_LOCK`), and reads only then: the writers of one key take
turns, whichever process they run in, and the key ends with one item and one current fact.
The lock is a row lock, held until the transaction ends, on a row of the writer's own scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

from agent_memory.db.dual import Run, Steps
from agent_memory.db.facts import SUPERSEDE, UPSERT, content_hash
from agent_memory.db.fragments import SCOPE_MATCH
from agent_memory.db.store import fact_of_key
from agent_memory.db.store_ttl import EXPIRES
from agent_memory.models import SCOPE_FIELDS, Scope

# a put's TTL (``ttl``, minutes) starts now; a put without one ends the TTL the item had
_PUT_ROW = f"""
INSERT INTO agent_memory.store_items AS s
    (namespace, key, value, fact_id, user_id, agent_id, workflow_id, expires_at, ttl_minutes)
VALUES (%(ns)s, %(key)s, %(value)s, %(fact_id)s, %(user_id)s, %(agent_id)s, %(workflow_id)s,
        {EXPIRES}, %(ttl)s)
ON CONFLICT (namespace, key) DO UPDATE SET
    value = EXCLUDED.value, fact_id = EXCLUDED.fact_id, user_id = EXCLUDED.user_id,
    agent_id = EXCLUDED.agent_id, workflow_id = EXCLUDED.workflow_id, visible = true,
    updated_at = now(), expires_at = EXCLUDED.expires_at, ttl_minutes = EXCLUDED.ttl_minutes
"""

# The key's row, locked until the transaction ends; when the key has none, a row that no other
# transaction sees until this one has written it in full (another writer of the key waits on
# it as on a locked row). ``fresh``: the key had no row.
_LOCK = """
INSERT INTO agent_memory.store_items AS s
    (namespace, key, value, user_id, agent_id, workflow_id)
VALUES (%(ns)s, %(key)s, '{}'::jsonb, %(user_id)s, %(agent_id)s, %(workflow_id)s)
ON CONFLICT (namespace, key) DO UPDATE SET updated_at = s.updated_at
RETURNING (xmax = 0) AS fresh
"""

# a delete locks the row the key has, if any (a row being inserted is a put still under way:
# the delete comes before it)
_LOCK_EXISTING = """
SELECT 1 FROM agent_memory.store_items
WHERE namespace = %(ns)s::text[] AND key = %(key)s FOR UPDATE
"""

# the fact a memory item shows now: its row's (while current), or, when the key had no row,
# the fact its key names
_SHOWN = f"""
SELECT f.id, f.content FROM agent_memory.store_items s
JOIN agent_memory.memory_items f ON f.id = s.fact_id
WHERE s.namespace = %(ns)s::text[] AND s.key = %(key)s AND f.superseded_at IS NULL
UNION ALL
SELECT m.id, m.content FROM agent_memory.memory_items m
WHERE %(fresh)s AND m.id = %(named)s AND m.{SCOPE_MATCH} AND m.superseded_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM agent_memory.store_items o WHERE o.fact_id = m.id)
LIMIT 1
"""

# a fact no other item shows any more is no longer true (kept, superseded, as history)
_RETIRE = (
    SUPERSEDE
    + "  AND NOT EXISTS (SELECT 1 FROM agent_memory.store_items o WHERE o.fact_id = %(id)s)"
)


def _locked_shown_steps(
    ns: tuple[str, ...], key: str, scope: Scope, *, put: bool
) -> Steps[tuple[tuple[int, str] | None, bool]]:
    """Lock the key (see the module), then read the fact it shows; and whether a row of the
    key was there to lock (a put always has one: it inserts it)."""
    params: dict[str, Any] = {**scope.as_dict(), "ns": list(ns), "key": key}
    if put:
        locked = yield Run(_LOCK, params, "one")
        fresh = bool(locked[0])
    else:
        fresh = (yield Run(_LOCK_EXISTING, params, "one")) is None
    row = yield Run(_SHOWN, {**params, "named": fact_of_key(key), "fresh": fresh}, "one")
    return ((int(row[0]), str(row[1])) if row else None), put or not fresh


def put_document_steps(
    ns: tuple[str, ...],
    key: str,
    value: Mapping[str, Any],
    owner: Scope | None,
    ttl: float | None = None,
) -> Steps[None]:
    """Write a document (a scope's, when ``owner``; expiring ``ttl`` minutes from now, when
    given): one statement, which locks its row."""
    parts = owner.as_dict() if owner else dict.fromkeys(SCOPE_FIELDS)
    value_params = {"value": Jsonb(dict(value)), "fact_id": None, "ttl": ttl}
    yield Run(_PUT_ROW, {"ns": list(ns), "key": key, **value_params, **parts}, "none")


def put_memory_steps(
    ns: tuple[str, ...],
    key: str,
    value: Mapping[str, Any],
    scope: Scope,
    fact: dict[str, Any],
    ttl: float | None = None,
) -> Steps[int]:
    """Write a memory item and its fact (``fact``: the parameters of the facts' upsert),
    expiring ``ttl`` minutes from now when given; a new wording replaces the fact the item
    showed, which is kept, superseded, unless another item still shows it. The fact's id."""
    shown, _ = yield from _locked_shown_steps(ns, key, scope, put=True)
    if shown is not None and content_hash(shown[1]) == fact["content_hash"]:
        fact_id = shown[0]  # the same fact, said the same way: its value alone changes
    else:
        row = yield Run(UPSERT, fact, "one")
        fact_id = int(row[0])
    yield Run(
        _PUT_ROW,
        {
            "ns": list(ns),
            "key": key,
            "value": Jsonb(dict(value)),
            "fact_id": fact_id,
            "ttl": ttl,
            **scope.as_dict(),
        },
        "none",
    )
    if shown is not None and shown[0] != fact_id:
        yield Run(
            _RETIRE,
            {**scope.as_dict(), "id": shown[0], "by": fact_id, "job_id": None, "valid_to": None},
            "none",
        )
    return fact_id


def delete_steps(ns: tuple[str, ...], key: str, scope: Scope | None) -> Steps[None]:
    """Delete an item; of a memory namespace (``scope``), its fact is invalidated too (kept,
    superseded, as history) unless another item still shows it."""
    shown, locked = (
        (yield from _locked_shown_steps(ns, key, scope, put=False))
        if scope is not None
        else (None, True)
    )
    if locked:
        # only the row locked above: one a put commits meanwhile comes after this delete, and
        # deleting it would leave the fact it shows current with no row showing it
        yield Run(
            # through a function (sql/0019): a tenant holds no DELETE right (it would allow
            # LOCK)
            "SELECT agent_memory.store_delete(%(ns)s::text[], %(key)s)",
            {"ns": list(ns), "key": key},
            "none",
        )
    if scope is not None and shown is not None:
        yield Run(
            _RETIRE,
            {**scope.as_dict(), "id": shown[0], "by": None, "job_id": None, "valid_to": None},
            "none",
        )
