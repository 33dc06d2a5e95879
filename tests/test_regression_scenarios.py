"""Regression scenarios (``tests/scenarios/*.yaml``): each names the bug it pins down in its
description, and its ``expect:`` block is what a user relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetshare.scenario.expect import mismatches
from fleetshare.scenario.loader import load_scenario
from fleetshare.scenario.report import to_json
from fleetshare.scenario.runner import run_scenario

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_regression_scenario(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.spec.expect, f"{path.name} has no expect: block"
    result = to_json(run_scenario(scenario))
    assert mismatches(scenario.spec.expect, result) == []
