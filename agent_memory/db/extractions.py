"""The extraction cache: a model's answer for some content (by checksum), extractor and prompt
version, stored before anything it implies is written."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from agent_memory.models import Operation

GET = """
SELECT facts FROM agent_memory.extraction_cache
WHERE content_checksum = %s AND extractor = %s AND prompt_version = %s
"""
PUT = """
INSERT INTO agent_memory.extraction_cache (content_checksum, extractor, prompt_version, facts)
VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING
"""


async def get(
    conn: psycopg.AsyncConnection[Any], digest: str, extractor: str, prompt_version: str
) -> list[Operation] | None:
    """The cached operations for this content, extractor and prompt, if any."""
    cur = await conn.execute(GET, (digest, extractor, prompt_version))
    row = await cur.fetchone()
    return None if row is None else [Operation.model_validate(op) for op in row[0]]


async def put(
    conn: psycopg.AsyncConnection[Any],
    digest: str,
    extractor: str,
    prompt_version: str,
    operations: list[Operation],
) -> None:
    """Cache the operations (the first answer stored for a key stays)."""
    ops = Jsonb([op.model_dump() for op in operations])
    await conn.execute(PUT, (digest, extractor, prompt_version, ops))
