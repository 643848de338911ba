"""The synthetic facts the inject, decay, analytics and snippets benchmarks load: N facts over
M scopes drawn in SQL (LOAD, :func:`load_facts`), the scopes they fall in (:func:`scope_of`),
questions over the same vocabulary (:func:`question`), and the bundled model's embeddings and
HNSW indexes over them (:func:`embed_locally`, :func:`build_ann_indexes`).

Each fact's content is 3-5 words of a fixed 211-word vocabulary plus 'fact <n>', so a
full-text question matches a few facts of a scope, not all of them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from agent_memory.db import ann_indexes
from agent_memory.models import Scope

# Distinct English-ish words, each its own lexeme under the 'english' configuration and none a
# stop word. 211 is prime, so no scope count is a multiple of it by accident of round numbers.
_WORDS = """
anchor apple archive arrow autumn badge bakery balloon bamboo banner barrel basket beacon
bicycle blanket bottle bracelet bridge bucket butter cabin cactus camera canal candle canyon
carpet castle cellar cherry chimney circus citrus cloud clover coffee comet compass copper
coral cotton cradle crystal cupboard curtain cushion dagger daisy desert diamond dolphin
dragon drum eagle elbow engine falcon feather fence fiddle forest fossil fountain garden
garlic ginger glacier glove granite guitar hammer harbor harvest helmet hermit honey horizon
iceberg island ivory jacket jasmine jelly jungle kettle kitten ladder lagoon lantern lemon
library lighthouse lizard locket lumber magnet mango marble meadow melon mirror monastery
mosaic mountain mushroom needle nectar noodle oasis ocean olive onion orchard otter oyster
paddle palace panther parrot pebble pepper piano pillow pirate planet pocket pottery puzzle
pyramid quarry quartz quilt rabbit radish railway rainbow raven ribbon rocket saddle saffron
sailor salmon sandal satchel scarf scooter shadow shovel silver sketch sleigh spider sponge
squirrel statue stirrup summit sunflower swamp sword tablet tangerine teapot telescope
temple thimble thunder tiger timber tomato tractor trumpet tulip tunnel turtle umbrella
unicorn valley velvet violin volcano wagon walnut walrus wardrobe waterfall whistle willow
window wizard wolf yacht yogurt zebra zephyr acorn almond biscuit blizzard cinnamon compost
lobster pumpkin snorkel tornado beetle cobweb domino emerald falafel
"""
VOCABULARY = _WORDS.split()
N_WORDS = len(VOCABULARY)
WORDS_ARRAY = "ARRAY[" + ", ".join(f"'{w}'" for w in VOCABULARY) + "]"


def _word(multiplier: int) -> str:
    """SQL for one word of fact g; the g / N_WORDS term shifts the pick between consecutive runs
    of N_WORDS facts, so the facts of one scope do not all get the same words."""
    return f"v.words[1 + (g * {multiplier} + g / {N_WORDS}) %% {N_WORDS}]"


# Scope s: user 'user-s'; agent set for even s; workflow set for s divisible by 3, so the data
# has NULL parts in every combination the scope index must get right.
# Facts of every kind, said in one to three conversations: their half-lives (the policy's for
# the kind, doubled per further mention) and expiry days are what consolidation would store.
LOAD = f"""
INSERT INTO agent_memory.memory_items
    (user_id, agent_id, workflow_id, content, content_hash, importance, importance_at,
     kind, mentions, half_life, expires_day)
SELECT 'user-' || s,
       CASE WHEN s %% 2 = 0 THEN 'agent-' || (s %% 5) END,
       CASE WHEN s %% 3 = 0 THEN 'wf-' || (s %% 11) END,
       -- 3-5 vocabulary words and 'fact g', e.g. 'lantern mosaic walrus fact 42'
       concat_ws(' ', {_word(7)}, {_word(13)}, {_word(31)},
                 CASE WHEN g %% 3 >= 1 THEN {_word(57)} END,
                 CASE WHEN g %% 3 = 2 THEN {_word(91)} END,
                 'fact ' || g),
       sha256(('fact ' || g)::bytea),
       imp,
       at,
       kind,
       mentions,
       h,
       agent_memory.expiry(imp, agent_memory.day_index(at), h, p.purge_below)
