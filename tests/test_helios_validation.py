"""Validation of the Helios synthesis: the static policy (Earth's own rules: each team on its
quota, no lending, no borrowing) on the synthesised jobs reproduces what Earth measured.

Definitions, over the window ``[0, T)`` with ``C`` GPUs (856, the quotas' sum):

- **Earth's allocation** = Σ over minutes of ``running_gpu_num`` (all 16 VCs) x 60 s / (C x T);
  **Earth's pending GPU-hours** = Σ over minutes of ``pending_gpu_num`` x 60 s / 3600. Both are
  read from the files by the loader (``facts``) and checked against the files in test_traces.
- **Simulated allocation** = Σ over jobs of GPUs x the part of ``[admitted, finished)`` inside
  ``[0, T)``, / (C x T); **simulated pending GPU-hours** = Σ over jobs of GPUs x the part of
  ``[submitted, admitted)`` inside ``[0, T)`` (to ``T`` when never admitted), / 3600. Computed
  here from the run's records, independently of ``fleetshare.simulate.metrics``.

Targets: allocation within 2 points, pending GPU-hours within 20%.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleetshare.model.catalog import load_catalog
from fleetshare.model.resources import GPU
from fleetshare.scenario.runner import Runner
from fleetshare.simulate.run import build_scenario, from_trace
from fleetshare.simulate.variants import select
from fleetshare.traces import load_trace


def _static_run(options: dict[str, Any]) -> tuple[float, float, dict[str, float]]:
    trace = load_trace("helios", **options)
    inp = from_trace("helios", options)
    scenario = build_scenario(inp, select(["static"])[0], load_catalog())
    result = Runner(scenario).run()
    span = inp.duration
    capacity = sum(n.allocatable.get(GPU, 0) for n in inp.nodes) / 1000
    allocated = waited = 0.0
    for record in result.records.values():
        w = record.workload
        gpus = w.total_requests().get(GPU, 0) / 1000
        admitted = record.first_admitted_at
        assert not record.preemptions  # static quotas never preempt
        if admitted is not None:
            finished = record.finished_at if record.finished_at is not None else span
            allocated += gpus * max(0.0, min(finished, span) - min(admitted, span))
        until = admitted if admitted is not None else span
        waited += gpus * max(0.0, min(until, span) - w.submit_time)
    return allocated / (capacity * span), waited / 3600, trace.facts


def _check(options: dict[str, Any]) -> None:
    allocation, pending, facts = _static_run(options)
    assert allocation == pytest.approx(facts["earth_allocation"], abs=0.02)
    assert pending == pytest.approx(facts["earth_pending_gpu_hours"], rel=0.20)


def test_static_reproduces_earth_in_the_showcase_window() -> None:
    # days 13-16: Earth 75.2% allocated, 6,845 GPU-h pending; simulated 75.2%, 7,068 GPU-h
    _check({"start_day": 13, "days": 3})


def test_static_reproduces_earth_on_the_showcase_sub_cluster() -> None:
    # the seven teams of the showcase, days 13-16 (584 GPUs): Earth 91.1% allocated, 6,835
    # GPU-h pending; simulated 91.1%, 7,122 GPU-h
    from fleetshare.simulate.showcase import SHOWCASE_OPTIONS

    _check(dict(SHOWCASE_OPTIONS))


@pytest.mark.slow
def test_static_reproduces_earth_over_the_month() -> None:
    # May 2020: Earth 66.7% allocated, 45,672 GPU-h pending; simulated 66.7%, 53,388 GPU-h
    _check({"start_day": 0, "days": 31})
