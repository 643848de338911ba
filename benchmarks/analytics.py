"""python -m benchmarks.analytics [--quick] [--facts N] [--scopes N] [--runs N]

How the decay analytics load the facts into polars, at 1M facts over 10k scopes (--quick: 100k
over 1k), in a fresh database (the embedded PostgreSQL unless DATABASE_URL is set; a database
named agent_memory_bench_analytics is created and dropped). Facts are loaded as
benchmarks/inject.py loads them. Each loader builds the same frame (user_id, agent_id,
workflow_id, expires_day, half_life; checked against the reference) and is timed the same
number of runs, interleaved in rounds so drift on the machine hits them alike. Prints JSON:

* loaders.fetchall    - the reference: a row per fact through psycopg's fetchall, then
                        pl.DataFrame(rows) (what load_frame did before)
* loaders.copy_csv    - COPY (SELECT ...) TO STDOUT (FORMAT csv) on the same psycopg
                        connection, read by pl.read_csv (no new dependency)
* loaders.adbc        - adbc-driver-postgresql (COPY BINARY decoded to Arrow in C) on a
                        connection of its own, then pl.from_arrow
* loaders.connectorx  - pl.read_database_uri(engine="connectorx") on a connection of its own
* loaders.packed      - agent_memory.analytics.load_frame (the chosen one): a row per scope,
                        expiry days and half-lives packed as float8 in one bytea, decoded with numpy
* each loader: median / min seconds over the runs, reference_over_loader (fetchall's median
  over its median: how many times faster), same_frame
* chosen_speedup      - fetchall / packed (bound: >= 3)
* report              - load_frame + analytics.report at this size: median seconds (bound at
                        1M facts: <= 2 s), and analytics.plot on top of it
"""

from __future__ import annotations

import asyncio
import statistics
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from datetime import date
from typing import Any

import polars as pl
import psycopg

from agent_memory import analytics
from agent_memory.decay import today
from benchmarks._common import bench_database, emit, parser
from benchmarks._synthetic import load_facts

BENCH_DB = "agent_memory_bench_analytics"
# the columns and order of analytics.FRAME_SCHEMA, a row per fact: what every loader returns
# (the expiry days are read for the policy's threshold, so they are the stored ones)
ROWS = (
    "SELECT user_id, agent_id, workflow_id, expires_day, half_life FROM agent_memory.memory_items"
)
Loader = Callable[[], Awaitable[pl.DataFrame]]


def _canonical(frame: pl.DataFrame) -> pl.DataFrame:
    """Row order is no part of the contract: compare frames sorted on every column."""
    return frame.sort(frame.columns, nulls_last=True)


def loaders(conn: psycopg.AsyncConnection[Any], dsn: str) -> dict[str, Loader]:
    """The candidates, each returning the frame of all scopes."""

    async def fetchall() -> pl.DataFrame:
        cur = await conn.execute(ROWS)
        return pl.DataFrame(await cur.fetchall(), schema=analytics.FRAME_SCHEMA, orient="row")

    async def copy_csv() -> pl.DataFrame:
        # libpq hands COPY data out one row per call, so this is a Python call per fact
        buffer = bytearray()
        async with conn.cursor().copy(f"COPY ({ROWS}) TO STDOUT (FORMAT csv)") as copy:
            async for chunk in copy:
                buffer += chunk
        # CSV keeps NULL (an empty field) apart from '' (a quoted empty field)
        return pl.read_csv(
            bytes(buffer),
            has_header=False,
            new_columns=list(analytics.FRAME_SCHEMA),
            schema=analytics.FRAME_SCHEMA,
        )

    def adbc_sync() -> pl.DataFrame:
        import adbc_driver_postgresql.dbapi as adbc

        with adbc.connect(dsn) as c, c.cursor() as cur:
            cur.execute(ROWS)
            frame = pl.from_arrow(cur.fetch_arrow_table())
        assert isinstance(frame, pl.DataFrame)
        return frame

    async def adbc() -> pl.DataFrame:
        return adbc_sync()  # blocking on purpose: nothing else runs meanwhile

    async def connectorx() -> pl.DataFrame:
        return pl.read_database_uri(ROWS, dsn, engine="connectorx")

    async def packed() -> pl.DataFrame:
        return await analytics.load_frame(conn, None, 0.05)

    return {
        "fetchall": fetchall,
        "copy_csv": copy_csv,
        "adbc": adbc,
        "connectorx": connectorx,
        "packed": packed,
    }


