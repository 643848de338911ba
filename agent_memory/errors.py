"""The exceptions agent-memory raises.

Every error derives from `AgentMemoryError` and from the builtin it behaves like, so
callers can catch either. Messages name the bad value (never a secret).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class AgentMemoryError(Exception):
    """Base class of every agent-memory error."""


class ConfigurationError(AgentMemoryError, ValueError):
    """A setting is missing or has a value that cannot work."""


class SettingsError(ConfigurationError):
    """A setting's value cannot be read: the message names its environment variable (or the
    settings class and field, when the value was passed in code), the value (never a secret's)
    and what was expected, on one line."""


class InvalidScopeError(AgentMemoryError, ValueError):
    """A scope part (user_id, agent_id, workflow_id) is not a storable identifier."""


class InvalidMessageError(AgentMemoryError, ValueError):
    """A conversation message cannot be stored losslessly."""


class EpisodeTooLargeError(InvalidMessageError):
    """An episode exceeds the configured size limit."""


class ExtractionError(AgentMemoryError, RuntimeError):
    """The extractor's answer could not be turned into valid facts (a permanent failure).

    ``usage`` is what the failed attempt cost (a model that answered badly is still paid).
    """

    usage: Any = None


class ExtractorSetupError(ExtractionError):
    """The LLM call failed because of a setting (no or a rejected API key, an unknown model,
    a batch longer than the model's context, ...): no retry can succeed until ``setting`` is
    changed. ``sent`` is False when nothing left the process; ``run_wide`` when every call of
    the run would fail the same way (the key, the model), not only this batch's."""

    def __init__(
        self, message: str, *, setting: str, sent: bool = True, run_wide: bool = True
    ) -> None:
        super().__init__(message)
        self.setting = setting
        self.sent = sent
        self.run_wide = run_wide

    def __reduce__(self) -> tuple[Any, ...]:  # picklable, for Prefect's result records
        return (_setup_error, (str(self), self.setting, self.sent, self.run_wide))


def _setup_error(message: str, setting: str, sent: bool, run_wide: bool) -> ExtractorSetupError:
    return ExtractorSetupError(message, setting=setting, sent=sent, run_wide=run_wide)


class TransientExtractionError(AgentMemoryError, RuntimeError):
    """The extractor failed in a way a retry may fix (rate limit, 5xx, timeout, connection)."""

    usage: Any = None


class EmbeddingError(AgentMemoryError, RuntimeError):
    """An embedding call failed, or pgvector is not available for embeddings."""


class TransientEmbeddingError(EmbeddingError):
    """An embedding call failed in a way a retry may fix (rate limit, 5xx, timeout,
    connection)."""


class EmbeddingRejectedError(EmbeddingError):
    """The embedding model refused the input itself (HTTP 400/422: too long, against its
    content policy, ...) or gave no usable vector for it: asking again will not help."""


class MigrationError(AgentMemoryError, RuntimeError):
    """The database schema could not be brought up to date."""


class DatabaseUnavailableError(AgentMemoryError, ConnectionError):
    """No database could be reached or started."""


class PrefectServerError(AgentMemoryError, RuntimeError):
    """A Prefect server could not be started or did not become healthy."""


class BackfillError(AgentMemoryError, ValueError):
    """Historical conversations could not be imported (a bad file or line, named)."""


class InvalidJobError(AgentMemoryError, ValueError):
    """A job id that does not exist or cannot be acted on (named, with its status)."""


class ScopesFailedError(AgentMemoryError, RuntimeError):
    """A consolidation run finished, but some scopes failed: the run's state is Failed (so
    Prefect's retry runs it again); ``summary`` holds what every scope did."""

    def __init__(self, message: str, summary: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary

    def __reduce__(self) -> tuple[Any, ...]:  # picklable, for result storage
        return (type(self), (str(self), self.summary))


class StepError(AgentMemoryError, RuntimeError):
    """A pipeline step's failure as the orchestrator is told it: the error's class, size and
    hash, never its words (`agent_memory.pseudonyms.summarise`). ``error`` is the
    failure itself, for this process's retry policy; it is neither chained nor pickled."""

    def __init__(self, message: str, error: BaseException | None = None) -> None:
        super().__init__(message)
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (to another process): the summary only
        return (type(self), (str(self),))


class UnknownScopeError(AgentMemoryError, LookupError):
    """A scope memory holds nothing about (named), asked to act on."""


class UnknownFactError(AgentMemoryError, LookupError):
    """A fact id that is not a current fact of memory (named)."""


class InvalidFactError(AgentMemoryError, ValueError):
    """A fact's content, importance or kind that cannot be stored (the bad value named)."""


class InvalidStoreRequestError(AgentMemoryError, ValueError):
    """A store operation the store cannot carry out as asked: a filter on an unknown operator,
    a value that is not a JSON object or is too large, a TTL (the bad value named)."""
