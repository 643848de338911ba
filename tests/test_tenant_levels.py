"""Tenant mode with levels of memory (issue 39; sql/0023): a tenant of (alice, support) reads
the facts of the levels its scope reads, and nothing else, whatever SQL it runs; it writes its
own scope only. Each probe is hand-written SQL on the tenant's own connection."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.settings import MemorySettings, Settings
from tests.tenant_server import secure_database_url

ALICE = Scope("alice")
SUPPORT = Scope("alice", "support")
SUPPORT_W1 = Scope("alice", "support", "w1")
BILLING = Scope("alice", "billing")
SUPPORT_ITSELF = Scope(agent_id="support")
BOB = Scope("bob")

FILED = {
    ALICE: "alice is on sap cloud",
    SUPPORT: "alice ticket 4711 waits on support",
    SUPPORT_W1: "alice migration run w1 restarted the gateway",
    BILLING: "alice pays by sepa",
    SUPPORT_ITSELF: "support restarts a gateway with sapcontrol",
    BOB: "bob is on sap business one",
}
# a fact row of a scope, written by hand (the columns a write must give)
INSERT = """INSERT INTO agent_memory.memory_items
    (user_id, agent_id, workflow_id, content, content_hash, importance, importance_at,
     kind, half_life, expires_day)
SELECT %s, %s, %s, %s, sha256(convert_to(%s, 'UTF8')), 0.5, now(), 'general', 10, 100000"""


@pytest.fixture
def database_url(secure_pg_server: dict[str, Any]) -> Iterator[str]:
    """Tenant mode refuses a server that trusts connections: this one asks for passwords."""
    yield from secure_database_url(secure_pg_server)


def refused(conn: psycopg.Connection[Any], statement: str, *params: Any) -> str:
    with pytest.raises(psycopg.Error) as caught, conn.transaction():
        conn.execute(statement, params or None)
    return str(caught.value)


def contents(conn: psycopg.Connection[Any], statement: str) -> set[str]:
    return {str(r[0]) for r in conn.execute(statement).fetchall()}


async def _tenant(settings: Settings, scope: Scope, share: str) -> str:
    shared = settings.model_copy(update={"memory": MemorySettings(share=share)})  # type: ignore[arg-type]
    owner = await MemoryManager.create(settings=shared, migrate=False)
    try:
        for filed, content in FILED.items():
            await owner.add_fact(filed, content, importance=0.8)
        return await owner.create_tenant(scope)
    finally:
        await owner.close()


async def test_a_tenant_reads_its_levels_and_nothing_else(settings: Settings) -> None:
    url = await _tenant(settings, SUPPORT, "user,agent")
    with psycopg.connect(url, autocommit=True) as tenant:
        seen = contents(tenant, "SELECT content FROM agent_memory.memory_items")
        assert seen == {FILED[ALICE], FILED[SUPPORT], FILED[SUPPORT_ITSELF]}
        # the statistics it ranks by are those of the same levels
        keys = contents(tenant, "SELECT DISTINCT scope_key FROM agent_memory.term_counts")
        own = contents(
            tenant,
            "SELECT DISTINCT scope_key FROM agent_memory.memory_items",
        )
        assert keys == own and len(keys) == 3
        # a sibling's and another user's rows are not there, however asked
        assert not contents(
            tenant,
            "SELECT content FROM agent_memory.memory_items"
            " WHERE agent_id = 'billing' OR user_id = 'bob' OR workflow_id = 'w1'",
        )
        # its own scope takes a write; the person's level does not, nor a sibling's
        tenant.execute(INSERT, ("alice", "support", None, "own note", "own note"))
        for parts in (("alice", None, None), ("alice", "billing", None), (None, "support", None)):
            error = refused(tenant, INSERT, *parts, "planted", "planted")
            assert "row-level security" in error
        # nor can it change or lock a fact of a level it reads
        assert (
            tenant.execute(
                "UPDATE agent_memory.memory_items SET importance = 1 WHERE agent_id IS NULL"
            ).rowcount
            == 0
        )
        assert not tenant.execute(
            "SELECT id FROM agent_memory.memory_items WHERE agent_id IS NULL FOR UPDATE"
        ).fetchall()


async def test_a_tenant_made_with_share_exact_reads_its_scope_alone(settings: Settings) -> None:
    url = await _tenant(settings, SUPPORT, "exact")
    with psycopg.connect(url, autocommit=True) as tenant:
        assert contents(tenant, "SELECT content FROM agent_memory.memory_items") == {FILED[SUPPORT]}


async def test_a_tenants_manager_injects_the_persons_facts(settings: Settings) -> None:
    url = await _tenant(settings, SUPPORT, "user")
    agent = await MemoryManager.create(url, settings=settings)
    try:
        frame = await agent.inject(SUPPORT, query="which sap system is alice on")
        assert FILED[ALICE] in frame.injected_facts
        assert FILED[SUPPORT_ITSELF] not in frame.injected_facts
        # asking as another scope through the tenant's connection reads only what it may
        frame = await agent.inject(BILLING, query="how does alice pay")
        assert FILED[BILLING] not in frame.injected_facts
        assert set(frame.injected_facts) <= {FILED[ALICE]}
    finally:
        await agent.close()
