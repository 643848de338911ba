"""Benchmarks: one command, JSON figures, each a ratio to a reference measured in the same run.

Nothing leaves the machine: Prefect's analytics are off and litellm uses its local price list
(set here, before any section imports either)."""

import os

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
