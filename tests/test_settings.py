"""Settings are read once: the environment's settings are one object until a variable of
theirs changes, and installed settings win over the environment."""

from __future__ import annotations

import asyncio

import pytest

from agent_memory.settings import Settings, get_settings, settings_in_force, use_settings


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
    with pytest.raises(ValueError, match="AGENT_MEMORY_RETRY_LLM_ATTEMPTS='-1'"):
        get_settings()


def test_a_bad_read_replica_setting_is_named_and_keeps_its_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_settings(None)
    monkeypatch.setenv("AGENT_MEMORY_READ_DATABASE_URL", "host=replica password=hunter2-x port")
    with pytest.raises(ValueError, match="AGENT_MEMORY_READ_DATABASE_URL") as bad_url:
        get_settings()
    assert "hunter2" not in str(bad_url.value)
    monkeypatch.setenv("AGENT_MEMORY_READ_DATABASE_URL", "postgresql://reader:hunter2-x@replica/db")
    for name, value in [
        ("AGENT_MEMORY_READ_MAX_LAG_SECONDS", "-1"),
        ("AGENT_MEMORY_READ_LAG_CHECK_SECONDS", "soon"),
        ("AGENT_MEMORY_READ_TIMEOUT_SECONDS", "0"),
    ]:
        monkeypatch.setenv(name, value)
        with pytest.raises(ValueError, match=name) as bad:
            get_settings()
        assert "hunter2" not in str(bad.value)
        monkeypatch.delenv(name)
    read_url = get_settings().db.read_url
    assert read_url is not None and "hunter2" not in repr(get_settings())


def test_an_empty_read_url_means_no_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    use_settings(None)
    monkeypatch.setenv("AGENT_MEMORY_READ_DATABASE_URL", " ")
    assert get_settings().db.read_url is None


async def test_settings_in_force_hold_for_their_own_task_only() -> None:
    """Two tasks, each under its own settings, interleaved at a point the test chooses: each
    reads its own, and the process's are what they were before and after."""
    process = Settings()
    use_settings(process)
    try:
        first, second = Settings(), Settings()
        both_inside = asyncio.Barrier(2)

        async def run(settings: Settings) -> Settings:
            with settings_in_force(settings):
                await both_inside.wait()  # the other task has put its own in force meanwhile
                return get_settings()

        seen = await asyncio.gather(run(first), run(second))
        assert seen[0] is first and seen[1] is second
        assert get_settings() is process
    finally:
        use_settings(None)
