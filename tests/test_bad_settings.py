"""A bad setting is one line naming its environment variable, its value and what was expected:
from the library as a SettingsError, from every command as that line on stderr and exit 2."""

from __future__ import annotations

import os

import pytest

from agent_memory.errors import AgentMemoryError, ConfigurationError, SettingsError
from agent_memory.settings import LLMSettings, Settings, get_settings, use_settings
from tests.cli_commands import every_command
from tests.processes import run_interpreter

BAD = [
    ("AGENT_MEMORY_LLM_TIMEOUT", "abc", "expected a valid number"),
    ("AGENT_MEMORY_JOB_ATTEMPTS", "0", "expected a number greater than or equal to 1"),
    ("AGENT_MEMORY_INJECT_RANKING", "best", "expected 'hybrid', 'importance', 'text' or 'vector'"),
    ("AGENT_MEMORY_DB_POOL_MAX_SIZE", "many", "expected a valid integer"),
    ("AGENT_MEMORY_PREFECT_SERVER", "remote", "expected 'background' or 'ephemeral'"),
    ("AGENT_MEMORY_RETRY_LLM_ATTEMPTS", "-1", "expected a number greater than or equal to 0"),
]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_MEMORY_", "DATABASE"))}
    env.update(extra)
    return env


@pytest.mark.parametrize(("name", "value", "expected"), BAD)
def test_the_library_names_the_variable_its_value_and_what_was_expected(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    use_settings(None)
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as bad:
        get_settings()
    message = str(bad.value)
    assert message.startswith(f"{name}={value!r}: {expected}")
    assert "\n" not in message
    assert isinstance(bad.value, ConfigurationError | AgentMemoryError | ValueError)


def test_a_value_passed_in_code_is_named_by_its_class_and_field() -> None:
    with pytest.raises(SettingsError, match=r"^LLMSettings\(timeout='soon'\): expected a valid"):
        LLMSettings(timeout="soon")  # type: ignore[arg-type]


def test_a_secret_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_MEMORY_READ_DATABASE_URL", "host=replica password=hunter2-x port")
    with pytest.raises(SettingsError, match=r"^AGENT_MEMORY_READ_DATABASE_URL=\(hidden\)") as bad:
        Settings()
    assert "hunter2" not in str(bad.value)


def test_a_rule_across_settings_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_MEMORY_DB_POOL_MIN_SIZE", "20")
    monkeypatch.setenv("AGENT_MEMORY_DB_POOL_MAX_SIZE", "10")
    with pytest.raises(SettingsError, match=r"pool_min_size \(20\) exceeds pool_max_size \(10\)"):
        Settings()


COMMANDS = every_command()


@pytest.mark.system
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_ends_on_a_bad_setting_with_one_line_and_exit_2(command: list[str]) -> None:
    # each command gets one of the bad settings in turn, so each setting meets several commands
    name, value, expected = BAD[COMMANDS.index(command) % len(BAD)]
    env = _clean_env(**{name: value, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    result = run_interpreter(["-m", "agent_memory_deployments.cli", *command], env, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: {name}={value!r}: {expected}"), result.stderr
    assert result.stdout == ""


@pytest.mark.system
def test_help_is_shown_whatever_the_environment_holds() -> None:
    env = _clean_env(AGENT_MEMORY_LLM_TIMEOUT="abc")
    result = run_interpreter(["-m", "agent_memory_deployments.cli", "stats", "--help"], env)
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout
