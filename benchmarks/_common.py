"""What every benchmark shares: Prefect's environment, the databases (DATABASE_URL when set,
else a throwaway embedded PostgreSQL), a local Prefect server, timing and the one percentile
definition, and the command line (``--quick``, the JSON printed, the exit status).

It imports nothing but the standard library at import time, so a section can take
:func:`prefect_defaults` from here before anything imports Prefect.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_memory_flows.prefect_server import PrefectServer

ROOT = Path(__file__).resolve().parent.parent

# ---- the environment ------------------------------------------------------------------------


def prefect_defaults(*, root_logger: bool = True, own_home: bool = True) -> dict[str, str]:
    """What a section adds to its environment before Prefect is imported (as
    ``os.environ.update(prefect_defaults())``): Prefect's logs at ERROR, its root logger too
    (``root_logger``), and a PREFECT_HOME of its own in a temporary directory (``own_home``), which
    its child processes inherit. A variable already set is left as it is."""
    wanted = {"PREFECT_LOGGING_LEVEL": "ERROR"}
    if root_logger:
        wanted["PREFECT_LOGGING_ROOT_LEVEL"] = "ERROR"
    added = {k: v for k, v in wanted.items() if k not in os.environ}
    if own_home and "PREFECT_HOME" not in os.environ:
        added["PREFECT_HOME"] = tempfile.mkdtemp(prefix="am-bench-prefect-")
    return added


@contextmanager
def prefect_server() -> Iterator[PrefectServer]:
    """A ``prefect server start`` of this run's own, as a deployment would have (not the
    ephemeral one in-process), with PREFECT_API_URL pointing at it; stopped on leaving."""
    from agent_memory_flows.prefect_server import start_prefect_server

    prefect = start_prefect_server()
    os.environ["PREFECT_API_URL"] = prefect.api_url
    try:
        yield prefect
    finally:
        prefect.stop()


# ---- the databases ------------------------------------------------------------------------


def admin_dsn(*, use_database_url: bool = True) -> tuple[str, Any]:
    """A DSN for creating benchmark databases, and the embedded server to clean up (or None)."""
    url = os.environ.get("DATABASE_URL")
    if url and use_database_url:
        return url, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR warning on import
        from agent_memory.db import embedded

        server = embedded.start(
            Path(tempfile.mkdtemp(prefix="am-bench-")) / "pgdata", cleanup_mode="delete"
        )
    return str(server.get_uri()), server


def fresh_database(admin: str, name: str, *, migrated: bool = True) -> str:
    """Database ``name`` created anew (an old one is dropped) and, when ``migrated``, migrated,
    with the default decay policy; its DSN."""
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    dsn = psycopg.conninfo.make_conninfo(admin, dbname=name)
    if migrated:
        from agent_memory.db.migrations import ensure_decay_policy, migrate
        from agent_memory.decay import DecayPolicy
        from agent_memory.settings import MemorySettings

        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
            ensure_decay_policy(conn, DecayPolicy.of(MemorySettings()))
    return dsn


def drop_database(admin: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def admin_database(*, use_database_url: bool = True) -> Iterator[str]:
    """:func:`admin_dsn` for the ``with`` block; the embedded server, if one was started, is
    removed afterwards."""
    admin, server = admin_dsn(use_database_url=use_database_url)
    try:
        yield admin
    finally:
        if server is not None:
            server.cleanup()


@contextmanager
def bench_database(name: str, *, migrated: bool = True) -> Iterator[tuple[str, str]]:
    """(admin DSN, DSN) of a fresh database ``name`` (see :func:`fresh_database`) for the
    ``with`` block, dropped afterwards (see :func:`admin_database`)."""
    with admin_database() as admin:
        dsn = fresh_database(admin, name, migrated=migrated)
        try:
            yield admin, dsn
        finally:
            drop_database(admin, name)


@contextmanager
def agent_connection(dsn: str) -> Iterator[Any]:
    """An autocommit connection set up as MemoryManager's pool sets up its own (its plans:
    ``agent_memory.db.connection.GENERIC_PLANS``), so what is timed on it is what an agent
    gets."""
    import psycopg

    from agent_memory.db.connection import prefer_generic_plans
    from agent_memory.settings import DatabaseSettings

    with psycopg.connect(dsn, autocommit=True) as conn:
        if DatabaseSettings().generic_plans:
            prefer_generic_plans(conn)
        yield conn


# ---- timing and percentiles -----------------------------------------------------------------


def timings(fn: Callable[[], Any], n: int, warmup: int = 10) -> list[float]:
    """Milliseconds of each of ``n`` calls of ``fn``, after ``warmup`` unmeasured ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def machine_cpu() -> tuple[float, float] | None:
    """The machine's busy and total CPU seconds since boot, all cores and processes (Linux's
    /proc/stat; None elsewhere): two readings give how busy every core was between them."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [float(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle and iowait
    return (sum(fields) - idle) / tick, sum(fields) / tick


def machine_busy(before: tuple[float, float] | None) -> float | None:
    """The share of the machine's CPU (every core) busy since the :func:`machine_cpu` reading
    ``before``."""
    after = machine_cpu()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round((after[0] - before[0]) / (after[1] - before[1]), 3)


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-quantile of ``samples`` by nearest rank: the smallest sample such that at least a
    share q of the samples are <= it (the one definition of every p50/p95/p99 here)."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    # rounded first, so that a product such as 0.07 * 100 = 7.000000000000001 ranks 7, not 8
    return ordered[max(0, math.ceil(round(q * len(ordered), 9)) - 1)]


def summary(
    ms: Sequence[float], quantiles: Sequence[float] = (0.50, 0.95, 0.99), digits: int = 4
) -> dict[str, float]:
    """``p50_ms`` / ``p95_ms`` / ``p99_ms`` (those of ``quantiles``, by :func:`percentile`),
    rounded to ``digits``, and ``n``; only ``n`` (0) for no samples."""
    out: dict[str, float] = {
        f"p{round(q * 100)}_ms": round(percentile(ms, q), digits) for q in quantiles if ms
    }
    out["n"] = len(ms)
    return out


# ---- the command line ---------------------------------------------------------------------


def parser(name: str, doc: str | None, quick: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``python -m benchmarks.<name>``, its help the module's docstring,
    with ``--quick`` (help: what the small size is) unless ``quick`` is None."""
    out = argparse.ArgumentParser(
        prog=f"python -m benchmarks.{name}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if quick is not None:
        out.add_argument("--quick", action="store_true", help=quick)
    return out


def emit(result: dict[str, Any], out: Path | None = None) -> int:
    """Print the section's JSON (and write it to ``out`` if given); the exit status: 1 when a
    bound was missed (``"pass": false``), else 0."""
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
    return 1 if result.get("pass") is False else 0
