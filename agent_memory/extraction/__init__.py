"""Turning episodes into facts: an LLM through litellm, or the offline rule-based extractor."""

from __future__ import annotations

from agent_memory.extraction.base import Extraction, Extractor
from agent_memory.extraction.offline import OfflineExtractor
from agent_memory.settings import LLMSettings
from agent_memory.usage import Usage


def build_extractor(settings: LLMSettings) -> Extractor:
    """The LLM extractor when a model is configured, else the offline one."""
    if settings.offline:
        return OfflineExtractor()
    from agent_memory.extraction.llm import LLMExtractor

    return LLMExtractor(settings)


__all__ = ["Extraction", "Extractor", "OfflineExtractor", "Usage", "build_extractor"]
