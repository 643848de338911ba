"""Tenant mode: a tenant's login role sees and writes its own scope's rows only, whatever SQL
it runs (row-level security, sql/0016_tenants.sql); agent-facing code works on it; the owner
runs the pipeline unrestricted; dropping or erasing the scope removes the role."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from agent_memory import MemoryManager, Scope
from agent_memory.db.store import fact_key
from agent_memory.errors import UnknownScopeError
from agent_memory.settings import Settings
from tests.tenant_server import secure_database_url

ALICE, BOB = Scope(user_id="alice"), Scope(user_id="bob")


@pytest.fixture
def database_url(secure_pg_server: dict[str, Any]) -> Iterator[str]:
    """This module's database is on the server that asks for passwords (tenant mode refuses
    one that trusts connections)."""
    yield from secure_database_url(secure_pg_server)


async def seed(manager: MemoryManager) -> None:
    for scope in (ALICE, BOB):
        name = scope.user_id
        await manager.record(scope, [{"role": "user", "content": f"I am {name} and I like tea."}])
        await manager.add_fact(scope, f"{name} likes tea")
        await manager.store().aput(("memories", str(name)), "k", {"content": f"{name} has a dog"})
        await manager.store().aput(("memories", str(name), "notes"), "n", {"note": f"{name}"})
    await manager.index_pending()  # the conversations' sentences, as a moment later


def refused(conn: psycopg.Connection[Any], statement: str, *params: Any) -> str:
    """The error ``statement`` raises on ``conn`` (its transaction rolled back)."""
    with pytest.raises(psycopg.Error) as caught, conn.transaction():
        conn.execute(statement, params or None)
    return str(caught.value)


async def test_a_tenant_connection_cannot_reach_another_scope_with_hand_written_sql(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await seed(manager)
    url = await manager.create_tenant(ALICE)
    with psycopg.connect(url, autocommit=True) as tenant:
        scopes = (
            "SELECT count(*) FILTER (WHERE scope_key = agent_memory.scope_key('alice', NULL,"
            " NULL)), count(*) FILTER (WHERE scope_key IS DISTINCT FROM"
            " agent_memory.scope_key('alice', NULL, NULL)) FROM agent_memory.{}"
        )
        # term_counts: the words of a scope's rows, counted for ranking, are that scope's too
        for table in ("memory_items", "episodes", "snippets", "store_items", "term_counts"):
            own, others = tenant.execute(scopes.format(table)).fetchone() or (0, 0)
            assert own > 0 and others == 0, table
        assert (
            tenant.execute("SELECT count(*) FROM agent_memory.fact_sources").fetchone()
            == db.execute(
                "SELECT count(*) FROM agent_memory.fact_sources s JOIN agent_memory.memory_items m"
                " ON m.id = s.fact_id WHERE m.user_id = 'alice'"
            ).fetchone()
        )
        # writes to another scope's rows change nothing, or are refused
        for statement in (
            "UPDATE agent_memory.memory_items SET content = 'hacked' WHERE user_id = 'bob'",
            "UPDATE agent_memory.episodes SET messages = '[]' WHERE user_id = 'bob'",
        ):
            assert tenant.execute(statement).rowcount == 0, statement
        # a tenant deletes Store items through agent_memory.store_delete (no DELETE right)
        tenant.execute("SELECT agent_memory.store_delete('{memories,bob}', 'k')")
        assert "row-level security" in refused(
            tenant,
            "UPDATE agent_memory.memory_items SET user_id = 'bob' WHERE user_id = 'alice'",
        )
        assert "row-level security" in refused(
            tenant,
            "INSERT INTO agent_memory.episodes (user_id, messages, message_count)"
            " VALUES ('bob', %s, 1)",
            Jsonb([{"role": "user", "content": "planted"}]),
        )
        assert "row-level security" in refused(
            tenant,
            "INSERT INTO agent_memory.store_items (namespace, key, value)"
            " VALUES ('{docs}', 'k', '{}')",
        )
        assert "row-level security" in refused(
            tenant,
            "INSERT INTO agent_memory.term_counts (corpus, scope_key, lexeme, docs)"
            " VALUES ('f', agent_memory.scope_key('bob', NULL, NULL), 'tea', 1000)",
        )
        for table in ("extraction_cache", "tenants", "erasures", "decay_runs"):
            statement = f"SELECT * FROM agent_memory.{table}"  # noqa: S608 (our own names)
            assert "permission denied" in refused(tenant, statement)
        assert "permission denied" in refused(tenant, "DELETE FROM agent_memory.consolidation_jobs")
        assert "permission denied" in refused(tenant, "DELETE FROM agent_memory.store_items")
        assert "permission denied" in refused(tenant, "CREATE TABLE agent_memory.x (y int)")
        assert "permission denied" in refused(
            tenant, "UPDATE agent_memory.decay_policy SET factor = 0.5"
        )
        # a role it may become changes nothing: what counts is the login (session) role
        tenant.execute("SET ROLE agent_memory_tenant")
        assert tenant.execute(
            "SELECT DISTINCT user_id FROM agent_memory.memory_items"
        ).fetchall() == [("alice",)]
        tenant.execute("RESET ROLE")
        owner = db.execute("SELECT current_user").fetchone()
        assert owner is not None
        assert "permission denied" in refused(tenant, f'SET ROLE "{owner[0]}"')
    bob = db.execute(
        "SELECT content FROM agent_memory.memory_items WHERE user_id = 'bob' ORDER BY id"
    ).fetchall()
    assert bob == [("bob likes tea",), ("bob has a dog",)]
    assert db.execute(
        "SELECT count(*) FROM agent_memory.store_items WHERE user_id = 'bob'"
    ).fetchone() == (2,)


async def test_agent_facing_code_runs_as_a_tenant(
    manager: MemoryManager, settings: Settings
) -> None:
    await seed(manager)
    url = await manager.create_tenant(ALICE)
    tenant = await MemoryManager.create(url, settings=settings)  # migrate: a no-op for it
    try:
        await tenant.record(ALICE, [{"role": "user", "content": "My cat is called Miso."}])
        added = await tenant.add_fact(ALICE, "alice has a cat called Miso")
        frame = await tenant.inject(ALICE, query="what pets does alice have")
        assert "alice has a cat called Miso" in frame.injected_facts
        assert await tenant.facts(BOB) == []  # another scope is simply empty
        store = tenant.store()
        await store.aput(("memories", "alice"), "cat", {"content": "Miso is grey"})
        found = await store.asearch(("memories",), query="grey cat", limit=20)
        assert {i.namespace for i in found} <= {
            ("memories", "alice"),
            ("memories", "alice", "notes"),
        }
        assert fact_key(added.id) in {i.key for i in found}
        assert await store.alist_namespaces() == [
            ("memories", "alice"),
            ("memories", "alice", "notes"),
        ]
        with pytest.raises(psycopg.Error, match="row-level security"):
            await store.aput(("memories", "bob"), "x", {"content": "planted"})
        with pytest.raises(psycopg.Error, match="permission denied"):
            await tenant.erase(BOB)
    finally:
        await tenant.close()
    # the owner (the pipeline's role) sees every scope, unrestricted (every flow test runs
    # on tables with row-level security on, as the owner)
    assert {f.content for f in await manager.facts(BOB)} == {"bob has a dog", "bob likes tea"}
    assert "Miso is grey" in {f.content for f in await manager.facts(ALICE)}


async def test_a_tenants_record_queues_its_conversation_which_it_alone_reads_and_indexes(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    quiet = settings.model_copy(
        update={"memory": settings.memory.model_copy(update={"index_after_s": 0.0})}
    )
    owner = await MemoryManager.create(settings=quiet, migrate=False)
    url = await owner.create_tenant(ALICE)
    tenant = await MemoryManager.create(url, settings=quiet, migrate=False)
    try:
        await owner.record(BOB, [{"role": "user", "content": "I am bob. I grow leeks."}])
        mine = await tenant.record(ALICE, [{"role": "user", "content": "I grow tomatoes."}])
        queued = "SELECT user_id FROM agent_memory.snippet_queue q JOIN agent_memory.episodes e"
        queued += " ON e.id = q.episode_id ORDER BY 1"
        assert db.execute(queued).fetchall() == [("alice",), ("bob",)]
        with psycopg.connect(url, autocommit=True) as conn:
            # its own queue row only; it cannot remove any, nor queue another scope's
            rows = conn.execute("SELECT episode_id FROM agent_memory.snippet_queue").fetchall()
            assert rows == [(mine,)]
            assert "permission denied" in refused(conn, "DELETE FROM agent_memory.snippet_queue")
            assert "row-level security" in refused(
                conn,
                "INSERT INTO agent_memory.snippet_queue VALUES"
                " (agent_memory.scope_key('bob', NULL, NULL), 1)",
            )
        found = await tenant.search_conversations(ALICE, "what do I grow?")
        assert [(s.id, s.content) for s in found] == [(None, "I grow tomatoes.")]
        assert await tenant.search_conversations(BOB, "what do I grow?") == []
        # its drain indexes its own scope's conversations only
        assert await tenant.index_pending() == 1
        assert db.execute(queued).fetchall() == [("bob",)]
        found = await tenant.search_conversations(ALICE, "what do I grow?")
        assert [s.content for s in found] == ["I grow tomatoes."] and found[0].id is not None
        assert await owner.index_pending() == 1
    finally:
        await tenant.close()
        await owner.close()


async def test_a_tenant_role_is_listed_rekeyed_dropped_and_erased(
    manager: MemoryManager, db: psycopg.Connection[Any]
) -> None:
    await seed(manager)
    first = await manager.create_tenant(ALICE)
    again = await manager.create_tenant(ALICE)
    role = psycopg.conninfo.conninfo_to_dict(first)["user"]
    assert psycopg.conninfo.conninfo_to_dict(again)["user"] == role
    assert (
        psycopg.conninfo.conninfo_to_dict(again)["password"]
        != psycopg.conninfo.conninfo_to_dict(first)["password"]
    )
    await manager.create_tenant(BOB)
    assert [s for _, s in await manager.tenants()] == [ALICE, BOB]
    assert await manager.drop_tenant(BOB) != role
    with pytest.raises(UnknownScopeError, match="user=bob"):
        await manager.drop_tenant(BOB)
    removed = await manager.erase(ALICE)
    assert removed["tenants"] == 1
    assert db.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", (role,)).fetchone() == (
        0,
    )
    assert await manager.tenants() == []


def test_the_tenant_commands(
    database_url: str, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)
    runner = CliRunner()
    made = runner.invoke(cli.app, ["tenant", "create", "--user", "cli-tenant"])
    assert made.exit_code == 0, made.output
    url = made.output.strip()
    with psycopg.connect(url) as conn:
        assert (
            conn.execute("SELECT agent_memory.tenant_scope()").fetchone()
            == (
                db.execute("SELECT agent_memory.scope_key('cli-tenant', NULL, NULL)").fetchone()
                or ()
            )[:1]
        )
    role = psycopg.conninfo.conninfo_to_dict(url)["user"]
    listed = runner.invoke(cli.app, ["tenant", "list"])
    assert listed.exit_code == 0 and role in listed.output and "user=cli-tenant" in listed.output
    dropped = runner.invoke(cli.app, ["tenant", "drop", "--user", "cli-tenant"])
    assert dropped.exit_code == 0 and f"dropped {role}" in dropped.output
    again = runner.invoke(cli.app, ["tenant", "drop", "--user", "cli-tenant"])
    assert again.exit_code == 2 and "user=cli-tenant has no tenant role" in again.output
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url).close()
