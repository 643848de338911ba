"""The one home of the environment that keeps Prefect and litellm from reaching the network on
their own: no telemetry, litellm's price list and tokenizers from its own wheel.

The library never sets these when imported. The command line, the test suite and the benchmarks
set them for their own processes (:func:`keep_private`); the library sets litellm's two, where
unset, only when it is the first to import litellm (``agent_memory.extraction.llm``).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

TELEMETRY_OFF = {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
LITELLM_OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true"}
PRIVATE = {**TELEMETRY_OFF, **LITELLM_OFFLINE}


def keep_private(
    env: MutableMapping[str, str] | None = None, defaults: dict[str, str] = PRIVATE
) -> MutableMapping[str, str]:
    """``defaults`` set in ``env`` (this process's environment if None) where not already set:
    an explicit choice of the user's always wins. Returns ``env``."""
    target: MutableMapping[str, str] = os.environ if env is None else env
    for name, value in defaults.items():
        target.setdefault(name, value)
    return target
