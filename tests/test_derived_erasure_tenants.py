"""Erasure across tenants (issue 51, item 5): two agents of one person, each a tenant role,
teach the person's level the same preference. Erasing one tenant's scope cannot remove what
the other's conversations support; what only the erased one taught goes. A tenant itself may
not erase (row-level security and its grants keep every delete to the pipeline's role), not
even its own scope: the attempt is refused and removes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agent_memory import MemoryManager, Scope
from agent_memory.settings import Settings
from tests.tenant_server import secure_database_url

pytestmark = pytest.mark.usefixtures("prefect_harness")

BAR, SUPPORT = Scope("tenant-alice", "bar"), Scope("tenant-alice", "support")
MARK = "okapimarker31"


@pytest.fixture
def database_url(secure_pg_server: dict[str, Any]) -> Iterator[str]:
    """On the server that asks for passwords (tenant mode refuses one that trusts all)."""
    yield from secure_database_url(secure_pg_server)


def facts(db: psycopg.Connection[Any]) -> dict[str, int]:
    """The person's level's facts with how many sources each has."""
    rows = db.execute(
        "SELECT m.content, count(s.episode_id) FROM agent_memory.memory_items m"
        " LEFT JOIN agent_memory.fact_sources s ON s.fact_id = m.id"
        " WHERE m.user_id = 'tenant-alice' AND m.agent_id IS NULL GROUP BY m.content"
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


async def test_erasing_one_tenants_scope_keeps_what_another_tenant_supports(
    manager: MemoryManager, settings: Settings, db: psycopg.Connection[Any]
) -> None:
    tenants = {}
    for scope, text in (
        (BAR, f"I prefer {MARK} tea. I'm a {MARK} collector."),
        (SUPPORT, f"I prefer {MARK} tea."),
    ):
        url = await manager.create_tenant(scope)
        tenants[scope] = await MemoryManager.create(url, settings=settings, migrate=False)
        await tenants[scope].record(scope, [{"role": "user", "content": text}])
    try:
        assert not (await manager.consolidate())["failed"]  # the pipeline, as the owner
        tea, collector = f"User prefers {MARK} tea.", f"User is a {MARK} collector."
        assert facts(db) == {tea: 2, collector: 1}

        # the tenant may not erase, its own scope neither: refused, nothing removed
        with pytest.raises(psycopg.Error, match="permission denied"):
            await tenants[BAR].erase(BAR)
        assert facts(db) == {tea: 2, collector: 1}

        summary = await manager.erase_user("tenant-alice", agent_id="bar")
        assert facts(db) == {tea: 1}
        assert [f.content for f in summary.derived.kept] == [tea]
        assert summary.scopes[0].removed["tenants"] == 1  # its role went with it
        # the other tenant still reads the person's fact, with its own conversation as source
        frame = await tenants[SUPPORT].inject(SUPPORT, query=f"which {MARK} drink?")
        assert tea in frame.injected_facts
    finally:
        for tenant in tenants.values():
            await tenant.close()
