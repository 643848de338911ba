"""Talking to a real Prefect server's REST API from tests, and waiting on it."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any


def api(base: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One Prefect API call; a busy server's 503 (its SQLite is locked) is retried."""
    request = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    for attempt in range(30):
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or attempt == 29:
                raise
            time.sleep(1)


def wait_for(
    what: str, check: Any, timeout: float, proc: subprocess.Popen[Any] | None = None
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{proc.args} exited ({proc.returncode}) waiting for {what}")
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")
