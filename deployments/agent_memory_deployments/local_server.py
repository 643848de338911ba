"""One local Prefect server for this machine's ``agent-memory`` commands.

Without ``PREFECT_API_URL`` every command that runs a flow would start Prefect's ephemeral
server for itself: 10-40 s on a busy machine, often more than the command's own work, and
past Prefect's 20 s start deadline it dies with a long traceback. Instead the first such
command starts ``prefect server start`` in the background (its UI included) and the next ones
reuse it; a Prefect server already answering on the port (``agent-memory serve``, or one you
started) is reused as it is. The background server is kept by a small keeper process, which
stops it after ``AGENT_MEMORY_PREFECT_IDLE_S`` without a command, or on ``agent-memory server
stop``.

State lives in ``PREFECT_HOME``: ``agent-memory-server.json`` (the keeper's pid and the
server's address, written once the server is healthy); each command that uses the server
touches it, which is how the keeper knows it is still wanted.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from agent_memory.db.embedded import pid_alive
from agent_memory.errors import PrefectServerError
from agent_memory.settings import PrefectSettings

# the state file's reading is shared with flow runs started from Python, which reuse the server
from agent_memory_flows.api_server import (
    STATE,
    LocalServer,
    healthy,
    prefect_home,
    read_state,
)

__all__ = ["STATE", "LocalServer", "ensure", "healthy", "prefect_home", "read_state", "stop"]
_LOCK = "agent-memory-server.lock"
_KEEPER_LOG = "agent-memory-server.log"
_CHECK_EVERY_S = 5.0


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """One command at a time decides whether to start the server (no two are started)."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / _LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure(settings: PrefectSettings, home: Path | None = None) -> str:
    """The API address of the local server, started in the background if none answers.

    Raises :class:`PrefectServerError` with one line saying what to do when it cannot start
    within ``settings.start_timeout_s``.
    """
    home = home or prefect_home()
    with _locked(home):
        server = read_state(home)
        if server is not None and healthy(server.api_url):
            (home / STATE).touch()  # still wanted: the keeper's idle clock starts over
            return server.api_url
        existing = f"http://127.0.0.1:{settings.port}/api"
        if healthy(existing):  # `agent-memory serve`, or a server someone started: reuse it
            return existing
        return _start(settings, home).api_url


def _start(settings: PrefectSettings, home: Path) -> LocalServer:
    (home / STATE).unlink(missing_ok=True)
    log = home / _KEEPER_LOG
    with open(log, "ab") as out:
        keeper = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent_memory_deployments.local_server",
                "keep",
                "--port",
                str(settings.port),
                "--idle",
                str(settings.idle_s),
                "--timeout",
                str(settings.start_timeout_s),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # it outlives this command, and its Ctrl-C
            cwd=home,  # not the caller's folder: its own modules must not shadow ours
            env={**os.environ, "PREFECT_HOME": str(home)},
        )
    deadline = time.monotonic() + settings.start_timeout_s
    while time.monotonic() < deadline:
        server = read_state(home)
        if server is not None and server.pid == keeper.pid and healthy(server.api_url):
            return server
        if keeper.poll() is not None:
            break
        time.sleep(0.2)
    if keeper.poll() is None:  # the keeper and the server it may have started: its group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(keeper.pid, signal.SIGTERM)
        keeper.wait()
    raise PrefectServerError(
        f"could not start a local Prefect server on port {settings.port} within "
        f"{settings.start_timeout_s:g} s (its log: {log}); start one yourself with "
        f"`prefect server start` and set PREFECT_API_URL=http://127.0.0.1:4200/api, or raise "
        "AGENT_MEMORY_PREFECT_START_TIMEOUT_S"
    )


def stop(home: Path | None = None, timeout: float = 30.0) -> LocalServer | None:
    """Stop the background server (its keeper stops it); returns the one stopped, if any."""
    home = home or prefect_home()
    server = read_state(home)
    if server is None:
        return None
    os.kill(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(server.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return server


def _keep(port: int, idle_s: float, timeout: float) -> int:
    """The keeper: start the server, publish its address, stop it when idle or told to."""
    from agent_memory_flows.prefect_server import free_port, start_prefect_server

    home = prefect_home()
    if not _port_free(port):  # taken by something that is not a Prefect server: another one
        port = free_port()
    try:
        server = start_prefect_server("127.0.0.1", port, timeout=timeout)
    except PrefectServerError as exc:
        print(f"agent-memory: {exc}", flush=True)
        return 1
    stopping = False

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    state = home / STATE
    state.write_text(
        json.dumps({"pid": os.getpid(), "url": server.url, "log": str(server.log_path)})
    )
    print(f"agent-memory: Prefect server at {server.url} (pid {os.getpid()})", flush=True)
    try:
        while not stopping and server.process.poll() is None:
            try:
                idle = time.time() - state.stat().st_mtime
            except OSError:  # the state file was removed: nobody can find us, so stop
                break
            if idle > idle_s:
                print(f"agent-memory: idle for {idle:.0f} s, stopping", flush=True)
                break
            time.sleep(_CHECK_EVERY_S)
    finally:
        with contextlib.suppress(OSError):
            data = json.loads(state.read_text())
            if data.get("pid") == os.getpid():
                state.unlink()
        server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deployments.local_server")
    sub = parser.add_subparsers(dest="command", required=True)
    keep = sub.add_parser("keep", help="start the server and keep it until idle")
    keep.add_argument("--port", type=int, required=True)
    keep.add_argument("--idle", type=float, required=True)
    keep.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args(argv)
    return _keep(args.port, args.idle, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
