"""What inject sees of the decay (benchmarks/decay.py): the current importance it returns,
checked against the decay arithmetic done in Python, and its latency from another process
while a decay runs."""

from __future__ import annotations

import multiprocessing
import random
import time
from datetime import date
from typing import Any

import psycopg

from agent_memory.db import decay as decay_repo
from agent_memory.db import facts as fact_repo
from agent_memory.decay import day_index, importance_on
from benchmarks._common import summary
from benchmarks._decay_runs import BATCH, ITEMS, PURGE_BELOW
from benchmarks._synthetic import scope_of


def latency(ms: list[float]) -> dict[str, Any]:
    """p50 / p95 / p99 (nearest rank) and the slowest, in ms; how many."""
    if not ms:
        return {"n": 0}
    return {**summary(ms, digits=3), "max_ms": round(max(ms), 3)}


def check_importance(conn: psycopg.Connection[Any], scopes: int, on: date) -> dict[str, Any]:
    """top_sync's importances against the decay arithmetic done in Python."""
    rng = random.Random(17)
    day = day_index(on)
    worst_rank = worst_base = 0.0
    checked = 0
    below = 0
    for _ in range(50):
        rows = fact_repo.top_sync(conn, scope_of(rng.randrange(scopes)), 1e-6, 1000, on)
        if not rows:
            continue
        ids = [r[0] for r in rows]
        stored = {
            int(r[0]): (float(r[1]), float(r[2]), float(r[3]), r[4])
            for r in conn.execute(
                "SELECT id, expires_day, half_life, importance, importance_at"
                f" FROM {ITEMS} WHERE id = ANY(%s)",
                (ids,),
            )
        }
        for fact_id, _content, got in rows:
            expires, half_life, base, at = stored[fact_id]
            by_rank = importance_on(expires, on, half_life, PURGE_BELOW)
            by_base = min(1.0, base * 2 ** (-(day - day_index(at)) / half_life))
            worst_rank = max(worst_rank, abs(got - by_rank) / by_rank)
            worst_base = max(worst_base, abs(got - by_base) / by_base)
            below += got < PURGE_BELOW
            checked += 1
    return {
        "as_of": on.isoformat(),
        "facts_checked": checked,
        "max_rel_error_vs_current_importance": worst_rank,
        "max_rel_error_vs_importance_halved_per_half_life": worst_base,
        "returned_below_purge_threshold": below,
        "bound": "<= 1e-9, and none below the threshold after the purge",
    }


def injector(
    dsn: str,
    scopes: int,
    on: date,
    seed: int,
    ready: Any,
    stop: Any,
    out: Any,
    max_s: float,
) -> None:
    """Run in another process: time top_sync for random scopes until ``stop`` (or max_s)."""
    rng = random.Random(seed)
    samples: list[float] = []
    returned = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(300):  # warm: connection, plan cache, pages
            fact_repo.top_sync(conn, scope_of(rng.randrange(scopes)), 0.1, 20, on)
        ready.set()
        deadline = time.monotonic() + max_s
        while not stop.is_set() and time.monotonic() < deadline:
            scope = scope_of(rng.randrange(scopes))
            started = time.perf_counter()
            returned += len(fact_repo.top_sync(conn, scope, 0.1, 20, on))
            samples.append((time.perf_counter() - started) * 1000)
    out.put((samples, returned))


def with_injector(
    dsn: str, scopes: int, on: date, seed: int, work: Any, idle_s: float = 0.0
) -> tuple[dict[str, Any], Any]:
    """Inject latencies from another process while ``work()`` runs (or for ``idle_s``), and
    the mean number of facts a call returned."""
    ctx = multiprocessing.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(
        target=injector, args=(dsn, scopes, on, seed, ready, stop, out, 600.0), daemon=True
    )
    proc.start()
    try:
        if not ready.wait(120):
            raise RuntimeError("the inject process did not start")
        result = None
        if work is not None:
            result = work()
        else:
            time.sleep(idle_s)
        stop.set()
        samples, returned = out.get(timeout=60)
    finally:
        stop.set()
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
    figures = {**latency(samples), "mean_facts_returned": round(returned / max(len(samples), 1), 1)}
    return {"inject_day": on.isoformat(), **figures}, result


def purge_plan(conn: psycopg.Connection[Any], on: date) -> list[str]:
    params = decay_repo.purge_params(PURGE_BELOW, on, None, BATCH)
    with conn.transaction(force_rollback=True):
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + decay_repo.PURGE_BATCH, params)
        return [r[0] for r in rows]
