"""Opening a data directory that an earlier release's embedded server made: PostgreSQL 16
(``pgserver``) is upgraded in place to the embedded server's major with the bundled
``pg_upgrade``, in copy mode, the first time the new release opens it.

The old directory is never written to until the new one is complete and checked: the new
cluster is made beside it (``.<name>.upgrade/new``), filled by ``pg_upgrade --copy``, given the
old one's access rules, settings and owner secret, started, its extensions updated, and its
census (every table's row count in every database, every index and whether it is valid, every
role and its password: :mod:`agent_memory.db.cluster_census`) compared with the old one's, then
stopped. Only then is the file
``READY`` written beside it, and the two directories swapped: the old one renamed to
``<name>.before-upgrade``, the new one to ``<name>``, the backup and the work folder removed.

A crash or SIGKILL at any moment leaves a state the next start recognises (:func:`recover`),
under a lock that only one process holds at a time:

* no ``READY``: the attempt is abandoned (its servers stopped, its folder removed) and the old
  directory, untouched, is upgraded again from the start;
* ``READY``: the swap is finished forward, from wherever it stopped;
* a backup with no data directory and no ``READY``: the backup is put back.

An empty database is never made in place of a data directory that is being upgraded.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from agent_memory.db import auth, cluster_census
from agent_memory.errors import DatabaseUnavailableError

log = logging.getLogger(__name__)

# what the new cluster takes from the old directory besides what pg_upgrade moves: tenant
# mode's access rules, ALTER SYSTEM's settings and the owner's password (agent_memory.db.auth)
CARRIED = ("pg_hba.conf", "postgresql.auto.conf", auth.SECRET_FILE)
COMMAND_TIMEOUT_S = 3600.0  # pg_upgrade copies every file: an hour for a large directory


@dataclass(frozen=True)
class Layout:
    """Where an upgrade of ``data`` keeps its parts."""

    data: Path

    @property
    def work(self) -> Path:
        return self.data.with_name(f".{self.data.name}.upgrade")

    @property
    def new(self) -> Path:
        return self.work / "new"

    @property
    def ready(self) -> Path:
        return self.work / "READY"

    @property
    def backup(self) -> Path:
        return self.data.with_name(f"{self.data.name}.before-upgrade")

    @property
    def lock(self) -> Path:
        return self.data.with_name(f".{self.data.name}.upgrade.lock")


def major(pgdata: Path) -> int | None:
    """The PostgreSQL major that made ``pgdata``, None if it holds no cluster."""
    try:
        return int((pgdata / "PG_VERSION").read_text().strip())
    except (OSError, ValueError):
        return None


def prepare(data_dir: Path, target: int, bins: dict[int, Path], user: str | None) -> None:
    """Make ``data_dir`` ready to open with PostgreSQL ``target``: finish or undo an upgrade a
    crash interrupted, then upgrade a cluster of an older major that ``bins`` has binaries
    for. Refuses, naming it, a directory of a major it cannot open."""
    layout = Layout(data_dir)
    if major(data_dir) in (target, None) and not (layout.work.exists() or layout.backup.exists()):
        return  # a directory of this major, or a new one: nothing to upgrade, no lock to take
    with _locked(layout):
        recover(layout, user)
        found = major(data_dir)
        if found is None or found == target:
            return
        if found not in bins or found > target:
            raise DatabaseUnavailableError(
                f"the data directory {data_dir} holds PostgreSQL {found}; the embedded server"
                f" runs {target} and upgrades only from {sorted(m for m in bins if m < target)}."
                " Set DATABASE_URL to use another server."
            )
        _upgrade(layout, bins[found], bins[target], user)


@contextlib.contextmanager
def _locked(layout: Layout) -> Iterator[None]:
    """One process at a time upgrades a data directory (the others wait, then find it done)."""
    try:
        import fcntl
    except ImportError:  # Windows: the package's own lock file
        import fasteners  # type: ignore[import-untyped]

        with fasteners.InterProcessLock(str(layout.lock)):
            yield
        return
    with open(layout.lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # let go by the kernel if this process dies
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def recover(layout: Layout, user: str | None) -> None:
    """Bring a data directory whose upgrade was interrupted to a whole state (see the module)."""
    if layout.ready.exists():
        if layout.new.exists():
            if layout.data.exists():
                layout.data.rename(layout.backup)
            layout.new.rename(layout.data)
            _sync_dir(layout.data.parent)
        log.info("embedded PostgreSQL: the upgrade of %s is in place", layout.data)
        shutil.rmtree(layout.backup, ignore_errors=True)
        shutil.rmtree(layout.work, ignore_errors=True)
        return
    if layout.work.exists():
        log.warning("embedded PostgreSQL: an upgrade of %s was interrupted; again", layout.data)
        _stop_strays(layout)
        shutil.rmtree(layout.work)
    if layout.backup.exists() and major(layout.data) is None:
        if layout.data.exists():
            layout.data.rmdir()  # empty: nothing was ever started in it
        layout.backup.rename(layout.data)
        _sync_dir(layout.data.parent)


def _stop_strays(layout: Layout) -> None:
    """Stop what a killed upgrade left running: pg_upgrade itself, and the servers it started
    on the old directory and the new one (each names its directory on its command line)."""
    import psutil

    marks = (str(layout.work), str(layout.data))
    for proc in psutil.process_iter(attrs=("name", "cmdline")):
        cmdline = " ".join(proc.info["cmdline"] or ())
        upgrading = proc.info["name"] == "pg_upgrade" and str(layout.work) in cmdline
        # pg_upgrade starts the servers in binary-upgrade mode (-b)
        serving = proc.info["name"] == "postgres" and " -b" in f" {cmdline} "
        if upgrading or (serving and any(mark in cmdline for mark in marks)):
            log.warning("embedded PostgreSQL: stopping %s left by an interrupted upgrade", proc)
            with contextlib.suppress(psutil.Error):
                proc.kill()
                proc.wait(10)


def _upgrade(layout: Layout, old_bin: Path, new_bin: Path, user: str | None) -> None:
    from agent_memory.db import embedded

    busy = embedded.live_users(layout.data)
    if busy:
        raise DatabaseUnavailableError(
            f"the data directory {layout.data} is in use by process(es) {busy} of an earlier"
            " release: stop them, then start again to upgrade it to PostgreSQL"
            f" {new_bin.parent.name}; nothing was changed"
        )
    log.warning("embedded PostgreSQL: upgrading %s with pg_upgrade", layout.data)
    if layout.backup.exists():
        raise DatabaseUnavailableError(
            f"cannot upgrade {layout.data}: {layout.backup} is in the way (a backup of an"
            " earlier upgrade?); move it elsewhere, then start again; nothing was changed"
        )
    try:
        _copy_and_check(layout, old_bin, new_bin, user)
    except BaseException:
        # the old directory was only read: drop the new one, so the next start begins afresh
        _stop_strays(layout)
        shutil.rmtree(layout.work, ignore_errors=True)
        raise
    _write_ready(layout)
    recover(layout, user)


def _copy_and_check(layout: Layout, old_bin: Path, new_bin: Path, user: str | None) -> None:
    """The new cluster beside the old one, filled by pg_upgrade and checked against it."""
    secret = _secret(layout.data)
    pg_ctl = [str(old_bin / "pg_ctl"), "-D", str(layout.data)]
    if _run([*pg_ctl, "status"], user, ok=(0, 3)) == 0:  # running, for no live process
        _run([*pg_ctl, "-w", "-m", "fast", "stop"], user)
    with _socket_dir(user) as sockets:
        with _running(old_bin, layout.data, sockets, user) as url:
            before = cluster_census.census(url, secret)
        layout.work.mkdir()
        _give(layout.work, user)
        _initdb(new_bin, layout.new, before, user)
        _run(
            [
                str(new_bin / "pg_upgrade"),
                *("-b", str(old_bin), "-B", str(new_bin)),
                *("-d", str(layout.data), "-D", str(layout.new)),
                *("-U", "postgres", "-s", str(sockets), "--copy"),
            ],
            user,
            cwd=layout.work,
            env={"PGPASSWORD": secret} if secret else None,
        )
        for name in CARRIED:
            _carry(layout.data / name, layout.new / name)
        with _running(new_bin, layout.new, sockets, user) as url:
            cluster_census.update_extensions(url, secret)
            after = cluster_census.census(url, secret)
    cluster_census.compare(before, after, layout.data)


def _secret(data: Path) -> str | None:
    with contextlib.suppress(OSError):
        return (data / auth.SECRET_FILE).read_text().strip()
    return None


def _initdb(bin_dir: Path, pgdata: Path, census_: dict[str, Any], user: str | None) -> None:
    """A new cluster as the old one was made: its encoding, locale and page checksums."""
    settings = census_["cluster"]
    _run(
        [
            str(bin_dir / "initdb"),
            *("-D", str(pgdata), "-U", "postgres", "--auth=trust"),
            f"--encoding={settings['encoding']}",
            f"--lc-collate={settings['collate']}",
            f"--lc-ctype={settings['ctype']}",
            "--data-checksums" if settings["checksums"] == "on" else "--no-data-checksums",
        ],
        user,
    )


@contextlib.contextmanager
def _socket_dir(user: str | None) -> Iterator[Path]:
    """A short private folder for the servers' sockets (a socket's path is at most ~100
    bytes, so not inside the data directory's parent)."""
    folder = Path(tempfile.mkdtemp(prefix="agent-memory-upgrade-"))
    try:
        _give(folder, user)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _running(bin_dir: Path, pgdata: Path, sockets: Path, user: str | None) -> Iterator[str]:
    """``pgdata``'s server, on a socket in ``sockets`` only, while the block runs."""
    options = f"-c listen_addresses= -k {sockets} -p 50439"
    log_file = sockets / f"{pgdata.name}.log"
    pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(pgdata), "-w"]
    _run([*pg_ctl, "-o", options, "-l", str(log_file), "start"], user)
    try:
        yield psycopg.conninfo.make_conninfo(
            host=str(sockets), port="50439", user="postgres", dbname="postgres"
        )
    finally:
        _run([*pg_ctl, "-m", "fast", "stop"], user)


