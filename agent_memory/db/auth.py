"""Passwords for tenant mode: no connection gets in as a tenant without its password, and none
as the superuser without one.

PostgreSQL asks for a password only where ``pg_hba.conf`` says so. The embedded server
(pgserver) is made with every local connection trusted, so there the URL ``tenant create``
printed worked with any password, and ``user=postgres`` in it gave a superuser. Hence:

* the embedded server's superuser has a password, a random secret kept in the data directory
  (:data:`SECRET_FILE`, mode 600: only the owner's system user reads it), which the owner's
  connections carry with no action from anyone (:func:`owner_secret`);
* once tenant mode is used there (or on the first start of a data directory that has tenant
  roles already), ``pg_hba.conf`` is rewritten to ask every role for its password
  (scram-sha-256) and the server reloads it (:func:`secure_embedded`);
* on any server, tenant mode is refused while ``pg_hba.conf`` trusts any connection
  (:func:`trusting_rules`, read from ``pg_hba_file_rules`` where the role may).

Passwords are sent as SCRAM verifiers (:func:`scram_verifier`), never in clear: a statement's
text can reach the server's log and ``pg_stat_activity``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from agent_memory.errors import ConfigurationError

log = logging.getLogger(__name__)

SECRET_FILE = "agent_memory_owner.secret"
# a password file that is not there: a connection that must give no password reads none
NO_PASSFILE = "/nonexistent/agent-memory/no-pgpass"

# every role, every database, local socket and loopback alike: a password (what initdb
# --auth=scram-sha-256 writes, less the comments)
HBA = """\
# Written by agent-memory for tenant mode: every connection gives its role's password.
# TYPE  DATABASE     USER  ADDRESS       METHOD
local   all          all                 scram-sha-256
host    all          all   127.0.0.1/32  scram-sha-256
host    all          all   ::1/128       scram-sha-256
local   replication  all                 scram-sha-256
host    replication  all   127.0.0.1/32  scram-sha-256
host    replication  all   ::1/128       scram-sha-256
"""

TRUSTING = """
SELECT line_number, type, array_to_string(database, ','), array_to_string(user_name, ','),
       coalesce(address, ''), file_name
FROM pg_hba_file_rules WHERE auth_method = 'trust' AND error IS NULL ORDER BY line_number
"""
MAY_READ_RULES = "SELECT has_function_privilege('pg_hba_file_rules()', 'EXECUTE')"


def scram_verifier(password: str, iterations: int = 4096) -> str:
    """``password`` as PostgreSQL stores it under scram-sha-256 (RFC 5802, 7677): what
    ``ALTER ROLE ... PASSWORD`` may be given instead of the password itself. ``password`` is
    ASCII here (SASLprep leaves it as it is)."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    stored_key = hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def set_password(role: str, password: str) -> sql.Composed:
    """The statement that gives ``role`` ``password`` (as a verifier)."""
    return sql.SQL("ALTER ROLE {} PASSWORD {}").format(
        sql.Identifier(role), sql.Literal(scram_verifier(password))
    )


def owner_secret(data_dir: Path) -> str:
    """The embedded server's superuser password: read from the data directory, or made now
    (mode 600, written whole before it appears: a process starting at the same moment reads
    the one that won)."""
    path = data_dir / SECRET_FILE
    with contextlib.suppress(FileNotFoundError):
        return path.read_text().strip()
    secret = secrets.token_urlsafe(32)
    draft = data_dir / f".{SECRET_FILE}.{os.getpid()}"
    _write_private(draft, secret)
    try:
        os.link(draft, path)  # fails if another process made it first
    except FileExistsError:
        secret = path.read_text().strip()
    finally:
        draft.unlink()
    return secret


def hba_trusts(text: str) -> bool:
    """Whether ``pg_hba.conf`` text has a rule whose method is ``trust``."""
    # the method follows the type, database, user (and address): options are key=value
    return any("trust" in line.split("#", 1)[0].split()[3:] for line in text.splitlines())


RELOAD_DEADLINE_S = 60.0  # how long the rewritten rules may take to be in force


