"""Decay analytics: the packed loader, the survival curve, the chart, and where the chart goes."""

from __future__ import annotations

import base64
import io
import itertools
import struct
from datetime import date
from pathlib import Path
from typing import Any

import polars as pl
import psycopg
import pytest
from typer.testing import CliRunner

from agent_memory import analytics
from agent_memory.db import analytics as analytics_repo
from agent_memory.decay import day_index
from agent_memory.models import Scope
from agent_memory.settings import Settings
from agent_memory_deployments.cli import app
from agent_memory_flows.decay import CHART_KEY, DecayParams, decay_flow

AS_OF = date(2026, 11, 30)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Scope parts that an encoding of the scope could get wrong: NULL next to the string 'NULL',
# quotes, commas, backslashes, non-ASCII; (None, None, None) is the global scope.
AWKWARD_SCOPES = [
    (None, None, None),
    ("NULL", None, None),
    (None, "NULL", "NULL"),
    ("o'brien", "a,b", None),
    ("back\\slash", None, 'say "hi"'),
    ("zoë", "agent-β", "wf 1"),
    ("user-1", "agent-1", None),
    ("user-1", None, "agent-1"),
]


def fetchall_frame(db: psycopg.Connection[Any], scope: Scope | None) -> pl.DataFrame:
    """The reference: a row per fact through fetchall (what load_frame did before packing)."""
    query = (
        "SELECT user_id, agent_id, workflow_id, expires_day, half_life"
        " FROM agent_memory.memory_items"
    )
    if scope is None:
        rows = db.execute(query).fetchall()
    else:
        rows = db.execute(
            query + " WHERE user_id IS NOT DISTINCT FROM %s AND agent_id IS NOT DISTINCT FROM %s"
            " AND workflow_id IS NOT DISTINCT FROM %s",
            scope.params,
        ).fetchall()
    return pl.DataFrame(rows, schema=analytics.FRAME_SCHEMA, orient="row")


