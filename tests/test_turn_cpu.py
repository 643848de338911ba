"""Where a turn's CPU goes (benchmarks/turn_cpu.py, issue 40) at a small size: every figure is
there and positive, and the statements account for most of an inject and a record. No timing
thresholds: CPU figures on a shared machine say nothing about a change."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from benchmarks import _cpu, turn_cpu


async def test_the_capture_sees_raw_cursors_too(database_url: str) -> None:
    """The long ranking statements go out on psycopg's raw cursor (agent_memory.db.native)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        with _cpu.captured() as sent:
            await conn.execute("SELECT %(a)s::int", {"a": 1})
            await psycopg.AsyncRawCursor(conn).execute("SELECT $1::int", [2])
        assert [(s.text, s.raw) for s in sent] == [
            ("SELECT %(a)s::int", False),
            ("SELECT $1::int", True),
        ]
        clock = await _cpu.ServerClock.of(conn, only_self=True)
        assert clock.local and len(clock.backends) == 1  # the embedded server is this machine's
        run = await _cpu.in_turn(conn, sent * 3, clock)
        assert {text: r["runs"] for text, r in run.items()} == {s.text: 3 for s in sent}


def _positive(figures: dict[str, Any], *keys: str) -> None:
    for key in keys:
        assert isinstance(figures[key], float) and figures[key] > 0, (key, figures)


@pytest.mark.slow
def test_turn_cpu_reports_inject_and_record_client_server_and_statements(
    database_url: str,
) -> None:
    result = turn_cpu.run(database_url, facts=40, messages=240, iterations=20, neighbours=3)
    assert result["ranking"] == "hybrid" and result["snippets_per_inject"] > 0
    assert result["data"]["facts"] == 40 and result["data"]["snippets"] >= 240
    inject, record = result["inject"], result["record"]
    _positive(inject, "client_ms", "server_ms", "total_ms")
    _positive(record, "client_ms", "server_ms", "total_ms", "server_ms_without_triggers")
    assert inject["total_ms"] == pytest.approx(inject["client_ms"] + inject["server_ms"], abs=1e-3)
    split = inject["client_split"]
    _positive(split, "query_embedding_ms", "statements_ms", "snippet_choice_ms")
    refs = result["references"]
    _positive(refs["select1"], "client_ms", "total_ms")
    _positive(refs["inject_importance"], "client_ms", "server_ms", "total_ms")
    assert result["within_bound"] is None  # the bound is for 600 facts and 3,000 messages
    assert "embedded server" in result["pg_stat_statements"]

    statements = result["statements"]
    ranking = [s for s in statements["inject"] if "memory_items" in s["reads"]]
    search = [s for s in statements["inject"] if "snippets" in s["reads"]]
    assert ranking and search  # the facts' ranking and the snippet search (one statement)
    for s in ranking + search:  # each with a side left out in turn
        _positive(s, "server_ms_without_vector", "server_ms_without_text")
    insert = statements["record"][0]
    assert insert["statement"].startswith("INSERT INTO agent_memory.episodes")
    for listed in (statements["inject"], statements["record"]):
        for s in listed:
            assert len(s["statement"]) <= 80 and s["calls_per_operation"] > 0
            _positive(s, "client_ms", "server_ms", "share")
    # the statements are a part of the whole, not several times it (how large a part is a
    # figure for the benchmark, not a test: at this size, on a busy machine, the client's own
    # work and the caches move it, measured as low as a quarter)
    assert 0 < statements["inject_share_sum"] <= 3.0
    assert 0 < statements["record_share_sum"] <= 3.0
