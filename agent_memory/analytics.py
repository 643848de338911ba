"""Decay analytics with polars: what memory holds, what fades, and when it will be gone.

All figures are computed from (scope, expires_day, half_life) and the day, with the same
arithmetic as :mod:`agent_memory.decay`, vectorised.
"""

from __future__ import annotations

import io
import itertools
import math
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import polars as pl
import psycopg

from agent_memory.db.analytics import packed_ranks
from agent_memory.decay import day_index
from agent_memory.models import Scope
from agent_memory.pseudonyms import Namer, by_label

# One row per scope: its scope_key and its facts' ranks packed as big-endian float8
# (float8send) in one bytea. Measured at 1M facts over 10k scopes (python -m
# benchmarks.analytics, 2 cores, medians of 5): a row per fact costs psycopg a Python object
# per value and polars a conversion (fetchall, the old loader: 1.4-1.65 s) or a Python call per
# row (COPY ... CSV: libpq hands out one row per call, 2.0 s); ADBC (COPY BINARY decoded to
# Arrow in C: 0.6-0.9 s) and connectorx (0.7-1.0 s) need a connection of their own from a DSN.
# Packed per scope, the wire carries 8 bytes per fact plus a row per scope and numpy decodes
# every rank in one call, on the caller's connection, with parameters bound by the server.
# What is left is the server's aggregate: over a scan of the whole table it hashes every fact
# by scope (0.43 s of the load's 0.5 s). Current and superseded facts each have a partial
# index on (scope_key, expires_day) including half_life (migration 12), so the two halves are
# read as
# index-only scans already in scope order and aggregated as they stream: 0.20 s. A scope with
# both kinds of fact comes back as two rows; _unpack does not mind. The scope's parts are
# decoded from scope_key (see _scope_parts): fetching them from a row of each scope cost an
# index lookup per scope, about 0.1 s.
# agent_memory.scope_key(): quote_nullable of each part joined by commas. quote_nullable gives
# NULL or a quoted literal with every ' doubled and, when the value holds a backslash, an E
# prefix and every backslash doubled; a lone ' always ends a literal, so this is unambiguous.
_KEY_PART = r"(NULL|(E?)'((?:[^']|'')*)')"
_SCOPE_KEY = re.compile(",".join([_KEY_PART] * 3), re.DOTALL)

FRAME_SCHEMA = {
    "user_id": pl.String,
    "agent_id": pl.String,
    "workflow_id": pl.String,
    "expires_day": pl.Float64,
    "half_life": pl.Float64,
}
_SCOPE_SCHEMA = {k: FRAME_SCHEMA[k] for k in ("user_id", "agent_id", "workflow_id")}

BUCKETS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
HORIZONS = [1, 7, 30, 90, 365]
# the survival curve's span in days: the longest expiry horizon
SURVIVAL_DAYS = HORIZONS[-1]


@dataclass
class DecayReport:
    """The decay analytics of one day; each table is a list of rows (for artifacts and the CLI)."""

    as_of: date
    purge_below: float
    facts: int
    purged: int
    distribution: list[dict[str, Any]] = field(default_factory=list)
    expiry: list[dict[str, Any]] = field(default_factory=list)
    scopes: list[dict[str, Any]] = field(default_factory=list)
    # survival[d]: facts still above purge_below d days after as_of (survival[0]: on as_of);
    # left out of summary(): 366 numbers are for the chart, not for tables
    survival: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of.isoformat(),
            "purge_below": self.purge_below,
            "facts": self.facts,
            "purged": self.purged,
            "expiring_within_7_days": next(
                (r["expiring"] for r in self.expiry if r["within_days"] == 7), 0
            ),
            "distribution": self.distribution,
            "expiry": self.expiry,
            "scopes": self.scopes,
        }


async def load_frame(
    conn: psycopg.AsyncConnection[Any], scope: Scope | None, purge_below: float
) -> pl.DataFrame:
    """The facts of ``scope`` (all scopes when None) as (user_id, agent_id, workflow_id,
    expires_day, half_life), one row per fact, in no particular order; ``expires_day`` is the
    day the fact falls below ``purge_below``.

    >>> frame = await load_frame(conn, Scope(user_id="alice"), 0.05)
    """
    return _unpack(await packed_ranks(conn, scope, purge_below))


def _scope_parts(key: str) -> tuple[str | None, str | None, str | None]:
    """(user_id, agent_id, workflow_id) of a scope_key: the inverse of agent_memory.scope_key.

    >>> _scope_parts("'alice',NULL,E'a\\\\b'")
    ('alice', None, 'a\\b')
    """
    match = _SCOPE_KEY.fullmatch(key)
    if match is None:  # a scope_key() this code does not know: fail loudly, not mislabel
        raise ValueError(f"not a scope_key: {key!r}")
    groups = match.groups()
    parts: list[str | None] = []
    for whole, escaped, body in (groups[0:3], groups[3:6], groups[6:9]):
        if whole == "NULL":
            parts.append(None)
            continue
        value = body.replace("''", "'")
        parts.append(value.replace("\\\\", "\\") if escaped else value)
    return parts[0], parts[1], parts[2]


