"""Extraction with an LLM through litellm: any provider, or a local OpenAI-compatible server.

litellm is imported here only, on first use, so an agent that merely injects and records never
pays for it. litellm's own retries are off: retries belong to the Prefect task (declared on its
decorator), which sees :class:`TransientExtractionError` for faults worth retrying and
:class:`ExtractionError` for the rest (:class:`ExtractorSetupError`, naming the setting to fix,
when a setting is the cause; see :mod:`agent_memory.extraction.call_errors`).

``AGENT_MEMORY_LLM_TIMEOUT`` is a deadline for the whole call: litellm's own timeout bounds
each read of the socket, so a server sending its answer a byte at a time would hold a call
(and its task) for as long as it liked.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from typing import Any

from agent_memory import token_estimate
from agent_memory.causes import no_answer
from agent_memory.errors import ExtractionError, ExtractorSetupError, TransientExtractionError
from agent_memory.extraction.base import Extraction
from agent_memory.extraction.call_errors import classify, where_to
from agent_memory.extraction.parse import parse_operations
from agent_memory.extraction.prompt import PROMPT_VERSION, build_messages, operations_format
from agent_memory.models import Episode, KnownFact, Level
from agent_memory.private import LITELLM_OFFLINE, keep_private
from agent_memory.settings import LLMSettings
from agent_memory.usage import Usage

_quiet = False


def quiet_litellm() -> None:
    """Keep litellm's banners ("Give Feedback / Get Help", "Provider List", printed to stdout
    on failed calls) out of this process's output, now or once litellm is imported. For a
    process the library owns, such as the ``agent-memory`` command: an application's own
    process keeps litellm's defaults (the errors are raised and reported either way)."""
    global _quiet
    _quiet = True
    imported: Any = sys.modules.get("litellm")
    if imported is not None:
        imported.suppress_debug_info = True


def _litellm() -> Any:
    """litellm, imported on first use. When this library is the first to import it, litellm is
    kept off the network (:data:`~agent_memory.private.LITELLM_OFFLINE`, unless the environment
    already says otherwise); an application that imported litellm first keeps its own choice.
    No litellm global is set (but see :func:`quiet_litellm`): what this library needs it passes
    with each call."""
    if "litellm" not in sys.modules:
        keep_private(defaults=LITELLM_OFFLINE)
    import litellm

    if _quiet:
        litellm.suppress_debug_info = True
    return litellm


MAX_RETRY_AFTER_S = 60.0


def _retry_after(exc: BaseException) -> float:
    """Seconds from a Retry-After header (0 if none or unreadable), at most 60."""
    headers = getattr(exc, "litellm_response_headers", None) or {}
    response = getattr(exc, "response", None)
    if not headers and response is not None:
        headers = getattr(response, "headers", None) or {}
    try:
        value = float(headers.get("retry-after") or headers.get("Retry-After") or 0)
    except (TypeError, ValueError, AttributeError):
        return 0.0
    return min(max(value, 0.0), MAX_RETRY_AFTER_S)


