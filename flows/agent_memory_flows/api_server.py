"""The Prefect server a flow run started from Python reports to (``MemoryManager.consolidate()``,
``.decay()``) when Prefect is configured with none (no PREFECT_API_URL, in the environment or
Prefect's profile).

Prefect would start a temporary server of its own for each process, printing on the caller's
terminal its telemetry heartbeat to Prefect's servers (a traceback where there is no network)
and, at exit, the tracebacks of a server stopped while it writes the run's events. Instead:

- the local server that ``agent-memory`` commands keep in the background
  (:mod:`agent_memory_deployments.local_server`; its state file is read here), when one
  answers: nothing is started, and the call takes about a second instead of ten or more;
- else a ``prefect server start`` of this process's own, without its UI, started by the first
  call and stopped when the process exits: telemetry and analytics off in its own environment
  (:data:`agent_memory.private.TELEMETRY_OFF`), its output in a log file in PREFECT_HOME.

``AGENT_MEMORY_PREFECT_SERVER=ephemeral`` keeps Prefect's own temporary server, its analytics
off. Either way the caller's environment is left as it is: the server's address (or the
analytics setting) is given to Prefect for the run only, in its settings context.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import threading
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from agent_memory.db.embedded import pid_alive
from agent_memory.settings import PrefectSettings
from agent_memory_flows.prefect_server import PrefectServer, start_prefect_server

STATE = "agent-memory-server.json"


def prefect_home() -> Path:
    """Prefect's home directory, as Prefect resolves it (``PREFECT_HOME``, else ~/.prefect)."""
    home = os.environ.get("PREFECT_HOME")
    return Path(home).expanduser() if home else Path.home() / ".prefect"


@dataclass(frozen=True)
class LocalServer:
    """The background server: its keeper's pid and its address."""

    pid: int
    url: str
    log: str

    @property
    def api_url(self) -> str:
        return f"{self.url}/api"


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    """True when a Prefect API answers its health check at ``api_url``."""
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


def read_state(home: Path) -> LocalServer | None:
    """The background server the state file names, if its keeper is alive."""
    try:
        data = json.loads((home / STATE).read_text())
        server = LocalServer(int(data["pid"]), str(data["url"]), str(data["log"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return server if pid_alive(server.pid) else None


def background_api_url(home: Path) -> str | None:
    """The background server's API address, if one answers; it is told it is still wanted
    (its keeper's idle clock starts over)."""
    server = read_state(home)
    if server is None or not healthy(server.api_url):
        return None
    with contextlib.suppress(OSError):
        (home / STATE).touch()
    return server.api_url


_own: PrefectServer | None = None
_own_lock = threading.Lock()


def own_server(settings: PrefectSettings) -> PrefectServer:
    """This process's own server, started on the first call (blocking until it answers) and
    stopped when the process exits."""
    global _own
    with _own_lock:
        if _own is None or _own.process.poll() is not None:
            _own = start_prefect_server(ui=False, timeout=settings.start_timeout_s)
            # registered before Prefect's own exit handlers (its log and event workers, started
            # by the run), so it runs after them: they flush to a server still running
            atexit.register(_own.stop)
        return _own


@contextlib.asynccontextmanager
async def reporting_server(settings: PrefectSettings) -> AsyncIterator[None]:
    """Within it, flow runs report to the server Prefect is configured with, else to the
    background server, else to this process's own (see the module's docstring);
    ``settings``: the run's (``AGENT_MEMORY_PREFECT_*``)."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        PREFECT_UI_URL,
        temporary_settings,
    )

    if PREFECT_API_URL.value():
        yield
        return
    if settings.server == "ephemeral":
        # Prefect hands its settings context to the temporary server it starts
        with temporary_settings({PREFECT_SERVER_ANALYTICS_ENABLED: False}):
            yield
        return
    url = await asyncio.to_thread(background_api_url, prefect_home())
    if url is not None:  # its UI shows the run: Prefect logs the link to it
        with temporary_settings({PREFECT_API_URL: url}):
            yield
        return
    own = await asyncio.to_thread(own_server, settings)
    # a server without a UI, gone when the process ends: no "View at" link to follow
    with temporary_settings({PREFECT_API_URL: own.api_url, PREFECT_UI_URL: ""}):
        yield