def _unpack(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    """Rows of (scope_key, packed facts) to one row per fact."""
    if not rows:
        return pl.DataFrame(schema=FRAME_SCHEMA)
    pairs = np.frombuffer(b"".join(r[1] for r in rows), dtype=">f8").reshape(-1, 2)
    per_scope = np.fromiter((len(r[1]) // 16 for r in rows), dtype=np.int64, count=len(rows))
    scopes = pl.DataFrame([_scope_parts(r[0]) for r in rows], schema=_SCOPE_SCHEMA, orient="row")
    # each scope's row repeated once per fact of the scope, in the order the facts were packed
    index = pl.Series(np.repeat(np.arange(len(rows), dtype=np.int64), per_scope))
    return scopes[index].with_columns(
        expires_day=pl.Series(pairs[:, 0].astype(np.float64), dtype=pl.Float64),
        half_life=pl.Series(pairs[:, 1].astype(np.float64), dtype=pl.Float64),
    )


def report(
    frame: pl.DataFrame,
    *,
    as_of: date,
    purge_below: float,
    purged: int,
    top: int = 20,
    name: Namer = by_label,
) -> DecayReport:
    """Importance distribution, projected expiry and per-scope counts on ``as_of``, for a
    frame loaded with the same ``purge_below``; ``name`` names each scope (in a flow, by its
    pseudonymous key: :mod:`agent_memory.pseudonyms`)."""
    day = day_index(as_of)
    facts = frame.with_columns(
        # purge_below * 2 ** ((expires_day - day) / half_life), at most 1 (agent_memory.decay)
        importance=(
            (
                math.log(purge_below)
                + (pl.col("expires_day") - day) * math.log(2) / pl.col("half_life")
            )
            .clip(upper_bound=0.0)
            .exp()
        ),
        # first day on which importance < purge_below, counted from as_of
        days_left=pl.col("expires_day").floor().cast(pl.Int64) + 1 - day,
    )
    result = DecayReport(as_of=as_of, purge_below=purge_below, facts=facts.height, purged=purged)
    if facts.height == 0:
        return result
    labels = [f"{lo:.2f}-{hi:.2f}" for lo, hi in itertools.pairwise(BUCKETS)]
    # bucket i holds BUCKETS[i] <= importance < BUCKETS[i + 1] (the last one includes 1.0)
    edges = pl.Series(BUCKETS[1:-1], dtype=pl.Float64)
    bucket = edges.search_sorted(facts["importance"], side="right")
    counts = bucket.value_counts()
    per_bucket = dict(zip(counts[bucket.name].to_list(), counts["count"].to_list(), strict=True))
    result.distribution = [
        {"importance": label, "facts": int(per_bucket.get(i, 0))} for i, label in enumerate(labels)
    ]
    result.expiry = [
        {
            "within_days": h,
            "expiring": int(facts.filter(pl.col("days_left") <= h).height),
            "remaining": int(facts.filter(pl.col("days_left") > h).height),
        }
        for h in HORIZONS
    ]
    # facts left after d days = facts whose days_left > d; counting days_left per day (clipped
    # to the curve's span) and subtracting the running total gives the whole curve in one pass
    per_day = np.bincount(
        facts["days_left"].clip(0, SURVIVAL_DAYS + 1).to_numpy(), minlength=SURVIVAL_DAYS + 2
    )
    result.survival = (facts.height - np.cumsum(per_day[: SURVIVAL_DAYS + 1])).tolist()
    per_scope = (
        facts.group_by(["user_id", "agent_id", "workflow_id"])
        .agg(
            facts=pl.len(),
            mean_importance=pl.col("importance").mean(),
            expiring_7d=(pl.col("days_left") <= 7).sum(),
            # a fact already below the threshold is purged by the next decay: due now, 0
            next_expiry_days=pl.col("days_left").min().clip(lower_bound=0),
        )
        .sort(
            ["facts", "user_id", "agent_id", "workflow_id"],
            descending=[True, False, False, False],
            nulls_last=True,
        )
        .head(top)
    )
    result.scopes = [
        {
            "scope": name(Scope(r["user_id"], r["agent_id"], r["workflow_id"])),
            "facts": int(r["facts"]),
            "mean_importance": round(float(r["mean_importance"]), 4),
            "expiring_7d": int(r["expiring_7d"]),
            "next_expiry_days": int(r["next_expiry_days"]),
        }
        for r in per_scope.iter_rows(named=True)
    ]
    return result


# a dark theme: the chart sits on the Prefect UI's dark page (the decay run's artifact) and is
# the same chart `agent-memory stats --plot` writes
_BACKGROUND, _TEXT, _MUTED = "#1a1d24", "#e6e8eb", "#8a909b"
_KEPT, _PURGED = "#5fa8ff", "#ff6b6b"
_HORIZON_COLOURS = ["#f5c542", "#c58af9", "#7ee081", "#ff9f5a", "#5fd3d3"]


def _dark(ax: Any) -> None:
    """``ax`` in the dark theme: light text, muted frame."""
    ax.set_facecolor(_BACKGROUND)
    ax.tick_params(colors=_TEXT, which="both")
    for text in (ax.title, ax.xaxis.label, ax.yaxis.label):
        text.set_color(_TEXT)
    for spine in ax.spines.values():
        spine.set_color(_MUTED)


def figure(report: DecayReport) -> Any:
    """The chart of :func:`plot` as a matplotlib ``Figure``: the importance distribution, and
    the projected survival curve with a labelled line at each horizon still on the axis;
    counts on whole-number ticks, in a dark theme."""
    # matplotlib is imported here, not at the top: the report itself does not need it, and its
    # import costs a few hundred ms. Figure + the Agg canvas, not pyplot: no global state, no
    # display, safe in a worker thread.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(11, 4), dpi=100, layout="constrained", facecolor=_BACKGROUND)
    FigureCanvasAgg(fig)
    hist, curve = fig.subplots(1, 2)
    labels = [row["importance"] for row in report.distribution]
    counts = [row["facts"] for row in report.distribution]
    if not labels:  # no facts: the buckets still show, empty
        labels = [f"{lo:.2f}-{hi:.2f}" for lo, hi in itertools.pairwise(BUCKETS)]
        counts = [0] * len(labels)
    colours = [
        _PURGED if float(lab.split("-")[1]) <= report.purge_below else _KEPT for lab in labels
    ]
    hist.bar(range(len(labels)), counts, color=colours)
    hist.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
    hist.set_xlabel("current importance")
    hist.set_ylabel("facts (red: below the purge threshold)")
    hist.set_title(f"Importance of {report.facts:,} fact(s) on {report.as_of}")
    days = list(range(len(report.survival)))
    curve.plot(days, report.survival, color=_KEPT, label="facts remaining")
    curve.fill_between(days, report.survival, alpha=0.2, color=_KEPT)
    # end the axis a little after the last fact is gone, so a curve that reaches zero within
    # weeks is not squeezed into the left edge of a year
    gone = next((d for d, n in enumerate(report.survival) if n == 0), SURVIVAL_DAYS)
    end = min(SURVIVAL_DAYS, max(HORIZONS[1], math.ceil(gone * 1.1)))
    # a week, a month, a quarter, a year (a day's line would hug the axis)
    shown = [h for h in HORIZONS[1:] if h < len(report.survival) and h <= end]
    for h, colour in zip(shown, _HORIZON_COLOURS, strict=False):
        left = report.survival[h]
        curve.axvline(h, color=colour, linewidth=1, linestyle="--", label=f"day {h}: {left:,} left")
    curve.set_xlim(0, end)
    # whole counts need an axis at least one fact high, also when there are none
    hist.set_ylim(0, max(1.0, max(counts) * 1.05))
    curve.set_ylim(0, max(1.0, max(report.survival, default=0) * 1.05))
    curve.set_xlabel(f"days after {report.as_of}")
    curve.set_ylabel("facts remaining")
    curve.set_title(f"Projected survival (purge below {report.purge_below})")
    for axis in (hist.yaxis, curve.xaxis, curve.yaxis):  # counts of facts, and of days
        axis.set_major_locator(MaxNLocator(integer=True))
    for ax in (hist, curve):
        _dark(ax)
    legend = curve.legend(facecolor=_BACKGROUND, edgecolor=_MUTED, labelcolor=_TEXT, fontsize=8)
    legend.get_frame().set_alpha(0.9)
    return fig


def plot(report: DecayReport, out: str | Path | BinaryIO | None = None) -> bytes:
    """Draw the importance distribution and the projected survival curve as a PNG
    (:func:`figure`).

    Writes it to ``out`` (a path or a binary file) when given, and returns the PNG's bytes.

    >>> png = plot(report, "decay.png")
    """
    fig = figure(report)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", facecolor=fig.get_facecolor())
    png = buffer.getvalue()
    if isinstance(out, str | Path):
        Path(out).write_bytes(png)
    elif out is not None:
        out.write(png)
    return png
