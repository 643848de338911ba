"""python -m benchmarks.store [--quick] [--items N] [--runs N]

The LangGraph Store operations on AgentMemoryStore against LangGraph's own PostgresStore (the
reference), on one fresh database (the embedded PostgreSQL unless DATABASE_URL is set; a
database named agent_memory_bench_store is created and dropped), each store holding the same
N items (--quick: 1,000) in one user's namespace: in AgentMemoryStore that is a memory
namespace, so every item is a fact. Operations are timed interleaved, in rounds, so that drift
on the machine hits both stores alike, and each store goes first in every other round (a put
that follows the other store's put measured faster than one that follows reads: see
docs/benchmarks.md, store). Prints JSON, per operation: each store's p50/p95 in ms
and ``ratio`` (AgentMemoryStore's p50 over PostgresStore's):

* put            - a new item (for AgentMemoryStore: a fact written, deduplicated, indexed)
* get            - one item by key
* search         - the namespace's 10 latest items, no query
* search_query   - 10 items for a question: AgentMemoryStore ranks them by relevance (hybrid,
                   as inject does); PostgresStore, with no index configured, ignores the query
                   and returns the latest (so it is the cost of ranking, not like for like)
* list_namespaces

and ``put_cpu``: the CPU a put costs each store, this process's (``client_ms``) and the
server's backends' (``server_ms``, read from /proc: the server on this machine), with the WAL
writer's and the other background processes' apart, in rounds that take turns
(benchmarks._cpu), and ``ratio`` of the totals. Less noisy than the wall time, which also waits
on the disk's flush at each commit.

The bounds (issue 38), at 10,000 items or more: put's ratio <= 2.5 and search_query's p50 <=
10 ms (``pass``; None at a smaller size). The other figures have none: they say what the memory
semantics cost over a plain key-value row.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import psycopg
from langgraph.store.postgres import PostgresStore
from pydantic import SecretStr

from agent_memory import MemoryManager
from agent_memory.settings import DatabaseSettings, Settings
from benchmarks._common import bench_database, emit, parser, summary
from benchmarks._cpu import ServerClock, interleaved

BENCH_DB = "agent_memory_bench_store"
PUT_RATIO_BOUND = 2.5
QUERY_P50_BOUND_MS = 10.0
NAMESPACE = ("memories", "bench-user")
WORDS = [
    "tea",
    "coffee",
    "cello",
    "marathon",
    "sister",
    "Lisbon",
    "garden",
    "nurse",
    "python",
    "cat",
    "dog",
    "bike",
    "Berlin",
    "Paris",
    "email",
    "phone",
    "vegetarian",
    "allergy",
    "peanuts",
    "jazz",
    "chess",
    "piano",
    "summer",
    "winter",
    "office",
    "remote",
]


def sentence(rng: random.Random, n: int) -> str:
    return f"User {n} " + " ".join(rng.choice(WORDS) for _ in range(8))


async def _put_cpu(dsn: str, stores: dict[str, Any], n: int) -> dict[str, Any]:
    """CPU per put of a new item, each store's, in rounds that take turns (see the module)."""
    rng = random.Random(11)

    def putting(name: str, store: Any) -> Callable[[int], Any]:
        async def put(i: int) -> None:
            store.put(NAMESPACE, f"cpu-{name}-{i}", {"content": sentence(rng, i)})

        return put

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        clock = await ServerClock.of(conn)
        figures = await interleaved(
            {name: putting(name, store) for name, store in stores.items()}, n, clock
        )
    ours, ref = figures["agent_memory"]["total_ms"], figures["postgres"]["total_ms"]
    return {**figures, "ratio": round(ours / ref, 2) if ref else None}


def run(items: int, runs: int) -> dict[str, Any]:
    rng = random.Random(7)
    with bench_database(BENCH_DB) as (_, dsn):
        settings = Settings(
            db=DatabaseSettings(url=SecretStr(dsn), pool_min_size=1, pool_max_size=4)
        )
        manager = MemoryManager.create_sync(settings=settings)
        with PostgresStore.from_conn_string(dsn) as reference:
            reference.setup()
            ours = manager.store()
            stores = {"agent_memory": ours, "postgres": reference}
            for store in stores.values():
                store.batch([])  # warm the pools
            for n in range(items):
                value = {"content": sentence(rng, n)}
                for store in stores.values():
                    store.put(NAMESPACE, f"k{n}", value)
            counter = [items]

            def put(store: Any) -> None:
                counter[0] += 1
                store.put(NAMESPACE, f"new{counter[0]}", {"content": sentence(rng, counter[0])})

            ops: dict[str, Callable[[Any], Any]] = {
                "put": put,
                "get": lambda s: s.get(NAMESPACE, f"k{rng.randrange(items)}"),
                "search": lambda s: s.search(NAMESPACE, limit=10),
                "search_query": lambda s: s.search(
                    NAMESPACE, query=f"does the user like {rng.choice(WORDS)}?", limit=10
                ),
                "list_namespaces": lambda s: s.list_namespaces(prefix=("memories",)),
            }
            samples: dict[str, dict[str, list[float]]] = {
                op: {name: [] for name in stores} for op in ops
            }
            order = list(stores.items())
            for _ in range(runs):
                # whichever store writes first after the reads pays for WAL they left unflushed
                # (docs/benchmarks.md, store): each goes first in every other round
                order.reverse()
                for op, fn in ops.items():
                    for name, store in order:
                        started = time.perf_counter()
                        fn(store)
                        samples[op][name].append((time.perf_counter() - started) * 1000)
            cpu = asyncio.run(_put_cpu(dsn, stores, max(runs * 2, 50)))
        manager.close_sync()
    figures: dict[str, Any] = {}
    for op, by_store in samples.items():
        ours_s, ref_s = summary(by_store["agent_memory"]), summary(by_store["postgres"])
        figures[op] = {
            "agent_memory": ours_s,
            "postgres": ref_s,
            "ratio": round(ours_s["p50_ms"] / ref_s["p50_ms"], 2),
        }
    bounds = {
        "put_ratio": figures["put"]["ratio"] <= PUT_RATIO_BOUND,
        "search_query_p50": figures["search_query"]["agent_memory"]["p50_ms"] <= QUERY_P50_BOUND_MS,
    }
    return {
        "items": items,
        "runs": runs,
        "operations": figures,
        "put_cpu": cpu,
        "bounds": bounds,
        "pass": all(bounds.values()) if items >= 10_000 else None,
    }


def main(argv: list[str] | None = None) -> int:
    cli = parser("store", __doc__, quick="1,000 items, 50 runs")
    cli.add_argument("--items", type=int, default=10_000)
    cli.add_argument("--runs", type=int, default=200, help="timed calls per operation")
    args = cli.parse_args(argv)
    if args.quick:
        args.items, args.runs = 1_000, 50
    return emit(run(args.items, args.runs))


if __name__ == "__main__":
    raise SystemExit(main())