async def measure(dsn: str, runs: int, full: bool) -> dict[str, Any]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        candidates = loaders(conn, dsn)
        reference = _canonical(await candidates["fetchall"]())
        times: dict[str, list[float]] = {name: [] for name in candidates}
        result: dict[str, dict[str, Any]] = {}
        for name, load in candidates.items():  # one warm-up each; drop what does not work
            try:
                frame = await load()
            except Exception as exc:  # the benchmark reports why, e.g. a URI it cannot parse
                result[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                continue
            result[name] = {"same_frame": _canonical(frame).equals(reference)}
        working = [n for n in candidates if "error" not in result[n]]
        for _ in range(runs):
            for name in working:
                t = time.perf_counter()
                await candidates[name]()
                times[name].append(time.perf_counter() - t)
        ref = statistics.median(times["fetchall"])
        for name in working:
            median = statistics.median(times[name])
            result[name].update(
                median_s=round(median, 3),
                min_s=round(min(times[name]), 3),
                reference_over_loader=round(ref / median, 2),
            )
        day = today()
        report_s: list[float] = []
        plot_s: list[float] = []
        for _ in range(runs):
            t = time.perf_counter()
            frame = await analytics.load_frame(conn, None, 0.05)
            report = analytics.report(frame, as_of=day, purge_below=0.05, purged=0)
            report_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            png = analytics.plot(report)
            plot_s.append(time.perf_counter() - t)
    speedup = result["packed"]["reference_over_loader"]
    report_median = statistics.median(report_s)
    return {
        "loaders": result,
        "chosen": "packed",
        "chosen_speedup": speedup,
        "chosen_speedup_bound": ">= 3",
        "chosen_speedup_met": speedup >= 3,
        "report": {
            "load_and_report_median_s": round(report_median, 3),
            "bound_s": 2.0,
            "bound_applies": full,
            "met": report_median <= 2.0,
            "plot_median_s": round(statistics.median(plot_s), 3),
            "png_bytes": len(png),
            "as_of": date.isoformat(day),
            "facts": report.facts,
        },
        # the bounds apply at 1M facts over 10k scopes
        "pass": (speedup >= 3 and report_median <= 2.0) if full else None,
    }


def _uri(admin: str, dbname: str) -> str:
    """``admin`` (a postgresql:// URI) pointed at ``dbname``, in a form connectorx also parses.

    The embedded server's URI names its unix socket directory as ``?host=/path`` with an empty
    host, which libpq (and so ADBC) accepts and connectorx refuses ("empty host"); any host in
    the authority does for both, the ``host`` parameter still wins.
    """
    parts = urllib.parse.urlsplit(admin)
    netloc = parts.netloc
    if netloc.endswith("@") or not netloc:  # "postgres:@" or "": no host
        netloc += "localhost"
    return parts._replace(netloc=netloc, path="/" + dbname).geturl()


def run(facts: int, scopes: int, runs: int) -> dict[str, Any]:
    with bench_database(BENCH_DB) as (admin, dsn):
        with psycopg.connect(dsn, autocommit=True) as conn:
            load_s = load_facts(conn, facts, scopes)
        uri = _uri(admin, BENCH_DB)
        figures = asyncio.run(measure(uri, runs, full=facts >= 1_000_000))
    return {"facts": facts, "scopes": scopes, "runs": runs, "load_s": round(load_s, 1), **figures}


def main(argv: list[str] | None = None) -> int:
    cli = parser("analytics", __doc__, quick="100k facts over 1k scopes")
    cli.add_argument("--facts", type=int, default=1_000_000)
    cli.add_argument("--scopes", type=int, default=10_000)
    cli.add_argument("--runs", type=int, default=5, help="timed runs per loader")
    args = cli.parse_args(argv)
    if args.quick:
        args.facts, args.scopes = 100_000, 1_000
    return emit(run(args.facts, args.scopes, args.runs))


if __name__ == "__main__":
    raise SystemExit(main())
