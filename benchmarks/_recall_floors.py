"""The recall harness's floors (benchmarks/recall.py): the figures of the built-in set that a
change may not lower, and issue 36's bound on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# The figures of the built-in set that a change may not lower, per size (the smoke run's is
# "quick"), recorded from a run of main: a lower one fails the run (python -m benchmarks).
FLOORS = Path(__file__).with_name("recall_floors.json")


def below_floors(result: dict[str, Any], size: str, floors: Path = FLOORS) -> list[str]:
    """Each figure of ``result`` below its floor for ``size`` in ``floors`` (turns mode on the
    built-in set), as "ranking metric: figure < floor"; a ranking or metric the run lacks is
    missing, which says so too."""
    recorded: dict[str, dict[str, float]] = json.loads(floors.read_text())["turns"][size]
    below = []
    for ranking, metrics in recorded.items():
        overall = result["rankings"].get(ranking, {}).get("overall", {})
        for metric, floor in metrics.items():
            figure = overall.get(metric)
            if figure is None:
                below.append(f"{ranking} {metric}: missing < {floor}")
            elif float(figure) < floor:
                below.append(f"{ranking} {metric}: {figure} < {floor}")
    return below


def meets_bounds(result: dict[str, Any]) -> bool:
    """Issue 36's bound for the built-in set, in either mode: the default inject (the hybrid
    with snippets) has recall@10 of at least 0.85."""
    return float(result["rankings"]["hybrid_snippets"]["overall"]["recall@10"]) >= 0.85
