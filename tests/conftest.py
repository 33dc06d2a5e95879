"""Shared helpers: run a small scenario given as Python data and return its JSON result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetshare.scenario.loader import load_scenario_data
from fleetshare.scenario.report import to_json
from fleetshare.scenario.runner import run_scenario
from fleetshare.traces.common import data_root

TRACE_DATA = data_root()
"""The trace data the loaders read by default (bundled in the package)."""


def run_case(
    policy: dict[str, Any],
    nodes: list[dict[str, Any]],
    workloads: list[dict[str, Any]],
    **extra: Any,
) -> dict[str, Any]:
    """Run a scenario built from plain data; returns the ``scenario run --json`` object."""
    data = {"name": "case", "cluster": {"nodes": nodes}, "policy": policy, "workloads": workloads}
    if "events" in extra:
        data["cluster"]["events"] = extra.pop("events")
    data.update(extra)
    return to_json(run_scenario(load_scenario_data(data, Path("."))))


@pytest.fixture
def run() -> Any:
    """The :func:`run_case` helper as a fixture."""
    return run_case
