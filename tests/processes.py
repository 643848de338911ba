"""Running flows in a child process (to kill it mid-run), with the test's settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agent_memory.settings import Settings
from tests import faults

ROOT = Path(__file__).resolve().parent.parent


def child_env(settings: Settings, unset: tuple[str, ...] = (), **extra_env: str) -> dict[str, str]:
    """The environment of a child interpreter on this test's database, LLM and Prefect server,
    without the variables named in ``unset``."""
    from prefect.settings import PREFECT_API_URL

    env = {
        k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API") and k not in unset
    }
    env.update(
        DATABASE_URL=settings.db.url.get_secret_value(),  # type: ignore[union-attr]
        PREFECT_API_URL=str(PREFECT_API_URL.value()),
        AGENT_MEMORY_LLM_MODEL=settings.llm.model or "",
        AGENT_MEMORY_LLM_API_BASE=settings.llm.api_base or "",
        AGENT_MEMORY_LLM_API_KEY=(
            settings.llm.api_key.get_secret_value() if settings.llm.api_key else ""
        ),
        **extra_env,
    )
    return env


def _with_faults(code: str, env: dict[str, str]) -> str:
    if env.get(faults.KILL_AT) or env.get(faults.RAISE_AT) or env.get(faults.PAUSE_AT):
        return faults.INSTALL + code
    return code


def run_python(
    code: str, settings: Settings, unset: tuple[str, ...] = (), **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter against this test's database, LLM and Prefect
    server, without the environment variables named in ``unset``; a SIGKILLed child returns
    -9."""
    env = child_env(settings, unset, **extra_env)
    return run_interpreter(["-c", _with_faults(code, env)], env)


def start_python(code: str, settings: Settings, **extra_env: str) -> subprocess.Popen[str]:
    """``run_python``, started: the child runs while the test goes on."""
    env = child_env(settings, **extra_env)
    return subprocess.Popen(
        [sys.executable, "-c", _with_faults(code, env)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_interpreter(
    args: list[str], env: dict[str, str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from the repository root with ``env``, its output captured as text."""
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
