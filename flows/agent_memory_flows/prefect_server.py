"""A local ``prefect server start`` as a child process, for `agent-memory serve`, the background
server of the command line, a flow run started from Python when Prefect is given no server
(:mod:`agent_memory_flows.api_server`), the benchmarks and the end-to-end tests. It keeps its
own state in SQLite under PREFECT_HOME, or in the PostgreSQL given as ``database_url``
(Prefect's migrations need the pg_trgm extension there, which a full PostgreSQL has and the
embedded one does not ship)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from agent_memory.errors import PrefectServerError
from agent_memory.private import TELEMETRY_OFF, keep_private


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def prefect_database_url(url: str) -> str:
    """A PostgreSQL address in the form Prefect's server takes (SQLAlchemy with asyncpg)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("postgres", "postgresql", "postgresql+asyncpg"):
        raise PrefectServerError(
            f"Prefect's server database must be a postgresql:// address, got {scheme!r}"
        )
    return f"postgresql+asyncpg://{rest}"


@dataclass
class PrefectServer:
    """A running ``prefect server start``; stop() (or leaving a ``with`` block) ends it."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @property
    def api_url(self) -> str:
        """What PREFECT_API_URL should be for clients of this server."""
        return f"{self.url}/api"

    def stop(self, timeout: float = 30) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> PrefectServer:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_prefect_server(
    host: str = "127.0.0.1",
    port: int | None = None,
    *,
    home: Path | None = None,
    database_url: str | None = None,
    timeout: float = 180,
    ui: bool = True,
) -> PrefectServer:
    """Start ``prefect server start`` on HOST:PORT (a free port if None) and wait until its
    health check answers.

    ``home``: its PREFECT_HOME (default: the current one). ``database_url``: a PostgreSQL
    for its state (``postgresql://`` or ``postgresql+asyncpg://``; default: SQLite, or whatever
    PREFECT_API_DATABASE_CONNECTION_URL says). ``ui``: serve the UI too. Its output goes to a
    log file in its PREFECT_HOME, never to the caller's terminal; telemetry is off in its own
    environment (:data:`~agent_memory.private.TELEMETRY_OFF`), not in the caller's. Raises
    PrefectServerError, naming the log to read, if it exits or stays unhealthy past
    ``timeout`` seconds.
    """
    port = port or free_port(host)
    env = dict(os.environ)
    env.pop("PREFECT_API_URL", None)  # the server must not try to talk to another one
    keep_private(env, TELEMETRY_OFF)
    if home is not None:
        env["PREFECT_HOME"] = str(home)
    if database_url is not None:
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = prefect_database_url(database_url)
    # the UI asks this address for its data; its default is port 4200 whatever --port says
    env["PREFECT_UI_API_URL"] = f"http://{host}:{port}/api"
    prefect_home = Path(env.get("PREFECT_HOME") or Path.home() / ".prefect")
    prefect_home.mkdir(parents=True, exist_ok=True)
    log_path = prefect_home / f"prefect-server-{port}.log"
    # this interpreter's Prefect (the one its flows run with), not another one on the PATH
    sibling = Path(sys.executable).with_name("prefect")
    prefect = str(sibling) if sibling.exists() else shutil.which("prefect") or "prefect"
    with open(log_path, "ab") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [prefect, "server", "start", "--host", host, "--port", str(port)]
            + ([] if ui else ["--no-ui"]),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    server = PrefectServer(process, f"http://{host}:{port}", log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PrefectServerError(
                f"prefect server on {host}:{port} exited with {process.returncode}; see {log_path}"
            )
        try:
            with urllib.request.urlopen(f"{server.api_url}/health", timeout=2):
                return server
        except OSError:
            time.sleep(0.5)
    server.stop()
    raise PrefectServerError(
        f"prefect server on {host}:{port} did not answer within {timeout:g} s; see {log_path}"
    )
