"""Where ``MemoryManager.consolidate()`` reports when Prefect is given no server (no
PREFECT_API_URL): a server of the process's own, quiet on the terminal, with telemetry off in
that server's environment (not in the caller's), so that no request leaves for Prefect's
telemetry host; or the command line's background server, when one answers.

Every request to a host other than loopback goes through a loopback proxy here (HTTPS_PROXY,
which httpx and urllib honour), so a telemetry request cannot slip past unseen."""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_memory.settings import PrefectSettings
from agent_memory_deployments import local_server
from agent_memory_flows.prefect_server import free_port
from tests.prefect_api import api
from tests.processes import run_interpreter

pytestmark = pytest.mark.system

SCRIPT = """
import asyncio, json, os, urllib.request
from agent_memory import MemoryManager, Scope
from agent_memory.settings import PrefectSettings
from agent_memory_flows import api_server

async def main():
    manager = await MemoryManager.create()
    try:
        await manager.record(Scope("quiet"), [{"role": "user", "content": "I prefer tea."}])
        summary = await manager.consolidate()
    finally:
        await manager.close()
    report = {"completed": summary["completed"], "facts": summary["facts_created"],
              "host_env": {k: os.environ.get(k) for k in
                           ("PREFECT_SERVER_ANALYTICS_ENABLED", "DO_NOT_TRACK",
                            "PREFECT_API_URL")}}
    if os.environ.get("EXPECT_OWN"):  # the server this process started, still running
        own = api_server.own_server(PrefectSettings())
        with urllib.request.urlopen(own.api_url + "/admin/settings") as response:
            report["analytics_enabled"] = json.load(response)["server"]["analytics_enabled"]
        with open(f"/proc/{own.process.pid}/environ", "rb") as environ:
            pairs = [p.split(b"=", 1) for p in environ.read().split(b"\\0") if b"=" in p]
        report["server_env"] = {k.decode(): v.decode() for k, v in pairs
                                if k in (b"PREFECT_SERVER_ANALYTICS_ENABLED", b"DO_NOT_TRACK",
                                         b"HTTPS_PROXY")}
        report["api_url"] = own.api_url
    print("REPORT " + json.dumps(report))

asyncio.run(main())
"""


class _Sink(http.server.BaseHTTPRequestHandler):
    """A proxy that forwards nothing: it records where each request was going."""

    seen: list[str]

    def _record(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_error(502, "the test's sink forwards nothing")

    do_CONNECT = do_GET = do_POST = _record

    def log_message(self, *_args: object) -> None:  # quiet
        pass


@pytest.fixture
def sink() -> Iterator[tuple[str, list[str]]]:
    """A loopback proxy's address and the requests it saw."""
    seen: list[str] = []
    handler = type("Sink", (_Sink,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def user_env(database_url: str, home: Path, proxy: str) -> dict[str, str]:
    """A user's environment: no Prefect server and no telemetry setting of their own (the
    suite's are removed), every request off loopback through ``proxy``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PREFECT_") and k not in ("DO_NOT_TRACK", "CI")
    }
    env.update(
        DATABASE_URL=database_url,
        PREFECT_HOME=str(home),
        HTTPS_PROXY=proxy,
        HTTP_PROXY=proxy,
        NO_PROXY="127.0.0.1,localhost",
    )
    return env


def report_of(output: str) -> dict[str, object]:
    [line] = [x for x in output.splitlines() if x.startswith("REPORT ")]
    report: dict[str, object] = json.loads(line.removeprefix("REPORT "))
    return report


def test_a_call_with_no_prefect_server_is_quiet_and_sends_no_telemetry(
    database_url: str, tmp_path: Path, sink: tuple[str, list[str]]
) -> None:
    proxy, seen = sink
    env = user_env(database_url, tmp_path / "prefect", proxy)

    result = run_interpreter(["-c", SCRIPT], {**env, "EXPECT_OWN": "1"}, timeout=300)

    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    report = report_of(result.stdout)
    assert (report["completed"], report["facts"]) == (1, 1)
    assert "Traceback" not in output and "telemetry" not in output.lower()
    assert "ERROR" not in output and "View at" not in output  # no link to a UI it lacks
    # telemetry is off in the server's own environment and settings, not in the caller's
    assert report["server_env"] == {
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "HTTPS_PROXY": proxy,  # a request of the server's to the internet would reach the sink
    }
    assert report["analytics_enabled"] is False
    assert report["host_env"] == dict.fromkeys(
        ("PREFECT_SERVER_ANALYTICS_ENABLED", "DO_NOT_TRACK", "PREFECT_API_URL")
    )
    assert seen == []  # no request left loopback: neither the server's nor the client's
    # the server is gone with the process, its output in a log file
    assert not local_server.healthy(str(report["api_url"]), timeout=5)
    assert list((tmp_path / "prefect").glob("prefect-server-*.log"))


def test_a_call_reuses_the_command_line_s_background_server(
    database_url: str, tmp_path: Path, sink: tuple[str, list[str]]
) -> None:
    proxy, seen = sink
    home = tmp_path / "prefect"
    env = user_env(database_url, home, proxy)
    started = local_server.ensure(PrefectSettings(port=free_port()), home)
    try:
        result = run_interpreter(["-c", SCRIPT], env, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        assert report_of(result.stdout)["completed"] == 1
        assert "Traceback" not in result.stdout + result.stderr
        runs = api(started, "/flow_runs/filter", {})
        assert [r["name"] for r in runs] == ["consolidate [all scopes]"]
        assert list(home.glob("prefect-server-*.log")) == [
            Path(local_server.read_state(home).log)  # type: ignore[union-attr]
        ]  # no server of the call's own was started
    finally:
        local_server.stop(home)
    assert seen == []
