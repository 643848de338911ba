"""The library changes nothing of its host's at import: no environment variable, no litellm
global; litellm is kept offline only when this library is the first to import it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agent_memory.private import LITELLM_OFFLINE, PRIVATE, keep_private

PROBE = """
import json, os, sys
before = dict(os.environ)
import agent_memory, agent_memory.manager, agent_memory.graph, agent_memory.embedding
import agent_memory.extraction.llm
loaded = sorted({m.split('.')[0] for m in sys.modules} & {'litellm', 'prefect'})
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
if sys.argv[1] == 'host-first':
    import litellm
from agent_memory.extraction.llm import _litellm
litellm = _litellm()
print(json.dumps({
    'loaded_at_import': loaded,
    'environment_changed_at_import': changed,
    'globals': [litellm.drop_params, litellm.suppress_debug_info],
    'offline': {k: os.environ.get(k) for k in sys.argv[2].split(',')},
}))
"""


def probe(order: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in PRIVATE}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, order, ",".join(LITELLM_OFFLINE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.system
@pytest.mark.parametrize("order", ["library-first", "host-first"])
def test_importing_the_library_changes_nothing_of_its_hosts(order: str) -> None:
    result = probe(order)
    assert result["loaded_at_import"] == []  # neither Prefect nor litellm
    assert result["environment_changed_at_import"] == []
    assert result["globals"] == [False, False]  # litellm's own defaults, whoever imported it
    if order == "library-first":  # litellm kept off the network, as the user had not said
        assert result["offline"] == LITELLM_OFFLINE
    else:  # the host imported litellm first: its own choice (none here) stands
        assert result["offline"] == dict.fromkeys(LITELLM_OFFLINE)


def test_keep_private_never_overrides_an_explicit_choice() -> None:
    env = {"DO_NOT_TRACK": "0"}
    assert keep_private(env) is env
    assert env == {**PRIVATE, "DO_NOT_TRACK": "0"}
