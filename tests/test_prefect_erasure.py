"""Erasure reaches Prefect's database: after `agent-memory erase --user U --yes`, a real
`prefect server start` (SQLite) holds neither U's words nor U's id, in any table or in the
file's bytes, after runs where U's scope failed with a model answer quoting U and then
succeeded."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from agent_memory.private import TELEMETRY_OFF
from agent_memory_flows.prefect_server import PrefectServer, start_prefect_server
from tests.fake_llm import FakeLLM, Reply, facts_answer
from tests.prefect_api import wait_for

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent
USER = "quokka-user-7f3a"  # the person erased
OTHER = "wombat-user-2b9c"  # someone who stays
WORDS = "zanzibar marmalade"  # what the person said, quoted back by a bad model answer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrefectServer]:
    with start_prefect_server(home=tmp_path / "prefect-server") as running:
        yield running


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_memory_deployments.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def events(db_path: Path, name: str) -> int:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT count(*) FROM events WHERE event = ?", (name,)).fetchone()
    return int(row[0])


def found_in_tables(db_path: Path, needles: list[str]) -> list[str]:
    """Every table.column whose text or blob holds a needle (case-insensitive)."""
    hits = []
    with sqlite3.connect(db_path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                query = f'SELECT "{column}" FROM "{table}"'  # noqa: S608 - names from SQLite
                for (value,) in conn.execute(query):
                    if isinstance(value, bytes):
                        value = value.decode("utf-8", "replace")
                    if isinstance(value, str) and any(n in value.lower() for n in needles):
                        hits.append(f"{table}.{column}: {value[:200]!r}")
    return hits


@pytest.mark.timeout(900)
def test_erasure_leaves_nothing_of_the_person_in_prefects_database(
    server: PrefectServer,
    database_url: str,
    db: psycopg.Connection[Any],
    fake_llm: FakeLLM,
    tmp_path: Path,
) -> None:
    for user, said in ((USER, f"My favourite breakfast is {WORDS} on toast."), (OTHER, "Hi.")):
        db.execute(
            "INSERT INTO agent_memory.episodes (user_id, messages, message_count)"
            " VALUES (%s, %s, 1)",
            (user, Jsonb([{"role": "user", "content": said}])),
        )

    def quoting(request: dict[str, Any]) -> Reply:  # a bad answer that quotes the person
        prompt = request["messages"][-1]["content"]
        if WORDS in prompt:
            return Reply(f"Sorry, I can't list facts about '{WORDS}' ({USER}) as JSON.")
        return facts_answer(request)

    fake_llm.handler = quoting
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        TELEMETRY_OFF,
        PREFECT_API_URL=server.api_url,
        PREFECT_HOME=str(tmp_path / "prefect-client"),
        DATABASE_URL=database_url,
        AGENT_MEMORY_LLM_MODEL="openai/test-model",
        AGENT_MEMORY_LLM_API_BASE=fake_llm.api_base,
        AGENT_MEMORY_LLM_API_KEY="sk-test-SECRET-key-123",
    )
    failed = cli(env, "consolidate")
    assert failed.returncode != 0 and "1 failed" in failed.stdout, failed.stdout + failed.stderr
    fake_llm.handler = facts_answer  # the model answers well now: the failed scope completes
    done = cli(env, "consolidate")
    assert done.returncode == 0 and "1 completed" in done.stdout, done.stdout + done.stderr

    prefect_db = Path(server.log_path).parent / "prefect.db"
    # the runs' events are written a moment after the runs end: wait for the last ones
    wait_for("the failure event", lambda: events(prefect_db, "memory.consolidation.failed"), 120)
    wait_for(
        "the runs' final events",
        lambda: (
            events(prefect_db, "prefect.flow-run.Completed") >= 1
            and events(prefect_db, "prefect.flow-run.Failed") >= 1
        ),
        120,
    )

    # operators search Prefect by the scope's key; the owner maps it back while the scope exists
    key = cli(env, "scopes", "key", "--user", USER).stdout.strip()
    assert key.startswith("scope-") and cli(env, "scopes", "reveal", key).stdout.strip() == (
        f"user={USER}"
    )
    erased = cli(env, "erase", "--user", USER, "--yes")
    assert erased.returncode == 0, erased.stdout + erased.stderr
    assert cli(env, "scopes", "reveal", key).returncode != 0  # an erased scope's key is no one's
    server.stop()

    with sqlite3.connect(prefect_db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    needles = [USER.lower(), *WORDS.lower().split()]
    assert found_in_tables(prefect_db, needles) == []
    for path in prefect_db.parent.glob("prefect.db*"):
        raw = path.read_bytes().lower()
        assert [n for n in needles if n.encode() in raw] == [], path
    # what is left names the erased scope by its key only (task runs, logs, the failure event)
    assert found_in_tables(prefect_db, [key])
