"""What a failed LLM call means: worth a retry, or a setting to fix first.

litellm reports some permanent faults as if they were outages (a missing API key arrives as an
``InternalServerError``), and some outages without a status. The classification here reads the
exception's type, its HTTP status and, for the faults litellm does not type, its message; a
permanent fault's error names the setting that fixes it, so an operator reads what to change
instead of watching the same batch fail through every retry.
"""

from __future__ import annotations

import re
from typing import Any

from agent_memory.causes import (
    PROVIDER,
    connection_cause,
    http_status,
    no_answer,
    origin,
    request_origin,
    status_cause,
)
from agent_memory.errors import ExtractionError, ExtractorSetupError, TransientExtractionError
from agent_memory.redact import describe
from agent_memory.settings import LLMSettings

# no key reached the client: nothing was sent (the openai client's and litellm's own words)
_MISSING_KEY = re.compile(
    r"missing credentials|missing \w+ api key|api_key client option must be set"
    r"|no api key|api key (?:is )?(?:not set|required|missing)",
    re.I,
)
_NOT_JSON = re.compile(r"expecting value: line \d+ column \d+|invalid json|jsondecodeerror", re.I)
_TRANSIENT_STATUS = {408, 409, 425, 429}

_TRANSIENT_TYPES = (
    "RateLimitError",
    "Timeout",
    # a refused connection arrives as InternalServerError (status 500) in litellm 1.110
    "APIConnectionError",
    "InternalServerError",
    "ServiceUnavailableError",
    "BadGatewayError",
)


def _types(litellm: Any, *names: str) -> tuple[type[BaseException], ...]:
    return tuple(getattr(litellm, n) for n in names if hasattr(litellm, n))


def transient_types(litellm: Any) -> tuple[type[BaseException], ...]:
    """litellm's exception types for faults a retry may fix (rate limits, 5xx, timeouts,
    refused connections)."""
    return _types(litellm, *_TRANSIENT_TYPES)


def _key_variables(litellm: Any, model: str) -> str:
    """The provider's own key variables litellm would read, as a hint ("" if unknown)."""
    try:
        missing = litellm.validate_environment(model=model).get("missing_keys") or []
    except Exception:  # a model litellm cannot place: no hint
        return ""
    return f" (or {' / '.join(missing)})" if missing else ""


def where_to(exc: BaseException | None, settings: LLMSettings) -> str:
    """Who the call went to: the configured ``api_base`` (scheme, host and port), else the
    address the HTTP client recorded, else "the provider"."""
    if settings.api_base:
        return origin(settings.api_base)
    return (request_origin(exc) if exc is not None else None) or PROVIDER


def _timeout(exc: BaseException, litellm: Any) -> bool:
    return isinstance(exc, _types(litellm, "Timeout")) or "timeout" in type(exc).__name__.lower()


def _transient_cause(
    exc: BaseException, litellm: Any, settings: LLMSettings, status: int | None
) -> str:
    where = where_to(exc, settings)
    if _timeout(exc, litellm):
        return no_answer(settings.timeout, where)
    connection = connection_cause(exc, where)
    if connection is not None:
        return connection
    if status is not None:
        return status_cause(status, where)
    return f"the call to {where} failed"


def classify(
    exc: Exception, litellm: Any, settings: LLMSettings, secrets: list[str | None]
) -> ExtractionError | TransientExtractionError:
    """The error to raise for ``exc``, raised by one chat completion of ``settings.model``.

    Its message leads with the cause in words (``connection refused to http://127.0.0.1:8000``,
    ``401 from the provider at ...``, see :mod:`agent_memory.causes`), then what to change,
    then the call and the classes the client raised, in parentheses."""
    model = settings.model or ""
    said = f"(LLM call to {model} failed: {describe(exc, secrets)})"
    status = http_status(exc)
    where = where_to(exc, settings)
    if _MISSING_KEY.search(str(exc)[:2000]):
        return ExtractorSetupError(
            f"no API key was given, so nothing was sent. Set AGENT_MEMORY_LLM_API_KEY"
            f"{_key_variables(litellm, model)}. {said}",
            setting="AGENT_MEMORY_LLM_API_KEY",
            sent=False,
        )
    if isinstance(exc, _types(litellm, "ContextWindowExceededError")):
        return ExtractorSetupError(
            f"the batch is longer than the model's context window. Lower "
            f"AGENT_MEMORY_LLM_BATCH_TOKENS (now {settings.batch_tokens}) so each call fits. "
            f"{said}",
            setting="AGENT_MEMORY_LLM_BATCH_TOKENS",
            run_wide=False,  # other scopes' batches may fit
        )
    if isinstance(exc, _types(litellm, "AuthenticationError", "PermissionDeniedError")) or (
        status in (401, 403)
    ):
        return ExtractorSetupError(
            f"{status_cause(status or 401, where)}: it rejected the credentials. Check "
            f"AGENT_MEMORY_LLM_API_KEY{_key_variables(litellm, model)} and that the key may use "
            f"this model. {said}",
            setting="AGENT_MEMORY_LLM_API_KEY",
        )
    text = str(exc)[:2000].lower()
    if (
        status == 404
        or isinstance(exc, _types(litellm, "NotFoundError", "LiteLLMUnknownProvider"))
        or "llm provider not provided" in text
    ):
        return ExtractorSetupError(
            f"{status_cause(404, where) + ': it' if status == 404 else 'the provider'} does not "
            f"know this model (or the endpoint). Check AGENT_MEMORY_LLM_MODEL (now {model!r}) "
            f"and AGENT_MEMORY_LLM_API_BASE (now {settings.api_base!r}). {said}",
            setting="AGENT_MEMORY_LLM_MODEL",
        )
    if isinstance(exc, _types(litellm, "PaymentRequiredError")) or status == 402:
        return ExtractorSetupError(
            f"{status_cause(402, where)}: the account behind AGENT_MEMORY_LLM_API_KEY is out "
            f"of credit. {said}",
            setting="AGENT_MEMORY_LLM_API_KEY",
        )
    if _NOT_JSON.search(text):
        # a proxy or a server cut short: worth another try, but say what it was
        return TransientExtractionError(
            f"the answer from {where} is not JSON (an empty or cut-short body). {said}"
        )
    if isinstance(exc, transient_types(litellm)) or (
        status is not None and (status in _TRANSIENT_STATUS or status >= 500)
    ):
        return TransientExtractionError(
            f"{_transient_cause(exc, litellm, settings, status)} {said}"
        )
    if status in (400, 422) or isinstance(exc, _types(litellm, "UnsupportedParamsError")):
        # the request itself (its settings, or this batch's content): not retried
        return ExtractionError(
            f"{status_cause(status or 400, where)}: it refused the request. If every "
            f"scope fails so, check AGENT_MEMORY_LLM_MODEL and the request settings "
            f"(AGENT_MEMORY_LLM_MAX_TOKENS, AGENT_MEMORY_LLM_TEMPERATURE). {said}"
        )
    return ExtractionError(f"LLM call to {model} failed: {describe(exc, secrets)}")