FROM (
    SELECT g, s, imp, at, kind, mentions,
           (p.half_lives->>kind)::float8 * 2 ^ (mentions - 1) AS h
    FROM (
        SELECT g, g %% %(scopes)s AS s,
               0.06 + random() * 0.94 AS imp,
               now() - (random() * 60) * interval '1 day' AS at,
               (ARRAY['identity', 'preference', 'situation', 'event', 'plan', 'general'])
                   [1 + g %% 6] AS kind,
               1 + (g / 6) %% 3 AS mentions
        FROM generate_series(1, %(facts)s::bigint) AS g
    ) AS drawn
    CROSS JOIN agent_memory.decay_policy AS p
) AS rows
CROSS JOIN agent_memory.decay_policy AS p
CROSS JOIN (SELECT {WORDS_ARRAY} AS words) AS v
"""

# the model the vectors of embed_locally are stored as, unless told otherwise
EMBED_MODEL = "bench-embed"


def load_facts(conn: psycopg.Connection[Any], facts: int, scopes: int) -> float:
    """``facts`` facts over ``scopes`` scopes (LOAD), vacuumed and analysed as autovacuum
    would leave them; the seconds it took."""
    started = time.perf_counter()
    conn.execute(LOAD, {"facts": facts, "scopes": scopes})
    conn.execute("VACUUM ANALYZE agent_memory.memory_items")
    return time.perf_counter() - started


def scope_of(s: int) -> Scope:
    """The scope LOAD puts fact g in for s = g % scopes."""
    return Scope(
        f"user-{s}",
        f"agent-{s % 5}" if s % 2 == 0 else None,
        f"wf-{s % 11}" if s % 3 == 0 else None,
    )


def question(rng: random.Random) -> str:
    """A question of 2-3 vocabulary words among stop words, as a user might ask it."""
    words = rng.sample(VOCABULARY, rng.choice((2, 3)))
    if len(words) == 2:
        return f"what about the {words[0]} and {words[1]}?"
    return f"what about the {words[0]}, the {words[1]} and a {words[2]}?"


def embed_locally(
    conn: psycopg.Connection[Any],
    items: str,
    embeddings: str,
    key: str,
    model: str = EMBED_MODEL,
    *,
    vectors: Callable[[list[str]], Sequence[Sequence[float]]] | None = None,
    user: str | None = None,
) -> int:
    """Embed every row of ``items`` (of ``user``'s scopes, when given) into ``embeddings``
    (as the flows would, as ``model``), by ``vectors`` (default: the bundled model): real
    vectors, so an HNSW index meets the structure real text has (random vectors are its
    worst case). How many."""
    if vectors is None:
        from agent_memory.local_embedding import load

        bundled = load()

        def vectors(texts: list[str]) -> Sequence[Sequence[float]]:
            return bundled.embed(texts, norm=True)  # type: ignore[no-any-return]

    only = "" if user is None else " WHERE user_id = %(user)s"
    rows = conn.execute(
        f"SELECT id, scope_key, content FROM agent_memory.{items}{only}", {"user": user}
    ).fetchall()
    with conn.cursor().copy(
        f"COPY agent_memory.{embeddings} ({key}, scope_key, model, embedding) FROM STDIN"
    ) as copy:
        for start in range(0, len(rows), 4096):
            batch = rows[start : start + 4096]
            for (row_id, scope_key, _), vector in zip(
                batch, vectors([r[2] for r in batch]), strict=True
            ):
                text = "[" + ",".join(f"{x:.6g}" for x in vector) + "]"
                copy.write_row((row_id, scope_key, model, text))
    return len(rows)


def build_ann_indexes(dsn: str, kind: str, scopes: list[Scope], model: str) -> float:
    """The HNSW indexes the flows would build for these scopes (those large enough); seconds."""
    import asyncio

    from agent_memory.settings import EmbeddingSettings

    min_rows = EmbeddingSettings().ann_min_rows

    async def build() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for scope in scopes:
                await ann_indexes.ensure_ann_index(conn, kind, scope, model, min_rows)

    started = time.perf_counter()
    asyncio.run(build())
    return time.perf_counter() - started
