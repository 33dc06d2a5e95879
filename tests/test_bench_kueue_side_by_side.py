"""bench/kueue_side_by_side.py's pure pieces: the scaled generator config, the check that it is
the one fleetshare's side generates, Kueue Workloads as timestamp records, the common measures
(bench/kueue_measures.server_measures), the CxQ scales of kueue_perf_api and /proc CPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fleetshare.traces.kueue_generator import BORROWING_LIMIT_CPU, CLASSES, NOMINAL_CPU
from tests.bench_modules import bench_module

_module = bench_module


@pytest.fixture(scope="module")
def sbs() -> ModuleType:
    return _module("kueue_side_by_side")


def config(cohorts: int = 5, queues: int = 6) -> dict[str, Any]:
    """A generator config in Kueue's schema with fleetshare's workload classes."""
    sets = [{"count": wc.count, "creationIntervalMs": wc.interval_ms,
             "workloads": [{"className": wc.name, "runtimeMs": wc.runtime_ms,
                            "priority": wc.priority, "request": wc.cpu}]}
            for wc in CLASSES]  # fmt: skip
    qset = {"className": "cq", "count": queues, "nominalQuota": NOMINAL_CPU,
            "borrowingLimit": BORROWING_LIMIT_CPU, "workloadsSets": sets}  # fmt: skip
    return {"cohorts": [{"className": "cohort", "count": cohorts, "queuesSets": [qset]}]}


@pytest.mark.parametrize(
    ("scale", "shape"), [(0.1, (1, 3)), (0.2, (1, 6)), (0.4, (2, 6)), (1.0, (5, 6))]
)
def test_scaled_config_keeps_whole_cohorts_else_one(
    sbs: ModuleType, scale: float, shape: tuple[int, int]
) -> None:
    out, cohorts, queues = sbs.scaled_config(config(), scale)
    assert (cohorts, queues) == shape
    assert out["cohorts"][0]["count"] == cohorts
    assert out["cohorts"][0]["queuesSets"][0]["count"] == queues
    sbs.check_same(out)


def test_a_config_unlike_fleetshares_is_refused(sbs: ModuleType) -> None:
    other = config()
    other["cohorts"][0]["queuesSets"][0]["workloadsSets"][0]["count"] = 349
    with pytest.raises(SystemExit):
        sbs.check_same(other)


def test_a_workload_by_its_timestamps(sbs: ModuleType) -> None:
    labels = {sbs.CLASS_LABEL: "medium", sbs.RUNNING_LABEL: "500"}
    wl = {
        "metadata": {"creationTimestamp": "2026-12-07T03:00:00Z", "labels": labels},
        "spec": {"podSets": [{"count": 1, "template": {"spec": {"containers": [
            {"resources": {"requests": {"cpu": "5"}}}]}}}]},
        "status": {"conditions": [
            {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-12-07T03:00:07Z"},
            {"type": "Finished", "status": "False", "lastTransitionTime": "2026-12-07T03:00:08Z"},
        ]},
    }  # fmt: skip
    w = sbs.stamped_workload(wl)
    assert (w.cls, w.cpu, w.runtime) == ("medium", 5.0, 0.5)
    assert w.admitted is not None and w.admitted - w.created == 7.0
    assert w.finished is None
    assert sbs.cpu_of("500m") == 0.5


def test_server_measures_floor_to_seconds_and_count_finished_work() -> None:
    m = _module("kueue_measures")
    stamped = [
        m.Stamped("small", 1.0, 0.2, 100.0, 103.9, 104.0),
        m.Stamped("small", 1.0, 0.2, 100.0, 101.2, 105.0),
        m.Stamped("large", 20.0, 1.0, 100.0, None, None),
    ]
    out = m.server_measures(stamped, 20.0)
    assert out["mean_time_to_admission_s"] == {"small": 2.0}
    assert (out["finished"], out["window_s"], out["work_cpu_seconds"]) == (2, 5.0, 0.4)
    assert out["useful_usage_percent"] == pytest.approx(100 * 0.4 / (5 * 20), abs=0.01)


def test_cxq_scales() -> None:
    api = _module("kueue_perf_api")
    assert api.shape_of("1x3") == api.SCALES["tenth"]
    assert api.shape_of("5x6") == api.SCALES["full"]
    with pytest.raises(ValueError):
        api.shape_of("three")


def test_proc_cpu_of_this_process() -> None:
    info = _module("run_info")
    sum(i * i for i in range(200_000))
    cpu = info.proc_cpu_s(os.getpid())
    assert cpu is not None and cpu > 0
    assert info.proc_cpu_s(2**22 + 1) is None


def test_the_workloads_mode_runs_fleetshare_in_minimalkueues_place(
    sbs: ModuleType, tmp_path: Path
) -> None:
    """The program the runner starts is the governor itself (``exec``: the runner's rusage
    and /proc CPU are its), with the runner's arguments passed on."""
    script = sbs.controller_script("/venv/bin/python", Path("/b/kueue_workloads.py"),
                                   Path("/w/stats.json"))  # fmt: skip
    assert script.splitlines() == [
        "#!/bin/sh",
        'exec "/venv/bin/python" "/b/kueue_workloads.py" --stats "/w/stats.json" "$@"',
    ]
    run = tmp_path / sbs.FLEETSHARE_CONTROLLER
    run.write_text(sbs.controller_script(sys.executable, Path(__file__), tmp_path / "s"))
    run.chmod(0o755)
    assert os.access(run, os.X_OK)


def _runner_run(ms: dict[str, int], usage: int, cpu_ms: int) -> dict[str, Any]:
    classes = {c: {"averageTimeToAdmissionMs": v, "count": 1, "totalEvictions": 2}
               for c, v in ms.items()}  # fmt: skip
    return {
        "runner_wall_s": 120.0,
        "controller_cpu_s_proc": cpu_ms / 1000,
        "own": {"summary": {"clusterQueueClasses": {"cq": {"cpuAverageUsage": usage,
                                                           "nominalQuota": 60000}},
                            "workloadClasses": classes},
                "minimalkueue_stats": {"wallMs": 100_000, "userMs": cpu_ms, "sysMs": 0}},
        "server_timestamps": {"useful_usage_percent": 60.0, "window_s": 100.0, "finished": 3,
                              "workloads": 3, "mean_time_to_admission_s": {"small": 1.0}},
    }  # fmt: skip


def test_the_workloads_modes_table_reads_both_runs_alike(sbs: ModuleType) -> None:
    kueue = _runner_run({"small": 40_000, "medium": 30_000, "large": 10_000}, 48_000, 19_500)
    fs = _runner_run({"small": 20_000, "medium": 35_000}, 54_000, 30_000)
    rows = {r[0]: (r[1], r[2]) for r in sbs.runner_rows(kueue, fs)}
    assert rows["usage (%): runner's recorder (CQ usage / nominal)"] == ("80.0", "90.0")
    assert rows["time to admission small (s): runner's recorder"] == ("40.00", "20.00")
    assert rows["time to admission large (s): runner's recorder"] == ("10.00", "-")
    assert rows["controller CPU (s): runner's rusage"] == ("19.5", "30.0")
    assert rows["evictions: runner's recorder"] == ("6", "4")
