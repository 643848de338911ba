"""LangGraph's own store tests, run on ``AgentMemoryStore`` (see README.md here).

The vendored files are upstream's text. What this adapter changes is only how a store is made:

* upstream's ``tests.conftest`` and ``tests.embed_test_utils`` (its package is also named
  ``tests``) are the vendored copies while a vendored file is imported;
* in each vendored module, the fixtures and helpers that construct ``PostgresStore`` /
  ``AsyncPostgresStore`` on upstream's Docker database (``store``, ``_create_vector_store``,
  ``_create_pool_store``) are replaced by ones that construct ``AgentMemoryStore`` on a fresh
  database of the suite's embedded PostgreSQL, and the core file's ``InMemoryStore`` is
  ``AgentMemoryStore`` (but in the tests of langgraph's own ``AsyncBatchedBaseStore``,
  :data:`UPSTREAM_OWN`);
* :data:`CANNOT_PASS` marks, in this one place, the tests that reach into PostgresStore's own
  internals (its table, its private ``_cursor()``, its pool helper), as strict xfails (one that
  starts passing fails the run until it leaves the list), and tests of halfvec are skipped on a
  server whose pgvector is older than 0.7.
"""

from __future__ import annotations

import inspect
import sys
import types
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.janitor import DatabaseJanitor

from agent_memory.manager import MemoryManager
from agent_memory.settings import DatabaseSettings, LLMSettings, MemorySettings, Settings
from agent_memory.store import AgentMemoryStore
from tests.conftest import TEMPLATE
from tests.upstream import embed_test_utils

HERE = Path(__file__).parent
CORE = HERE / "checkpoint" / "test_store.py"
SYNC = HERE / "checkpoint_postgres" / "test_store.py"
ASYNC = HERE / "checkpoint_postgres" / "test_async_store.py"

INTERNALS = "tests PostgresStore's internals, which AgentMemoryStore does not have"
TABLE = "reads PostgresStore's own table through its private _cursor()"

# test (node id under tests/upstream, without parameters) -> why it cannot pass here
CANNOT_PASS: dict[str, str] = {
    # counts the checkouts of langgraph.checkpoint.postgres._ainternal.get_connection
    "checkpoint_postgres/test_async_store.py::test_abatch_uses_single_pool_checkout": INTERNALS,
    # they backdate and read rows of PostgresStore's own table (``store``, by ``prefix``)
    # through its private ``_cursor()``
    **{
        f"checkpoint_postgres/{file}::{name}": TABLE
        for file in ("test_store.py", "test_async_store.py")
        for name in (
            "test_omit_expired_filters_read_paths",
            "test_omit_expired_disabled_preserves_expired_rows",
            "test_omit_expired_refresh_ttl_only_refreshes_live_rows",
            "test_omit_expired_search_pagination",
        )
    },
}

# the core file's tests of langgraph's own AsyncBatchedBaseStore over its InMemoryStore (one
# spies on InMemoryStore.batch): run on InMemoryStore, as written
UPSTREAM_OWN = {
    "test_async_batch_store",
    "test_async_batch_store_handles_cancellation",
    "test_async_batch_store_deduplication",
    # its MockAsyncBatchedStore calls InMemoryStore.batch from its abatch, on the loop's thread
    "test_async_batched_vector_search_concurrent",
}

_PG: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _upstream_server(request: pytest.FixtureRequest, pg_server: dict[str, Any]) -> None:
    """The session's PostgreSQL, for the helpers that upstream's test bodies call; a test of
    halfvec skipped when its pgvector is older than 0.7."""
    _PG.update(pg_server)
    if "halfvec" in request.node.name:
        _needs_halfvec(pg_server)


