"""Issue 52, item 2: a data directory the previous release's embedded server made (PostgreSQL
16, pgvector 0.6.2) opens on this release's (PostgreSQL 18, pgvector 0.8) with everything in
it: every row of every table, every index valid, every password; the same after a SIGKILL at
any step of the upgrade, and never an empty database in its place. Real servers of both
releases, real pg_upgrade."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_memory.db import connection, embedded
from agent_memory.db.connection import resolve
from agent_memory.db.embedded_upgrade import Layout, major
from agent_memory.errors import DatabaseUnavailableError
from agent_memory.settings import DatabaseSettings
from tests.previous_release import fill, held, previous_server
from tests.processes import ROOT

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("prefect_harness")]


@pytest.fixture
def written(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any], str]]:
    """A data directory the previous release filled, what it holds, and its tenant's URL."""
    data_dir = tmp_path / "pgdata"
    with previous_server(data_dir) as url:
        import asyncio

        tenant = asyncio.run(fill(url, data_dir))
        before = held(url)
    assert major(data_dir) == 16
    yield data_dir, before, tenant
    let_go(data_dir)


def let_go(data_dir: Path) -> None:
    """Stop this process's server of ``data_dir`` (only that one: the session has others)."""
    server = connection._embedded.pop(str(data_dir.resolve()), None)
    if server is not None:
        server.cleanup()


def opened(data_dir: Path) -> str:
    """The owner's URL of this release's embedded server on ``data_dir``."""
    return resolve(DatabaseSettings(data_dir=data_dir)).dsn


def assert_all_there(data_dir: Path, before: dict[str, Any], tenant: str) -> None:
    url = opened(data_dir)
    assert held(url) == before
    with psycopg.connect(url) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()
        vector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert version and int(version[0]) >= 180000
        assert tuple(int(p) for p in str((vector.fetchone() or ("0",))[0]).split(".")) >= (0, 8)
        # the scope's own HNSW indexes are there (held() checked that they are valid)
        ann = conn.execute("SELECT count(*) FROM agent_memory.ann_indexes").fetchone()
        assert ann and ann[0] >= 1
    # the tenant logs in with its password, on the new server's socket, and sees its facts
    params = psycopg.conninfo.conninfo_to_dict(tenant)
    owner = psycopg.conninfo.conninfo_to_dict(url)
    params.update(host=owner["host"], port=owner.get("port", 5432))
    with psycopg.connect(**params) as conn:
        facts = conn.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone()
        assert facts and facts[0] >= 5
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(**{**params, "password": "wrong"}).close()
    # nothing is left beside it: no backup, no half-made cluster
    layout = Layout(data_dir)
    assert not layout.backup.exists() and not layout.work.exists()


def test_a_previous_release_directory_opens_with_everything_in_it(
    written: tuple[Path, dict[str, Any], str],
) -> None:
    data_dir, before, tenant = written
    assert_all_there(data_dir, before, tenant)
    let_go(data_dir)
    assert_all_there(data_dir, before, tenant)  # and again, as any later start


# each point kills the upgrading process and everything it started (its process group)
KILL = """
import os, signal, sys, time
from pathlib import Path
from agent_memory.db import embedded, embedded_upgrade as up

point, data = sys.argv[1], Path(sys.argv[2])
layout = up.Layout(data)

def die():
    os.killpg(0, signal.SIGKILL)

if point == "pg_upgrade":  # while pg_upgrade restores the schemas into the new cluster
    run = up._run
    def _run(argv, user, **kwargs):
        if not argv[0].endswith("pg_upgrade"):
            return run(argv, user, **kwargs)
        import subprocess
        env = {**os.environ, **(kwargs.get("env") or {})}
        proc = subprocess.Popen(argv, cwd=kwargs.get("cwd"), env=env,
                                **embedded.own_group({"user": user}) if user else {})
        out = layout.new / "pg_upgrade_output.d"
        while proc.poll() is None and not any(out.rglob("pg_upgrade_dump_*")):
            time.sleep(0.01)
        die()
    up._run = _run
elif point == "ready":  # the new cluster checked and marked, not yet swapped
    write = up._write_ready
    up._write_ready = lambda layout: (write(layout), die())
elif point == "swap":  # the old directory renamed away, the new one not yet in its place
    rename = Path.rename
    def _rename(self, target):
        done = rename(self, target)
        if Path(target) == layout.backup:
            die()
        return done
    Path.rename = _rename
embedded.start(data)
print("not killed")
"""


@pytest.mark.parametrize("point", ["pg_upgrade", "ready", "swap"])
def test_a_kill_during_the_upgrade_leaves_what_the_next_start_opens_whole(
    written: tuple[Path, dict[str, Any], str], point: str
) -> None:
    data_dir, before, tenant = written
    done = subprocess.run(
        [sys.executable, "-c", KILL, point, str(data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,  # its own process group, which it kills whole
    )
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr[-3000:]
    layout = Layout(data_dir)
    if point == "pg_upgrade":  # the old directory was only read
        assert major(data_dir) == 16 and not layout.ready.exists()
    elif point == "swap":  # no data directory at all for now: the next start must not make one
        assert major(data_dir) is None and major(layout.backup) == 16 and layout.ready.exists()
    assert_all_there(data_dir, before, tenant)


def test_an_upgrade_that_does_not_check_out_leaves_the_old_directory_as_it_was(
    written: tuple[Path, dict[str, Any], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_memory.db import cluster_census

    data_dir, before, tenant = written
    census = cluster_census.census
    calls: list[dict[str, Any]] = []

    def losing(url: str, secret: str | None) -> dict[str, Any]:
        found = census(url, secret)
        calls.append(found)
        if len(calls) == 2:  # the new cluster's: one row short
            tables = found["databases"]["postgres"]["tables"]
            tables["agent_memory.memory_items"] -= 1
        return found

    monkeypatch.setattr(cluster_census, "census", losing)
    with pytest.raises(DatabaseUnavailableError) as refused:
        opened(data_dir)
    assert "agent_memory.memory_items has" in str(refused.value)
    assert "the old directory is unchanged" in str(refused.value)
    assert major(data_dir) == 16 and not Layout(data_dir).work.exists()
    monkeypatch.setattr(cluster_census, "census", census)
    assert_all_there(data_dir, before, tenant)  # the next start upgrades it


def test_a_directory_the_previous_release_still_runs_is_left_alone(
    written: tuple[Path, dict[str, Any], str],
) -> None:
    data_dir, _, _ = written
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from tests.previous_release import"
            " previous_server\nwith previous_server(Path(sys.argv[1])):\n"
            "    print('up', flush=True); sys.stdin.read()",
            str(data_dir),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        with pytest.raises(DatabaseUnavailableError) as refused:
            embedded.start(data_dir)
        assert f"in use by process(es) [{holder.pid}]" in str(refused.value)
        assert major(data_dir) == 16 and not Layout(data_dir).work.exists()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(120)
    assert os.path.exists(data_dir / "PG_VERSION")
