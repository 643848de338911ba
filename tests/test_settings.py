"""Settings are read once: the environment's settings are one object until a variable of
theirs changes, and installed settings win over the environment."""

from __future__ import annotations

import pytest

from agent_memory.settings import Settings, get_settings, use_settings


def test_the_environments_settings_are_read_once_and_again_only_when_it_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_settings(None)
    first = get_settings()
    assert get_settings() is first
    monkeypatch.setenv("UNRELATED_VARIABLE", "1")
    assert get_settings() is first
    monkeypatch.setenv("AGENT_MEMORY_RETRY_LLM_ATTEMPTS", "7")
    changed = get_settings()
    assert changed is not first and changed.task_retries.llm_attempts == 7
    monkeypatch.setenv("DATABASE_URL", "postgresql://elsewhere/db")
    assert get_settings().db.url is not None
    assert get_settings().db.url.get_secret_value() == "postgresql://elsewhere/db"


def test_installed_settings_win_until_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = Settings()
    use_settings(installed)
    try:
        monkeypatch.setenv("AGENT_MEMORY_RETRY_LLM_ATTEMPTS", "9")
        assert get_settings() is installed
    finally:
        use_settings(None)
    assert get_settings().task_retries.llm_attempts == 9


def test_a_bad_retry_setting_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    use_settings(None)
    monkeypatch.setenv("AGENT_MEMORY_RETRY_LLM_ATTEMPTS", "-1")
    with pytest.raises(ValueError, match="llm_attempts"):
        get_settings()