def _run(
    argv: list[str],
    user: str | None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    ok: tuple[int, ...] = (0,),
) -> int:
    """A PostgreSQL command, as ``user`` in its own group (as root); its output in the error."""
    from agent_memory.db.embedded import own_group

    kwargs = own_group({"user": user}) if user else {}
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=COMMAND_TIMEOUT_S,
        check=False,
        **kwargs,
    )
    if done.returncode not in ok:
        output = (done.stdout + done.stderr).strip()[-2000:]
        raise DatabaseUnavailableError(
            f"upgrading the embedded PostgreSQL: {Path(argv[0]).name} failed"
            f" (exit {done.returncode}): {output}"
        )
    return done.returncode


def _carry(source: Path, target: Path) -> None:
    """``source`` copied whole over ``target``, with its mode and owner."""
    if not source.exists():
        return
    shutil.copy2(source, target)
    if os.name == "posix" and os.geteuid() == 0:
        owner = source.stat()
        os.chown(target, owner.st_uid, owner.st_gid)


def _give(path: Path, user: str | None) -> None:
    if user is not None:
        shutil.chown(path, user, user)


def _write_ready(layout: Layout) -> None:
    """The mark that the new cluster is complete and checked: from here the swap goes forward."""
    with open(layout.ready, "w") as handle:
        handle.write("the new cluster is complete and checked\n")
        handle.flush()
        os.fsync(handle.fileno())
    _sync_dir(layout.work)


def _sync_dir(folder: Path) -> None:
    """A rename or a new file in ``folder`` on disk (a directory's own fsync)."""
    with contextlib.suppress(OSError):  # not every system opens a directory
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["Layout", "major", "prepare", "recover"]
