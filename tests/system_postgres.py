"""A throwaway cluster of the system's PostgreSQL (Debian's packages), for what the embedded
one cannot do: Prefect's own server on PostgreSQL needs the pg_trgm extension, which pgserver
does not ship. Tests that use it skip, saying why, on a machine without those packages;
.ci/run installs them."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agent_memory_flows.prefect_server import free_port

SERVICE_USER = "postgres"  # Debian's package creates it; PostgreSQL refuses to run as root


def system_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/N/bin`` with initdb and pg_ctl, if any."""
    found = [
        p
        for p in Path("/usr/lib/postgresql").glob("*/bin")
        if (p / "initdb").exists() and (p / "pg_ctl").exists()
    ]
    return max(found, key=lambda p: int(p.parent.name), default=None)


def _as_service_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", SERVICE_USER, "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def system_postgres(bindir: Path) -> Iterator[str]:
    """Start a fresh cluster on a free loopback port; yield the address of its ``postgres``
    database (superuser ``postgres``, trust auth on loopback); stop and delete it on leaving."""
    pgdata = Path(tempfile.mkdtemp(prefix="agent-memory-system-pg-"))
    if os.geteuid() == 0:
        shutil.chown(pgdata, SERVICE_USER, SERVICE_USER)
    port = free_port()

    def run(*argv: str) -> None:
        subprocess.run(_as_service_user(list(argv)), check=True, capture_output=True, timeout=120)

    try:
        run(str(bindir / "initdb"), "-D", str(pgdata), "-U", "postgres", "-A", "trust")
        options = f"-p {port} -k {pgdata} -c listen_addresses=127.0.0.1"
        log = str(pgdata / "server.log")
        run(str(bindir / "pg_ctl"), "-D", str(pgdata), "-o", options, "-l", log, "-w", "start")
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            run(str(bindir / "pg_ctl"), "-D", str(pgdata), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(pgdata, ignore_errors=True)
