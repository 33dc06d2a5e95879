"""The SLO bench measures steady traffic in steady state: its window begins once the cold
start's backlog has drained (bench/inference_slo.py ``MEASURE_FROM_OF``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fleetshare.simulate.service_compare import compare, to_json
from tests.bench_modules import bench_module

slo_bench = bench_module("inference_slo")


def _reactive_slo(tmp_path: Path, data: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    results, notes = compare(path, ("reactive",))
    slo: dict[str, Any] = to_json(data["name"], results, notes)["options"]["reactive"]["services"][
        "chat"
    ]["slo"]
    return slo


def test_the_steady_window_begins_with_no_backlog_from_the_start(tmp_path: Path) -> None:
    """Reactive, the option that drains the cold start last, on the seed that queued most:
    when the bench's window begins no request waiting then has waited longer than the TTFT
    SLO. Measured from 1800 s, as before, thousands were still waiting for minutes."""
    data = slo_bench.scenario("steady", 2)
    service = data["services"][0]
    assert service["measure_from_seconds"] == 3600
    ttft = slo_bench.SLO["ttft_seconds"]
    steady = _reactive_slo(tmp_path, data)
    assert steady["oldest_wait_at_window_start_seconds"] <= ttft

    service["measure_from_seconds"] = 1800
    data["name"] += "-from-1800"
    tail = _reactive_slo(tmp_path, data)
    assert tail["waiting_at_window_start"] > 1000
    assert tail["oldest_wait_at_window_start_seconds"] > 60


def test_the_other_shapes_keep_their_window() -> None:
    """Starting at 6 rps or none, nothing is waiting at 30 minutes: their window is as
    before."""
    for shape in ("viral", "night-zero", "office", "diurnal", "azure-replay"):
        service = slo_bench.scenario(shape, 1)["services"][0]
        assert service["measure_from_seconds"] == 1800