def canonical(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def insert_facts(
    db: psycopg.Connection[Any], scope: tuple[str | None, ...], n: int, offset: int = 0
) -> None:
    """n facts in one scope; importance 0.01-1, clocks started over the last 80 days, half-lives
    of 0.95 a day and a few others.

    The expiry days and half-lives are arbitrary doubles, so an exact comparison shows whether
    any bits were lost on the way.
    """
    db.execute(
        """INSERT INTO agent_memory.memory_items
               (user_id, agent_id, workflow_id, content, content_hash, importance,
                importance_at, half_life, expires_day)
           SELECT %s, %s, %s, 'fact ' || g, sha256(('fact ' || g)::bytea), imp, at, h,
                  agent_memory.expiry(imp, agent_memory.day_index(at), h, 0.05)
           FROM (SELECT g, 0.01 + 0.99 * ((g * 7919) %% 1000) / 999.0 AS imp,
                        %s::timestamptz - ((g %% 80) || ' days')::interval AS at,
                        (ARRAY[ln(2) / -ln(0.95), 7.0, 365.0, 1.0 / 3])[1 + g %% 4] AS h
                 FROM generate_series(%s::int, %s::int) g) s""",
        (*scope, AS_OF.isoformat(), offset + 1, offset + n),
    )


async def load(database_url: str, scope: Scope | None) -> pl.DataFrame:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        return await analytics.load_frame(conn, scope, 0.05)


async def test_loader_returns_what_fetchall_returns(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    for i, scope in enumerate(AWKWARD_SCOPES):
        insert_facts(db, scope, 50 + i)
    # many rows: one large scope, and many scopes of a few facts
    insert_facts(db, ("big", None, "wf"), 30_000)
    db.execute(
        """INSERT INTO agent_memory.memory_items
               (user_id, agent_id, workflow_id, content, content_hash, importance,
                importance_at, half_life, expires_day)
           SELECT 'many-' || (g % 2000), CASE WHEN g % 2 = 0 THEN 'a' END, NULL,
                  'fact ' || g, sha256(('fact ' || g)::bytea), 0.5, now(), 1 + g * 1e-3,
                  g * 1e-3 - 1.5
           FROM generate_series(1, 10000) g"""
    )
    # superseded facts still decay and count: the loader reads them through an index of their
    # own, so most scopes come back in two parts that must not lose or repeat a fact
    superseded = db.execute(
        "UPDATE agent_memory.memory_items SET superseded_at = now() WHERE id % 3 = 0"
    ).rowcount
    assert superseded > 10_000
    everything = await load(database_url, None)
    assert everything.schema == pl.Schema(analytics.FRAME_SCHEMA)
    assert everything.height > 40_000
    assert canonical(everything).equals(canonical(fetchall_frame(db, None)))

    for parts in [*AWKWARD_SCOPES, ("big", None, "wf"), ("many-7", None, None)]:
        scope = Scope(*parts)
        frame = await load(database_url, scope)
        expected = fetchall_frame(db, scope)
        assert expected.height > 0
        assert canonical(frame).equals(canonical(expected)), parts


def test_loader_reads_each_half_from_its_index_in_scope_order(
    db: psycopg.Connection[Any],
) -> None:
    """The loader's speed rests on its query shape: both halves answerable by index-only
    scans in (scope_key, expires_day) order, aggregated with no sort and no hash. The planner
    picks these plans at a million facts (benchmarks/analytics.py); here, with the table
    scans priced out, this checks the shape still allows them."""
    for i in range(20):
        insert_facts(db, (f"user-{i}", None, None), 100)
    db.execute("UPDATE agent_memory.memory_items SET superseded_at = now() WHERE id % 4 = 0")
    db.execute("VACUUM ANALYZE agent_memory.memory_items")
    for query, params in [
        (analytics_repo.LOAD_ALL, {"purge_below": 0.05}),
        (analytics_repo.LOAD_SCOPE, {**Scope("user-3").as_dict(), "purge_below": 0.05}),
    ]:
        with db.transaction():
            db.execute("SET LOCAL enable_seqscan = off")
            db.execute("SET LOCAL enable_bitmapscan = off")
            db.execute("SET LOCAL enable_sort = off")
            db.execute("SET LOCAL enable_hashagg = off")
            plan = "\n".join(r[0] for r in db.execute("EXPLAIN " + query, params))
        assert "Index Only Scan using memory_items_current_rank_idx" in plan, plan
        assert "Index Only Scan using memory_items_superseded_rank_idx" in plan, plan
        assert "Sort" not in plan and "HashAggregate" not in plan, plan


async def test_loader_on_no_facts(database_url: str, db: psycopg.Connection[Any]) -> None:
    empty = await load(database_url, None)
    assert empty.height == 0 and empty.schema == pl.Schema(analytics.FRAME_SCHEMA)
    insert_facts(db, ("someone", None, None), 10)
    # a scope is matched exactly: the parts of another scope's do not match
    assert (await load(database_url, Scope("someone", "else"))).height == 0
    assert (await load(database_url, Scope(None, "someone"))).height == 0
    assert (await load(database_url, Scope("someone"))).height == 10


async def test_survival_curve_agrees_with_the_expiry_table(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    insert_facts(db, ("curve", None, None), 2_000)
    report = analytics.report(
        await load(database_url, None), as_of=AS_OF, purge_below=0.05, purged=0
    )
    assert len(report.survival) == analytics.SURVIVAL_DAYS + 1
    for row in report.expiry:
        assert report.survival[row["within_days"]] == row["remaining"]
    # facts only ever leave: the curve never rises, and facts below the threshold are not in it
    assert all(a >= b for a, b in zip(report.survival, report.survival[1:], strict=False))
    below = next(r["facts"] for r in report.distribution if r["importance"] == "0.00-0.05")
    assert report.survival[0] == report.facts - below


def png_size(png: bytes) -> tuple[int, int]:
    assert png.startswith(PNG_SIGNATURE)
    # the first chunk is IHDR: length, type, then width and height
    length, kind, width, height = struct.unpack(">I4sII", png[8:24])
    assert kind == b"IHDR" and length == 13
    assert png.endswith(b"IEND\xaeB`\x82")
    return width, height


async def test_plot_is_a_png(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    insert_facts(db, ("plot", None, None), 500)
    report = analytics.report(
        await load(database_url, None), as_of=AS_OF, purge_below=0.05, purged=3
    )
    png = analytics.plot(report, tmp_path / "chart.png")
    width, height = png_size(png)
    assert width >= 600 and height >= 300
    assert len(png) > 10_000  # two panels of drawing, not an empty canvas
    assert (tmp_path / "chart.png").read_bytes() == png
    out = io.BytesIO()
    assert analytics.plot(report, out) == png == out.getvalue()
    # no facts: still a chart (empty buckets, a flat curve), not an error
    nothing = analytics.report(
        pl.DataFrame(schema=analytics.FRAME_SCHEMA),
        as_of=AS_OF,
        purge_below=0.05,
        purged=0,
    )
    png_size(analytics.plot(nothing))


def small_report(n: int) -> analytics.DecayReport:
    """A report of ``n`` facts of one scope, expiring over the next 300 days (no database)."""
    today = day_index(AS_OF)
    frame = pl.DataFrame(
        {
            "user_id": ["chart"] * n,
            "agent_id": [None] * n,
            "workflow_id": [None] * n,
            "expires_day": [float(today + 1 + (i * 37) % 300) for i in range(n)],
            "half_life": [30.0 + i % 50 for i in range(n)],
        },
        schema=analytics.FRAME_SCHEMA,
    )
    return analytics.report(frame, as_of=AS_OF, purge_below=0.05, purged=0)


def luminance(colour: Any) -> float:
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(colour)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("n", [0, 3, 400])
def test_the_chart_counts_whole_facts_labels_its_lines_and_suits_a_dark_page(n: int) -> None:
    from matplotlib.image import imread

    fig = analytics.figure(small_report(n))
    fig.canvas.draw()
    hist, curve = fig.axes
    # counts of facts (and of days) on whole-number ticks, even for three facts
    for ticks in (hist.get_yticks(), curve.get_yticks(), curve.get_xticks()):
        assert all(float(t).is_integer() for t in ticks), list(ticks)
    # every line is labelled, in a legend: the curve and each horizon on the axis
    legend = [text.get_text() for text in curve.get_legend().get_texts()]
    lines = [line.get_label() for line in curve.get_lines()]
    assert lines == legend and not any(label.startswith("_") for label in lines)
    horizons = [label for label in legend if label.startswith("day ")]
    if n:  # no facts, no curve to mark
        assert [label.split(":")[0] for label in horizons][:2] == ["day 7", "day 30"]
    # light text on a dark background, in the figure and in the PNG written from it
    assert luminance(fig.get_facecolor()) < 0.2
    texts = [hist.title, curve.title, hist.yaxis.label, *hist.get_yticklabels()]
    assert all(luminance(text.get_color()) > 0.7 for text in texts)
    corner = imread(io.BytesIO(analytics.plot(small_report(n))), format="png")[0, 0]
    assert luminance(tuple(corner[:3])) < 0.2


@pytest.mark.usefixtures("prefect_harness")
async def test_decay_run_attaches_the_chart(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    insert_facts(db, ("chart", None, None), 300)
    state = await decay_flow(DecayParams(as_of=AS_OF), return_state=True)
    assert state.is_completed()
    run_id = state.state_details.flow_run_id
    async with get_client() as client:
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
    charts = [a for a in artifacts if a.key == CHART_KEY]
    assert len(charts) == 1 and charts[0].type == "markdown"
    markdown = str(charts[0].data)
    prefix = "(data:image/png;base64,"
    assert prefix in markdown
    encoded = markdown.split(prefix, 1)[1].split(")", 1)[0]
    png = base64.b64decode(encoded, validate=True)
    png_size(png)
    assert len(png) > 10_000


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setattr(cli.console, "width", 250)  # tables are not wrapped at 80 columns
    return database_url


def test_stats_plot_writes_the_chart(
    cli_env: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    insert_facts(db, ("cli", None, None), 200)
    target = tmp_path / "decay.png"
    result = CliRunner().invoke(app, ["stats", "--plot", str(target)])
    assert result.exit_code == 0, result.output
    assert f"chart written to {target}" in result.output
    png_size(target.read_bytes())


@pytest.mark.parametrize("where", ["missing-dir/decay.png", "."])
def test_stats_plot_refuses_an_unwritable_path(cli_env: str, tmp_path: Path, where: str) -> None:
    target = tmp_path / where
    result = CliRunner().invoke(app, ["stats", "--plot", str(target)])
    assert result.exit_code == 2, result.output
    assert "cannot write the chart to" in result.output and str(target) in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "missing-dir").exists()


def test_scope_key_decodes_to_its_parts(db: psycopg.Connection[Any]) -> None:
    """The loader labels scopes from scope_key: every part must come back exactly."""
    values = [None, "NULL", "'", "''", "\\", "\\'", "a,b", "x',NULL,'y", "E'q'", "two\nlines", "ü"]
    for parts in itertools.product(values, repeat=3):
        (key,) = db.execute("SELECT agent_memory.scope_key(%s, %s, %s)", parts).fetchone() or ("",)
        assert analytics._scope_parts(key) == parts, key
    with pytest.raises(ValueError, match="not a scope_key"):
        analytics._scope_parts("'a',NULL")


def test_a_fact_already_below_the_threshold_is_due_now_not_days_ago() -> None:
    from agent_memory.decay import day_index

    on = date(2026, 12, 1)
    day = day_index(on)
    frame = pl.DataFrame(
        {
            "user_id": ["u", "u"],
            "agent_id": [None, None],
            "workflow_id": [None, None],
            # one fell below the threshold 5 days ago (decay has not run since), one in 9 days
            "expires_day": [float(day - 6), float(day + 8)],
            "half_life": [13.5, 13.5],
        },
        schema=analytics.FRAME_SCHEMA,
    )
    report = analytics.report(frame, as_of=on, purge_below=0.05, purged=0)
    assert report.scopes[0]["next_expiry_days"] == 0  # the next decay purges it
    assert {r["within_days"]: r["expiring"] for r in report.expiry}[7] == 1
