"""Long commands on a terminal: a progress bar fed by the run's own events (scopes, episodes,
facts), nothing of it when the output is piped, and a run's table that fits 100 columns unless
``--wide`` asks for every column."""

from __future__ import annotations

import io
import re
from typing import Any

import psycopg
import pytest
from rich.console import Console
from typer.testing import CliRunner

from agent_memory_deployments.cli import app
from benchmarks.retrieval import load_facts
from tests.embedded import DANA, DATA
from tests.fake_llm import FakeLLM

pytestmark = pytest.mark.usefixtures("prefect_harness")

LONG_USER = "a-user-whose-id-is-long-" + "x" * 60
BAR = "\u2501"  # what rich draws a bar with


def _episodes(db: psycopg.Connection[Any], users: list[str]) -> None:
    for user in users:
        db.execute(
            "INSERT INTO agent_memory.episodes (user_id, messages, message_count, occurred_at) "
            'VALUES (%s, \'[{"role": "user", "content": "I prefer green tea."}]\', 1, '
            "'2026-03-01T10:00:00+00:00')",
            (user,),
        )


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from agent_memory_deployments import cli

    monkeypatch.setenv("DATABASE_URL", database_url)
    # a scope per group, so scopes finish one after another (each one an event of the run)
    monkeypatch.setenv("AGENT_MEMORY_CONSOLIDATION_GROUP_SIZE", "1")
    for name in ("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "PREFECT_LOGGING_ROOT_LEVEL"):
        monkeypatch.setenv(name, "WARNING")  # what a quiet command sets, undone after the test
    monkeypatch.setattr(cli.console, "width", 250)  # as piped output is
    return database_url


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """stderr as an interactive terminal, written to a buffer; every event redrawn (the
    throttle would leave out frames by the clock)."""
    from agent_memory_deployments.cli import _app, watch

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, force_interactive=True, width=140)
    monkeypatch.setattr(_app, "errors", console)
    monkeypatch.setattr(watch, "_REDRAW_S", 0.0)
    return screen


def _seen(screen: str, unit: str) -> list[int]:
    """Each count of ``unit`` the bar showed, in order (repeats folded)."""
    counts = [int(n) for n in re.findall(rf"(?<![\d.])(\d+)(?:/\d+)? {unit}(?![/\w])", screen)]
    return [n for i, n in enumerate(counts) if i == 0 or counts[i - 1] != n]


def test_the_table_fits_100_columns_and_wide_shows_the_rest(
    cli_env: str, db: psycopg.Connection[Any]
) -> None:
    _episodes(db, ["ann", LONG_USER])
    result = CliRunner().invoke(app, ["consolidate"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()  # the run's warnings (no LLM here) are on stderr
    assert max(len(line) for line in lines) <= 100, result.stdout
    header = next(line for line in lines if "outcome" in line)
    assert all(name in header for name in ("scope", "outcome", "facts", "cost_usd", "error"))
    assert "tokens_in" not in result.output
    assert "".join(lines).count("x" * 10) >= 5  # the long scope wraps, it is not cut
    assert "starting" not in result.output and "consolidating" not in result.output  # piped

    _episodes(db, ["bob"])
    wide = CliRunner().invoke(app, ["consolidate", "--wide"])
    assert wide.exit_code == 0, wide.output
    for column in ("batches", "episodes", "facts_reinforced", "llm_calls", "tokens_in"):
        assert column in wide.output


def test_backfill_shows_scopes_and_episodes_advancing_on_a_terminal(
    cli_env: str, db: psycopg.Connection[Any], terminal: io.StringIO
) -> None:
    _episodes(db, ["ann", "bob", "cy"])
    result = CliRunner().invoke(app, ["backfill", "run"])
    assert result.exit_code == 0, result.output
    assert "3 pending episode(s) in the window; 3 consolidated over 3 scope(s)" in result.output
    screen = terminal.getvalue()
    # every step of the run on the bar, from the planned totals to the end
    assert _seen(screen, "episodes") == [0, 1, 2, 3], screen
    assert _seen(screen, "scopes") == [0, 1, 2, 3], screen
    assert "/3 episodes" in screen and "/3 scopes" in screen
    assert "consolidating" in screen and BAR in screen
    assert "consolidating" not in result.output  # the bar is on stderr only


def test_consolidate_and_decay_on_a_terminal(
    cli_env: str, db: psycopg.Connection[Any], terminal: io.StringIO
) -> None:
    _episodes(db, ["ann", "bob"])
    assert CliRunner().invoke(app, ["consolidate"]).exit_code == 0
    assert _seen(terminal.getvalue(), "scopes") == [0, 1, 2]
    terminal.truncate(0)
    result = CliRunner().invoke(app, ["decay", "--as-of", "2999-01-01"])
    assert result.exit_code == 0, result.output
    assert "purged 2" in result.output
    screen = terminal.getvalue()
    assert "purging faded facts" in screen and _seen(screen, "purged")[-1] == 2


def test_embed_counts_facts_on_a_terminal(
    cli_env: str,
    fake_llm: FakeLLM,
    db: psycopg.Connection[Any],
    terminal: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {
        "AGENT_MEMORY_EMBEDDING_MODEL": "openai/embed-a",
        "AGENT_MEMORY_EMBEDDING_API_BASE": fake_llm.api_base,
        "AGENT_MEMORY_EMBEDDING_API_KEY": "sk-embed-SECRET",
        "AGENT_MEMORY_EMBEDDING_BATCH_SIZE": "10",
    }.items():
        monkeypatch.setenv(name, value)
    load_facts(db, DANA, DATA["facts"])
    facts = len(DATA["facts"])
    result = CliRunner().invoke(app, ["embed"])
    assert result.exit_code == 0, result.output
    assert f"{facts} fact(s) embedded" in result.output
    screen = terminal.getvalue()
    assert f"/{facts} facts" in screen
    assert _seen(screen, "facts") == [0, 10, 20, facts], screen  # a batch at a time
