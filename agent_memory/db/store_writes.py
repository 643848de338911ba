"""The LangGraph Store's writes (``agent_memory.store_items``): documents, memory items and
the facts they show, and deletes; each serialized per key.

A memory item's put reads the fact the key shows, writes the new one, points the row at it and
retires the old one. Two writers of one key that interleave these steps both read the same
old fact: one of them then retires a fact that is already retired, and the fact the other
wrote stays current with no row showing it, so that the store lists it under a key of its own
(a ghost key). So a put or delete of a memory item first takes the key's row lock and reads
only then: the writers of one key take turns, whichever process they run in, and the key ends
with one item and one current fact. The lock is a row lock, held until the transaction ends,
on a row of the writer's own scope. A put is one call of ``agent_memory.store_put_memory``
(sql/0030_store_put_cheaper.sql), which does all of it; a delete, the statements below.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.db.dual import Run, Steps
from agent_memory.db.fragments import SCOPE_KEY, SCOPE_MATCH
from agent_memory.db.store import fact_of_key
from agent_memory.db.store_ttl import EXPIRES
from agent_memory.models import SCOPE_FIELDS, Scope

# a put's TTL (``ttl``, minutes) starts now; a put without one ends the TTL the item had
_PUT_ROW = f"""
INSERT INTO agent_memory.store_items AS s
    (namespace, key, value, fact_id, user_id, agent_id, workflow_id, expires_at, ttl_minutes)
VALUES (%(ns)s::text[], %(key)s, %(value)s::jsonb, %(fact_id)s, %(user_id)s, %(agent_id)s,
        %(workflow_id)s, {EXPIRES}, %(ttl)s)
ON CONFLICT (namespace, key) DO UPDATE SET
    value = EXCLUDED.value, fact_id = EXCLUDED.fact_id, user_id = EXCLUDED.user_id,
    agent_id = EXCLUDED.agent_id, workflow_id = EXCLUDED.workflow_id, visible = true,
    updated_at = now(), expires_at = EXCLUDED.expires_at, ttl_minutes = EXCLUDED.ttl_minutes
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
WHERE %(fresh)s AND %(named)s::bigint IS NOT NULL  -- (a one-time filter: else it scans)
  AND m.id = %(named)s AND m.{SCOPE_MATCH} AND m.superseded_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM agent_memory.store_items o WHERE o.fact_id = m.id)
LIMIT 1
"""

# a fact no other item shows any more is no longer true (kept, superseded, as history)
_RETIRE = f"""
SELECT agent_memory.store_retire(%(id)s::bigint, NULL, {SCOPE_KEY})
"""

_PUT_MEMORY = """
SELECT agent_memory.store_put_memory(
    %(ns)s::text[], %(key)s, %(value)s::jsonb, %(ttl)s::float8, %(named)s::bigint,
    %(user_id)s, %(agent_id)s, %(workflow_id)s, %(content)s, %(content_hash)s,
    %(importance)s::float8, %(at)s, %(kind)s, %(mentions)s::integer, %(boost)s::float8,
    %(growth)s::float8, %(max_half_life)s::float8, %(valid_from)s)
"""


def text_array(labels: Sequence[str]) -> str:
    """``labels`` as a PostgreSQL array literal, for a ``%(name)s::text[]`` placeholder: a
    string is sent as it is, where psycopg's list adapter inspects every list it is given,
    which is a share of a put's time on the client (docs/benchmarks.md, store)."""
    quoted = (label.replace("\\", "\\\\").replace('"', '\\"') for label in labels)
    return "{" + ",".join(f'"{label}"' for label in quoted) + "}"


def _locked_shown_steps(
    ns: tuple[str, ...], key: str, scope: Scope
) -> Steps[tuple[tuple[int, str] | None, bool]]:
    """Lock the key's row, if it has one (see the module), then read the fact it shows; and
    whether there was a row to lock."""
    params: dict[str, Any] = {**scope.as_dict(), "ns": list(ns), "key": key}
    fresh = (yield Run(_LOCK_EXISTING, params, "one")) is None
    row = yield Run(_SHOWN, {**params, "named": fact_of_key(key), "fresh": fresh}, "one")
    return ((int(row[0]), str(row[1])) if row else None), not fresh


def put_document_steps(
    ns: tuple[str, ...],
    key: str,
    value: str,
    owner: Scope | None,
    ttl: float | None = None,
) -> Steps[None]:
    """Write a document of JSON text ``value`` (a scope's, when ``owner``; expiring ``ttl``
    minutes from now, when given): one statement, which locks its row."""
    parts = owner.as_dict() if owner else dict.fromkeys(SCOPE_FIELDS)
    value_params = {"value": value, "fact_id": None, "ttl": ttl}
    yield Run(_PUT_ROW, {"ns": text_array(ns), "key": key, **value_params, **parts}, "none")


def put_memory_steps(
    ns: tuple[str, ...],
    key: str,
    value: str,
    scope: Scope,
    fact: dict[str, Any],
    ttl: float | None = None,
) -> Steps[int]:
    """Write a memory item of JSON text ``value`` and its fact (``fact``: the parameters of
    the facts' upsert), expiring ``ttl`` minutes from now when given; a new wording replaces
    the fact the item showed, which is kept, superseded, unless another item still shows it:
    one statement (agent_memory.store_put_memory, sql/0030). The fact's id."""
    params = {
        **fact,
        "ns": text_array(ns),
        "key": key,
        "value": value,
        "ttl": ttl,
        "named": fact_of_key(key),
    }
    row = yield Run(_PUT_MEMORY, params, "one")
    return int(row[0])


def delete_steps(ns: tuple[str, ...], key: str, scope: Scope | None) -> Steps[None]:
    """Delete an item; of a memory namespace (``scope``), its fact is invalidated too (kept,
    superseded, as history) unless another item still shows it."""
    shown, locked = (
        (yield from _locked_shown_steps(ns, key, scope)) if scope is not None else (None, True)
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
        yield Run(_RETIRE, {**scope.as_dict(), "id": shown[0]}, "none")
