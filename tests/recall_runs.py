"""What the tests of the recall harness share: settings whose LLM is the harness's loopback
model that keeps every turn of the conversations as a fact, in the harness's own batches."""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from agent_memory.settings import LLMSettings, Settings
from benchmarks import recall
from tests.fake_llm import FakeLLM


def every_turn_settings(
    settings: Settings, fake_llm: FakeLLM, conversations: list[dict[str, Any]]
) -> Settings:
    """``settings`` with ``fake_llm`` answering as :func:`benchmarks.recall.every_turn` of
    ``conversations`` (what ``python -m benchmarks.recall --mode turns`` runs)."""
    fake_llm.reset(recall.every_turn(conversations))
    llm = LLMSettings(
        model="openai/every-turn",
        api_base=fake_llm.api_base,
        api_key=SecretStr("x"),
        batch_tokens=recall.TURNS_BATCH_TOKENS,
    )
    return settings.model_copy(update={"llm": llm})
