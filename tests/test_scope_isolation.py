"""Property: a scope sees exactly its own facts, NULL parts included — the same answer as the
seed's IS NOT DISTINCT FROM query, but through the index."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_memory import MemoryManager, Scope
from agent_memory.db import facts as fact_repo
from agent_memory.db.fragments import SCOPE_KEY, SCOPE_MATCH
from agent_memory.models import Fact
from agent_memory.settings import MemorySettings, Settings

SEED_QUERY = """
SELECT content FROM agent_memory.memory_items
WHERE user_id IS NOT DISTINCT FROM %s AND agent_id IS NOT DISTINCT FROM %s
  AND workflow_id IS NOT DISTINCT FROM %s
ORDER BY content
"""

# parts chosen to collide if the encoding were careless: separators, quotes, the word NULL
part = st.one_of(
    st.none(),
    st.sampled_from(["a", "b", "a,b", "NULL", "'", "''", ",", "E'a'", "\\", "null"]),
    st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        min_size=1,
        max_size=6,
    ),
)
scopes = st.lists(st.builds(Scope, part, part, part), min_size=1, max_size=12, unique=True)


@pytest.fixture
def sync_manager(settings: Settings) -> Iterator[MemoryManager]:
    # the scope alone (AGENT_MEMORY_SHARE=exact): what levels add is checked below
    exact = settings.model_copy(update={"memory": MemorySettings(share="exact")})
    manager = MemoryManager.create_sync(settings=exact, migrate=False)
    yield manager
    manager.close_sync()


@pytest.fixture
def sharing_manager(settings: Settings) -> Iterator[MemoryManager]:
    shared = settings.model_copy(update={"memory": MemorySettings(share="user,agent")})
    manager = MemoryManager.create_sync(settings=shared, migrate=False)
    yield manager
    manager.close_sync()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scopes=scopes)
def test_each_scope_sees_exactly_its_own_facts(
    sync_manager: MemoryManager, db: psycopg.Connection[Any], scopes: list[Scope]
) -> None:
    db.execute("TRUNCATE agent_memory.memory_items CASCADE")
    now = datetime.now(UTC)
    with sync_manager.backend.spool().connection() as conn:
        for i, scope in enumerate(scopes):
            conn.execute(
                fact_repo.UPSERT,
                fact_repo.upsert_params(
                    scope, Fact(content=f"fact-{i}", importance=0.5), now, None
                ),
            )
    for i, scope in enumerate(scopes):
        frame = sync_manager.inject_sync(scope)
        assert frame.injected_facts == [f"fact-{i}"], scope
        oracle = [r[0] for r in db.execute(SEED_QUERY, scope.params).fetchall()]
        assert oracle == frame.injected_facts


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scopes=scopes)
def test_each_scope_sees_exactly_the_facts_of_its_levels(
    sharing_manager: MemoryManager, db: psycopg.Connection[Any], scopes: list[Scope]
) -> None:
    """With levels, still through the index: a scope sees its own facts and those of the
    scopes Scope.levels names (parts left out, never a part changed), and no other."""
    db.execute("TRUNCATE agent_memory.memory_items CASCADE")
    now = datetime.now(UTC)
    with sharing_manager.backend.spool().connection() as conn:
        for i, scope in enumerate(scopes):
            conn.execute(
                fact_repo.UPSERT,
                fact_repo.upsert_params(
                    scope, Fact(content=f"fact-{i}", importance=0.5), now, None
                ),
            )
    for scope in scopes:
        frame = sharing_manager.inject_sync(scope)
        read = scope.levels("user,agent")
        expected = {f"fact-{i}" for i, other in enumerate(scopes) if other in read}
        assert set(frame.injected_facts) == expected, scope


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scope=st.builds(Scope, part, part, part))
def test_the_key_has_one_value_in_queries_and_in_stored_rows(
    db: psycopg.Connection[Any], scope: Scope
) -> None:
    """The generated columns call agent_memory.scope_key (PL/pgSQL, never inlined), the queries
    scope_key_inline (SQL, inlined): both give one key for every scope (sql/0036)."""
    params = {
        "user_id": scope.user_id,
        "agent_id": scope.agent_id,
        "workflow_id": scope.workflow_id,
    }
    row = db.execute(
        f"SELECT agent_memory.scope_key(%(user_id)s, %(agent_id)s, %(workflow_id)s), {SCOPE_KEY}",
        params,
    ).fetchone()
    assert row is not None and row[0] == row[1]
    # and the key a write stores is the key a query looks for
    db.execute("TRUNCATE agent_memory.memory_items CASCADE")
    db.execute(
        fact_repo.UPSERT,
        fact_repo.upsert_params(
            scope, Fact(content="a fact", importance=0.5), datetime.now(UTC), None
        ),
    )
    query = f"SELECT count(*) FROM agent_memory.memory_items WHERE {SCOPE_MATCH}"  # noqa: S608
    found = db.execute(query, params).fetchone()
    assert found == (1,)
