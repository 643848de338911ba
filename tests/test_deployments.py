"""The schedules: prefect.yaml and `agent-memory serve` deploy the same flows the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_memory_deployments.schedules import SCHEDULES

ROOT = Path(__file__).resolve().parent.parent


def yaml_deployments() -> dict[str, dict[str, Any]]:
    from prefect.cli.deploy._models import PrefectYamlModel  # what `prefect deploy` validates with

    raw = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    PrefectYamlModel.model_validate(raw)
    return {d["name"]: d for d in raw["deployments"]}


def test_prefect_yaml_matches_the_schedules() -> None:
    deployments = yaml_deployments()
    assert set(deployments) == {s.name for s in SCHEDULES}
    for schedule in SCHEDULES:
        d = deployments[schedule.name]
        assert d["entrypoint"] == schedule.entrypoint
        assert d["schedules"] == [{"cron": schedule.cron, "timezone": schedule.timezone}]
        assert d["parameters"] == schedule.parameters
        assert d["concurrency_limit"] == schedule.concurrency_limit == 1


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.name)
def test_entrypoints_load_and_accept_their_parameters(schedule: Any) -> None:
    from prefect.flows import load_flow_from_entrypoint

    flow = load_flow_from_entrypoint(schedule.entrypoint)
    given = schedule.parameters["params"]
    validated = flow.validate_parameters(schedule.parameters)["params"]
    assert validated.model_dump(include=set(given)) == given
    with pytest.raises(Exception, match=r"max_scopes|batch_size"):
        flow.validate_parameters({"params": {k: -1 for k in given}})


@pytest.mark.usefixtures("prefect_harness")
async def test_serve_builds_both_deployments_with_limits() -> None:
    from agent_memory_deployments.serve import build_deployments

    deployments = await build_deployments()
    by_name = {d.name: d for d in deployments}
    for schedule in SCHEDULES:
        d = by_name[schedule.name]
        assert [s.schedule.cron for s in d.schedules] == [schedule.cron]
        assert d.concurrency_limit == 1
        assert d.parameters == schedule.parameters