def _refuses_without_password(dsn: str) -> bool:
    params: dict[str, Any] = psycopg.conninfo.conninfo_to_dict(dsn)
    params.pop("password", None)
    # no password file either: only the server's rules decide
    bare = psycopg.conninfo.make_conninfo("", **params, passfile=NO_PASSFILE, connect_timeout=5)
    try:
        psycopg.connect(bare).close()
    except psycopg.OperationalError:
        return True
    return False


def secure_embedded(data_dir: Path, dsn: str) -> bool:
    """Make the embedded server in ``data_dir`` ask every role for its password: the
    superuser's is :func:`owner_secret`, set first (``dsn``, the owner's, carries it), then
    ``pg_hba.conf`` is rewritten and reloaded. Safe to rerun, and after a crash at any point.
    True if it changed the rules now."""
    secret = owner_secret(data_dir)
    with psycopg.connect(dsn, autocommit=True) as conn:
        user = conn.info.user
        conn.execute(set_password(user, secret))
        row = conn.execute("SHOW hba_file").fetchone()
        hba = Path(str(row[0])) if row else data_dir / "pg_hba.conf"
        if not hba_trusts(hba.read_text()):
            return False
        log.warning(
            "embedded PostgreSQL in %s: tenant mode asks every role for its password from now"
            " on (pg_hba.conf rewritten; the owner's is in %s)",
            data_dir,
            data_dir / SECRET_FILE,
        )
        _rewrite(hba, HBA)
        conn.execute("SELECT pg_reload_conf()")
    # the server reloads its rules a moment after the signal: on a loaded machine, where each
    # connection tried meanwhile is a process to start, that moment can be many seconds
    deadline = time.monotonic() + RELOAD_DEADLINE_S
    while not _refuses_without_password(dsn):
        if time.monotonic() > deadline:
            raise ConfigurationError(
                f"the embedded PostgreSQL in {data_dir} still lets connections in without a"
                " password after its pg_hba.conf was rewritten and reloaded"
            )
        time.sleep(0.05)
    return True


def _rewrite(path: Path, text: str) -> None:
    """Replace ``path`` whole, keeping its owner and mode (the server's system user reads it)."""
    old = path.stat()
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    _write_private(draft, text)
    if os.geteuid() == 0:
        os.chown(draft, old.st_uid, old.st_gid)
    os.chmod(draft, old.st_mode & 0o777)
    os.replace(draft, path)


def tenants_exist(dsn: str) -> bool:
    """Whether the server has tenant roles (members of the group)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            """SELECT EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
                              WHERE g.rolname = 'agent_memory_tenant')"""
        ).fetchone()
    return bool(row and row[0])


async def trusting_rules(conn: psycopg.AsyncConnection[Any]) -> list[str] | None:
    """The ``pg_hba.conf`` rules that let a connection in with no password (``trust``), each
    as ``file:line: type database user address``; None when this role may not read them."""
    row = await (await conn.execute(MAY_READ_RULES)).fetchone()
    if not (row and row[0]):
        return None
    rows = await (await conn.execute(TRUSTING)).fetchall()
    return [f"{r[5]}:{r[0]}: {r[1]} {r[2]} {r[3]} {r[4]}".rstrip() + " trust" for r in rows]


async def refuse_trust(conn: psycopg.AsyncConnection[Any]) -> None:
    """Raise :class:`ConfigurationError` if the server lets connections in without a password
    (tenant mode would confine nobody: anyone could log in as a tenant, or as a superuser)."""
    rules = await trusting_rules(conn)
    if rules is None:
        log.warning(
            "tenant mode: this role may not read pg_hba_file_rules; make sure pg_hba.conf asks"
            " every role for its password (no 'trust' rules)"
        )
        return
    if rules:
        raise ConfigurationError(
            "tenant mode is refused: this server lets connections in without a password, so"
            " anyone could log in as a tenant or as a superuser. Change 'trust' to"
            " 'scram-sha-256' in these pg_hba.conf rules, give every login role a password, and"
            " reload (SELECT pg_reload_conf()): " + "; ".join(rules)
        )


def _write_private(path: Path, text: str) -> None:
    """``text`` in a new file at ``path`` that only its owner reads (mode 600), on disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
