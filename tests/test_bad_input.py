"""Bad input named, nothing broken: times that cannot be read back, nesting deeper than
anything parses, a database lost mid-import, SIGTERM to the MCP server on the embedded
PostgreSQL, and the modes of the folders above the embedded data directory."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from re import escape
from typing import Any

import psutil
import psycopg
import pytest

from agent_memory.backfill import parse_line
from agent_memory.errors import InvalidMessageError
from agent_memory.manager import MemoryManager
from agent_memory.models import Scope
from tests.processes import ROOT, run_interpreter

MAX = 8 * 1024 * 1024
BC = "0001-01-01T00:00:00+14:00"  # 10:00 on 31 December of year 0, in UTC
BRACKETS = "[" * 200_000 + "]" * 200_000
DEADLINE_S = 90


def line(**record: Any) -> str:
    base: dict[str, Any] = {
        "user_id": "u1",
        "occurred_at": "2026-02-01T10:00:00+00:00",
        "messages": [{"role": "user", "content": "I prefer tea."}],
    }
    return json.dumps({**base, **record})


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def cli_env(database_url: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": database_url}


def agent_memory(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The ``agent-memory`` command, in its own process."""
    return run_interpreter(["-m", "agent_memory_deployments.cli", *args], env)


def episodes(db: psycopg.Connection[Any]) -> list[tuple[str, datetime]]:
    """Every episode's source key and time, read back (a time Python cannot hold fails)."""
    rows = db.execute(
        "SELECT source_key, occurred_at FROM agent_memory.episodes ORDER BY source_key"
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]


# ---- times --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        BC,
        "0001-01-01T12:00:00+00:00",  # year 1, but a session west of UTC would read year 0
        "9999-12-31T20:00:00-14:00",  # year 10000 in UTC
    ],
)
def test_a_time_outside_what_can_be_read_back_is_named(value: str) -> None:
    with pytest.raises(ValueError, match=escape(f"occurred_at '{value}' is outside the times")):
        parse_line(line(occurred_at=value), 1, max_bytes=MAX)


@pytest.mark.system
def test_a_bc_time_is_refused_at_import_naming_the_line_and_the_value(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        line(id="a"),
        line(id="b", occurred_at=BC),
        line(id="c", occurred_at="0001-01-02T00:00:00Z"),  # the earliest time kept
    )
    env = cli_env(database_url)
    rejected = agent_memory(env, "backfill", "import", str(path))
    assert rejected.returncode == 2, rejected.stderr[-3000:]
    assert f"line 2: occurred_at '{BC}' is outside the times" in rejected.stderr
    assert "nothing was imported" in rejected.stderr
    # the command's user is told the command's words for skipping, not the library's
    assert "(use --on-error skip to import the other lines)" in rejected.stderr
    assert "on_error" not in rejected.stderr
    no_traceback(rejected)
    assert episodes(db) == []
    skipped = agent_memory(env, "backfill", "import", str(path), "--on-error", "skip")
    assert skipped.returncode == 1, skipped.stderr[-3000:]
    assert f"line 2: occurred_at '{BC}'" in skipped.stderr
    assert "2 imported" in skipped.stdout and "1 bad line(s) skipped" in skipped.stdout
    no_traceback(skipped)
    # the scope reads back, even in a session far west of UTC
    db.execute("SET TimeZone = 'Etc/GMT+12'")
    assert [key for key, _ in episodes(db)] == ["id:a", "id:c"]
    assert episodes(db)[1][1] == datetime(1, 1, 2, tzinfo=UTC)


