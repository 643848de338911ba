"""What every extractor returns, and the checksum of its input. (`Usage`, what an
extraction cost, lives in `agent_memory.usage`, where the job records read it too.)"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent_memory.models import Episode, Fact, KnownFact, Level, Operation
from agent_memory.usage import Usage


@dataclass
class Extraction:
    """What an extractor decided for a batch of episodes: operations on the scope's memory,
    and what was repaired in the model's answer."""

    operations: list[Operation]
    extractor: str
    repairs: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    cached: bool = False

    @property
    def facts(self) -> list[Fact]:
        """The facts added or written by updates."""
        return [op.fact for op in self.operations if op.op in ("add", "update")]

    @property
    def summaries(self) -> dict[int, str]:
        """One-sentence summaries by episode number (1-based, in the batch's order)."""
        return {
            op.episode: op.content
            for op in self.operations
            if op.op == "summary" and op.episode is not None and op.content
        }


class Extractor(Protocol):
    """Anything that turns episodes (and the scope's current facts) into operations."""

    name: str
    prompt_version: str

    async def extract(
        self,
        episodes: Sequence[Episode],
        known: Sequence[KnownFact] = (),
        levels: Sequence[Level] = (),
    ) -> Extraction: ...

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes in this extractor's prompt (batches are cut by this)."""
        ...

    def warm(self) -> None:
        """Load what the first extraction would (imports, model metadata), so that a run does
        it before it opens connections; blocking, so run it in a thread."""
        ...


def checksum(episodes: Sequence[Episode]) -> str:
    """SHA-256 of the episodes' messages (content only, not ids or times), as in the seed."""
    payload = json.dumps(
        [e.messages for e in episodes], sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