@contextmanager
def _fresh_settings() -> Iterator[Settings]:
    """Settings on a fresh, migrated database (a copy of the suite's template)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with DatabaseJanitor(dbname=name, template_dbname=TEMPLATE, **_PG):
        url = psycopg.conninfo.make_conninfo(dbname=name, **{k: str(v) for k, v in _PG.items()})
        yield Settings(
            db=DatabaseSettings(url=url, pool_min_size=1, pool_max_size=4),
            llm=LLMSettings(model=None),
            memory=MemorySettings(),
        )


def _options(**options: Any) -> dict[str, Any]:
    """Upstream's constructor options that AgentMemoryStore takes: ``ttl`` (as upstream's
    fixtures give every store) once it has TTL; ``index`` always (refused until built)."""
    if "ttl" in options and "ttl" not in inspect.signature(AgentMemoryStore).parameters:
        del options["ttl"]
    return {k: v for k, v in options.items() if v is not None or k != "ttl"}


TTL_CONFIG = {"default_ttl": 0.1, "refresh_on_read": True, "sweep_interval_minutes": 0.05}


# ---- the fixtures and helpers put in upstream's modules ------------------------------------


@pytest.fixture
def sync_store() -> Iterator[AgentMemoryStore]:
    with _fresh_settings() as settings:
        manager = MemoryManager.create_sync(settings=settings, migrate=False)
        try:
            yield AgentMemoryStore(manager, **_options(ttl=TTL_CONFIG))
        finally:
            manager.close_sync()


@pytest.fixture
async def async_store() -> AsyncIterator[AgentMemoryStore]:
    with _fresh_settings() as settings:
        manager = await MemoryManager.create(settings=settings, migrate=False)
        try:
            yield AgentMemoryStore(manager, **_options(ttl=TTL_CONFIG))
        finally:
            await manager.close()


@contextmanager
def sync_vector_store(
    vector_type: str,
    distance_type: str,
    fake_embeddings: Any,
    text_fields: list[str] | None = None,
    enable_ttl: bool = True,
) -> Iterator[AgentMemoryStore]:
    index = {
        "dims": fake_embeddings.dims,
        "embed": fake_embeddings,
        "ann_index_config": {"vector_type": vector_type},
        "distance_type": distance_type,
        "fields": text_fields,
    }
    ttl = {"default_ttl": 2, "refresh_on_read": True} if enable_ttl else None
    with _fresh_settings() as settings:
        manager = MemoryManager.create_sync(settings=settings, migrate=False)
        try:
            yield AgentMemoryStore(manager, **_options(index=index, ttl=ttl))
        finally:
            manager.close_sync()


@asynccontextmanager
async def async_vector_store(
    vector_type: str,
    distance_type: str,
    fake_embeddings: Any,
    text_fields: list[str] | None = None,
) -> AsyncIterator[AgentMemoryStore]:
    index = {
        "dims": fake_embeddings.dims,
        "embed": fake_embeddings,
        "ann_index_config": {"vector_type": vector_type},
        "distance_type": distance_type,
        "fields": text_fields,
    }
    with _fresh_settings() as settings:
        manager = await MemoryManager.create(settings=settings, migrate=False)
        try:
            yield AgentMemoryStore(manager, **_options(index=index))
        finally:
            await manager.close()


@asynccontextmanager
async def _async_plain() -> AsyncIterator[AgentMemoryStore]:
    with _fresh_settings() as settings:
        manager = await MemoryManager.create(settings=settings, migrate=False)
        try:
            yield manager.store()
        finally:
            await manager.close()


@pytest.fixture
def fake_embeddings() -> embed_test_utils.CharacterEmbeddings:
    """Upstream's conftest fixture (its conftest is not loaded: it connects to Docker)."""
    return embed_test_utils.CharacterEmbeddings(dims=500)


@pytest.fixture(autouse=True)
def _core_store(request: pytest.FixtureRequest, _upstream_server: None) -> Iterator[None]:
    """The core file's ``InMemoryStore()``: one AgentMemoryStore per test, made here, outside
    the event loop (as InMemoryStore, usable from sync and async code alike); with options
    (``index=``), a store of its own."""
    module = request.module
    if Path(module.__file__) != CORE or request.function.__name__ in UPSTREAM_OWN:
        yield
        return
    with ExitStack() as stack:
        managers: list[MemoryManager] = []

        def fresh() -> MemoryManager:
            settings = stack.enter_context(_fresh_settings())
            managers.append(MemoryManager.create_sync(settings=settings, migrate=False))
            return managers[-1]

        plain = fresh().store()

        def in_memory_store(**options: Any) -> AgentMemoryStore:
            # each InMemoryStore(...) upstream makes holds nothing of another's: a database each
            return AgentMemoryStore(fresh(), **_options(**options)) if options else plain

        original = module.InMemoryStore
        module.InMemoryStore = in_memory_store
        try:
            yield
        finally:
            module.InMemoryStore = original
            for manager in managers:
                manager.close_sync()


# ---- importing upstream's modules ------------------------------------------------------


def _adapt(module: types.ModuleType, path: Path) -> None:
    if path == SYNC:
        module.store = sync_store
        module._create_vector_store = sync_vector_store
    elif path == ASYNC:
        module.store = async_store
        module._create_vector_store = async_vector_store
        module._create_pool_store = _async_plain


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    """Import a vendored module with upstream's ``tests.*`` helpers in place, then put the
    adapter's store construction in it, before pytest reads its fixtures."""
    collector = yield
    if module_path not in (CORE, SYNC, ASYNC):
        return collector
    saved = {name: sys.modules.get(name) for name in ("tests.conftest", "tests.embed_test_utils")}
    sys.modules["tests.embed_test_utils"] = embed_test_utils
    try:
        from tests.upstream.checkpoint_postgres import upstream_conftest

        sys.modules["tests.conftest"] = upstream_conftest
        module = collector.obj
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    _adapt(module, module_path)
    return collector


_PGVECTOR: list[tuple[int, ...]] = []


# 6,000 sync calls from threads and 60,000 concurrent async calls: about 15 s each here
SLOW = {"test_large_batches", "test_large_batches_async"}


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py's, which reads the slow marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Apply :data:`CANNOT_PASS` and :data:`SLOW` to the vendored tests."""
    for item in items:
        path = Path(str(item.path))
        if path not in (CORE, SYNC, ASYNC):
            continue
        name = f"{path.relative_to(HERE).as_posix()}::{item.name.split('[')[0]}"
        reason = CANNOT_PASS.get(f"{name}[{item.name.split('[', 1)[1]}" if "[" in item.name else "")
        reason = reason or CANNOT_PASS.get(name)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
        if item.name in SLOW:
            item.add_marker(pytest.mark.slow)


def _needs_halfvec(pg_server: dict[str, Any]) -> None:
    if not _PGVECTOR:
        with psycopg.connect(dbname=TEMPLATE, **pg_server) as conn:
            row = conn.execute(
                "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
        version = str(row[0]) if row else "0"
        _PGVECTOR.append(tuple(int(p) for p in version.split(".") if p.isdigit()))
    if _PGVECTOR[0] < (0, 7):
        version = ".".join(map(str, _PGVECTOR[0]))
        pytest.skip(f"halfvec needs pgvector >= 0.7; the server has {version}")
