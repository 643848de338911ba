"""A question's vector as a ranking statement's parameter, sent in pgvector's binary form.

Formatting 256 floats as text and parsing them back on the server cost a ranking more than
anything else on its way in; packed, the vector is about a kilobyte the server reads as it is
(``vector_recv``: its dimensions, a reserved word, then each float4, big-endian): the same
vector as the text form gave for the bundled model's float4 values; a remote model's doubles
are rounded to float4 once, where nine digits of text rounded them twice. It is sent
with no type of its own: the statement's ``%(vector)s::vector`` gives it its type, as it does
the text form, so a ranking statement must cast it to ``vector`` before it uses it any other
way (``::text``), which every one does.

Its dumper is registered on the connection a ranking runs on, once per connection (as the HNSW
queue size is set, :mod:`agent_memory.db.recall`): nothing is registered globally, and a
connection the caller made before this module was imported works as well.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Sequence
from typing import Any

from psycopg.adapt import Dumper
from psycopg.pq import Format


class QueryVector:
    """A vector in pgvector's binary form (see the module); ``values``, the floats it packs."""

    __slots__ = ("payload", "values")

    def __init__(self, vector: Sequence[float]) -> None:
        dims = len(vector)
        self.values = vector
        self.payload = struct.pack(f">HH{dims}f", dims, 0, *vector)


class _QueryVectorDumper(Dumper):
    format = Format.BINARY
    oid = 0  # the statement's cast says what it is

    def dump(self, obj: QueryVector) -> bytes:
        return obj.payload


# the connections whose adapters send QueryVector
_ready: weakref.WeakSet[Any] = weakref.WeakSet()


def sendable(conn: Any) -> None:
    """Let ``conn`` send :class:`QueryVector` parameters (once per connection)."""
    if conn not in _ready:
        conn.adapters.register_dumper(QueryVector, _QueryVectorDumper)
        _ready.add(conn)