class LLMExtractor:
    """Facts from an LLM named by ``AGENT_MEMORY_LLM_MODEL`` (a litellm model string)."""

    prompt_version = PROMPT_VERSION

    def __init__(self, settings: LLMSettings) -> None:
        if not settings.model:
            raise ValueError("LLMExtractor needs a model; use OfflineExtractor without one")
        self.settings = settings
        self.name: str = settings.model
        self._structured: bool | None = None  # does the model take a response schema?
        # a setting the provider refused: the run's other calls would fail the same way
        self._setup_error: ExtractorSetupError | None = None
        # litellm found no price for the model once: the price map does not change in a run,
        # and each failed lookup costs as much CPU as the rest of the call's bookkeeping
        self._unpriced = False

    def warm(self) -> None:
        """Pay the one-time costs before a run opens connections: importing litellm (seconds,
        more on a busy machine) and asking what the model takes. Call it off the event loop."""
        _litellm()
        self.structured()

    def structured(self) -> bool:
        """Whether litellm says this model takes a JSON schema for its answer (asked once)."""
        if self._structured is None:
            try:
                self._structured = bool(_litellm().supports_response_schema(model=self.name))
            except Exception:  # litellm cannot tell: the tolerant parsing reads any answer
                self._structured = False
        return self._structured

    def count_tokens(self, text: str) -> int:
        """Tokens with litellm's counter for this model (its tokenizer, or tiktoken's)."""
        try:
            return int(_litellm().token_counter(model=self.name, text=text))
        except Exception:  # a model litellm cannot count for: estimated by script
            return token_estimate.count(text)

    def _secrets(self) -> list[str | None]:
        key = self.settings.api_key
        return [key.get_secret_value() if key else None]

    async def complete(
        self, messages: list[dict[str, str]], answer: dict[str, Any] | None = None
    ) -> tuple[str, Usage]:
        """One chat completion, within ``AGENT_MEMORY_LLM_TIMEOUT`` in all; returns the text
        and its usage (``answer``: the JSON schema asked for, when the model takes one). Errors
        are classified (see :mod:`agent_memory.extraction.call_errors`)."""
        schema = answer or operations_format()
        if self._setup_error is not None:  # fail at once, as the first call did, sending nothing
            raise self._not_sent(self._setup_error)
        litellm = _litellm()
        started = time.perf_counter()
        response = await self._send(litellm, messages, schema, started)
        return self._answer(litellm, response, latency=time.perf_counter() - started)

    @staticmethod
    def _not_sent(cause: ExtractorSetupError) -> ExtractorSetupError:
        """The refusal of a call after one of this run failed on a setting."""
        error = ExtractorSetupError(
            # the cause first, as the first call said it; then why this one was not sent
            f"{cause} [this call was not sent: an earlier call of this run failed on the setting]",
            setting=cause.setting,
            sent=False,
        )
        error.usage = Usage()
        return error

    async def _send(
        self, litellm: Any, messages: list[dict[str, str]], schema: dict[str, Any], started: float
    ) -> Any:
        """The provider's response, within the deadline; a failure raised classified, with the
        usage it cost (``started``: when the call began)."""
        s = self.settings
        try:
            async with asyncio.timeout(s.timeout):
                return await litellm.acompletion(
                    model=s.model,
                    messages=messages,
                    api_base=s.api_base,
                    api_key=s.api_key.get_secret_value() if s.api_key else None,
                    temperature=s.temperature,
                    max_tokens=s.max_tokens,
                    timeout=s.timeout,
                    num_retries=0,
                    max_retries=0,
                    drop_params=True,  # a setting the model does not take is left out
                    **({"response_format": schema} if self.structured() else {}),
                )
        except TimeoutError:
            error = TransientExtractionError(
                f"{no_answer(s.timeout, where_to(None, s))} (AGENT_MEMORY_LLM_TIMEOUT="
                f"{s.timeout:g}; LLM call to {s.model} failed)"
            )
            error.usage = Usage(calls=1, latency_s=time.perf_counter() - started)
            raise error from None
        except Exception as exc:
            classified = classify(exc, litellm, s, self._secrets())
            sent = not isinstance(classified, ExtractorSetupError) or classified.sent
            classified.usage = Usage(calls=int(sent), latency_s=time.perf_counter() - started)
            if isinstance(classified, ExtractorSetupError) and classified.run_wide:
                self._setup_error = classified
            elif isinstance(classified, TransientExtractionError):
                # the provider said when to come back: wait that long (bounded) before the
                # task's retry, whose own backoff cannot know it
                wait = _retry_after(exc)
                if wait:
                    await asyncio.sleep(wait)
            raise classified from None

    def _answer(self, litellm: Any, response: Any, *, latency: float) -> tuple[str, Usage]:
        """The text of the response and what it cost; ExtractionError when it has no answer."""
        choices = getattr(response, "choices", None)
        if not choices:
            error = ExtractionError(
                f"LLM call to {self.settings.model} failed: the provider's answer has no "
                f"choices ({type(response).__name__})"
            )
            error.usage = Usage(calls=1, latency_s=latency)
            raise error
        choice = choices[0]
        text = getattr(getattr(choice, "message", None), "content", None) or ""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        return text, Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=self._cost(litellm, response, prompt_tokens, completion_tokens),
            latency_s=latency,
            calls=1,
        )

    def _cost(
        self, litellm: Any, response: Any, prompt_tokens: int, completion_tokens: int
    ) -> float | None:
        """The call's price in USD: litellm's for the response, else by the token counts;
        None when litellm has no price for the model."""
        cost: float | None = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if cost is None and not self._unpriced:
            # priced by the configured model, not the answer's model name: litellm prints to
            # stdout when that one names no provider it knows (a local server's "bench-model")
            try:
                cost = float(
                    sum(
                        litellm.cost_per_token(
                            model=self.settings.model,
                            prompt_tokens=prompt_tokens,
                            completion_tokens=completion_tokens,
                        )
                    )
                )
            except Exception:  # a model litellm has no price for: unknown, rather than wrong
                cost, self._unpriced = None, True
        return cost

    async def extract(
        self,
        episodes: Sequence[Episode],
        known: Sequence[KnownFact] = (),
        levels: Sequence[Level] = (),
    ) -> Extraction:
        messages = build_messages(episodes, known, levels)
        text, usage = await self.complete(messages, operations_format(levels))
        try:
            operations, repairs = parse_operations(text, known, episodes=len(episodes))
        except ExtractionError as exc:
            exc.usage = usage  # the unusable answer was still paid for
            raise
        return Extraction(operations=operations, extractor=self.name, repairs=repairs, usage=usage)