async def test_record_refuses_a_bc_time_naming_it(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    bc = datetime.fromisoformat(BC)
    scope, said = Scope(user_id="u1"), [{"role": "user", "content": "I prefer tea."}]
    with pytest.raises(InvalidMessageError, match=escape(f"occurred_at {BC} is outside the times")):
        await manager.record(scope, said, occurred_at=bc)
    with pytest.raises(InvalidMessageError, match=escape(f"occurred_at {BC}")):
        await manager.record_many([(scope, said, None), (scope, said, bc)])
    with pytest.raises(InvalidMessageError, match=escape(f"occurred_at {BC}")):
        manager.record_sync(scope, said, occurred_at=bc)
    late = datetime(9999, 12, 31, 20, tzinfo=timezone(-timedelta(hours=14)))
    with pytest.raises(InvalidMessageError, match=escape("9999-12-31T20:00:00-14:00 is outside")):
        await manager.record(scope, said, occurred_at=late)
    assert episodes(db) == []


# ---- nesting ------------------------------------------------------------------------------


def test_nesting_deeper_than_the_bound_is_named_wherever_it_is() -> None:
    deep: Any = "x"
    for _ in range(150):  # parses, but deeper than the bound
        deep = [deep]
    with pytest.raises(ValueError, match="nested more than 100 levels deep"):
        parse_line(line(metadata={"deep": deep}), 1, max_bytes=MAX)
    with pytest.raises(ValueError, match="nested more than 100 levels deep"):
        parse_line(BRACKETS, 1, max_bytes=MAX)  # json itself would raise RecursionError
    parse_line(line(metadata={"ok": [[[["four"]]]]}), 1, max_bytes=MAX)


@pytest.mark.system
def test_a_line_of_200000_brackets_is_named_and_skip_imports_the_others(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    path = write(tmp_path, line(id="a"), BRACKETS, line(id="c"))
    env = cli_env(database_url)
    rejected = agent_memory(env, "backfill", "import", str(path))
    assert rejected.returncode == 2, rejected.stderr[-3000:]
    assert "line 2: lists and objects nested more than 100 levels deep" in rejected.stderr
    assert len(rejected.stderr.strip().splitlines()) == 1
    no_traceback(rejected)
    assert episodes(db) == []
    skipped = agent_memory(env, "backfill", "import", str(path), "--on-error", "skip")
    assert skipped.returncode == 1, skipped.stderr[-3000:]
    assert "line 2: lists and objects nested more than 100 levels deep" in skipped.stderr
    no_traceback(skipped)
    assert [key for key, _ in episodes(db)] == ["id:a", "id:c"]


async def test_record_refuses_a_message_nested_too_deep(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    deep: Any = "x"
    for _ in range(200_000):
        deep = [deep]
    with pytest.raises(InvalidMessageError, match="more than 100 levels deep"):
        await manager.record(Scope(user_id="u1"), [{"role": "user", "content": deep}])
    assert episodes(db) == []


# ---- a database lost mid-import ------------------------------------------------------------


@pytest.mark.system
def test_a_database_lost_mid_import_is_one_line(
    database_url: str, restart_database: Callable[[], None], tmp_path: Path
) -> None:
    path = write(tmp_path, line(id="a"), line(id="b"), line(id="c"))
    env = cli_env(database_url)
    # an uncommitted episode with line 2's key holds the import's INSERT at a known point
    blocker = psycopg.connect(database_url)
    blocker.execute(
        "INSERT INTO agent_memory.episodes (user_id, messages, message_count, source_key)"
        " VALUES ('u1', '[]', 0, 'id:b')"
    )
    importing = subprocess.Popen(
        [sys.executable, "-m", "agent_memory_deployments.cli", "backfill", "import", str(path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with psycopg.connect(database_url, autocommit=True) as watch:
            deadline = time.monotonic() + DEADLINE_S
            while not watch.execute(
                "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE %s",
                ("%INSERT INTO agent_memory.episodes%",),
            ).fetchone():
                assert importing.poll() is None, importing.communicate()
                assert time.monotonic() < deadline, "the import never reached its INSERT"
                time.sleep(0.05)
        restart_database()  # every connection drops, the import's mid-transaction
        out, err = importing.communicate(timeout=DEADLINE_S)
    finally:
        importing.kill()
        blocker.close()
    assert importing.returncode == 2, err[-3000:]
    assert "Traceback" not in err + out
    assert len(err.strip().splitlines()) == 1, err
    assert err.strip().startswith(f"error: lost the database during the import ({path}, after")
    assert "nothing was imported" in err
    with psycopg.connect(database_url, autocommit=True) as db:
        assert episodes(db) == []
    again = agent_memory(env, "backfill", "import", str(path))
    assert again.returncode == 0 and "3 imported" in again.stdout, again.stderr[-3000:]


# ---- the embedded server -------------------------------------------------------------------


def embedded_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return {**env, "AGENT_MEMORY_DB_DATA_DIR": str(data_dir)}


def postmaster(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.system
def test_sigterm_to_the_mcp_server_stops_the_embedded_server_it_used_last(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "pgdata"
    log = (tmp_path / "mcp.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "agent_memory_deployments.cli", "mcp", "--user", "u1"],
        cwd=ROOT,
        env=embedded_env(data_dir),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    pid = None
    try:
        assert server.stdin is not None and server.stdout is not None
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-03-26",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        }
        server.stdin.write(json.dumps(hello) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()  # the server answers once its memory is open
        assert '"id":1' in answer, (tmp_path / "mcp.log").read_text()[-3000:]
        pid = postmaster(data_dir)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while not gone(pid):
            assert time.monotonic() < deadline, "PostgreSQL outlived its last user"
            time.sleep(0.05)
        assert not (data_dir / "postmaster.pid").exists()  # a clean shutdown
        assert server.returncode == 128 + signal.SIGTERM  # as a shell reports a SIGTERM
        assert "Traceback" not in (tmp_path / "mcp.log").read_text()
    finally:
        server.kill()
        log.close()
        if pid is not None and not gone(pid):
            os.kill(pid, signal.SIGTERM)


@pytest.mark.system
@pytest.mark.skipif(os.geteuid() != 0, reason="the embedded server changes modes only as root")
def test_a_private_folder_above_the_data_directory_gets_the_search_bit_only(
    tmp_path: Path,
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)  # whatever the umask
    data_dir = private / "memory" / "pgdata"
    start = (
        "from pathlib import Path\n"
        "from agent_memory.db.connection import resolve\n"
        "from agent_memory.settings import DatabaseSettings\n"
        "import psycopg\n"
        f"db = resolve(DatabaseSettings(url=None, data_dir=Path({str(data_dir)!r})))\n"
        "with db.connect() as conn:\n"
        "    print(conn.execute('SELECT 1').fetchone()[0])\n"
    )
    try:
        result = run_interpreter(["-c", start], embedded_env(data_dir))
        assert result.returncode == 0 and result.stdout.strip() == "1", result.stderr[-3000:]
        assert stat.S_IMODE(private.stat().st_mode) == 0o701  # enter by name, never list
    finally:
        pid_file = data_dir / "postmaster.pid"
        if pid_file.exists():
            os.kill(postmaster(data_dir), signal.SIGTERM)
