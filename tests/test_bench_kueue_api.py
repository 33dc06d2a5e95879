"""bench/kueue_perf_api.py's pieces: the Jobs it creates, Kueue's measures
(bench/kueue_measures.py) on a hand-built case, and the operator in a process of its own
through the real API server."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fleetshare.model.resources import CPU
from fleetshare.operator.objects import ADMISSION, Admitted, governed, job_phase, parse_job
from fleetshare.traces.kueue_generator import load

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _module(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:  # as when run as a script: its helpers beside it
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _module("kueue_perf_api")


@pytest.fixture(scope="module")
def measures() -> ModuleType:
    return _module("kueue_measures")


def test_jobs_are_the_generator_workloads_with_kueue_labels(bench: ModuleType) -> None:
    trace = load(cohorts=1, queues_per_cohort=1, node_cpus=20)
    jobs = bench.arrivals(trace)
    assert len(jobs) == len(trace.workloads) == 500
    assert [a.at for a in jobs] == sorted(a.at for a in jobs)
    by_name = {f"{a.namespace}/{a.name}": a for a in jobs}
    large = by_name["cq-0-0-cohort-0/large-2-0-0"]
    assert large.at == pytest.approx(1.2)  # the first of its set, one interval in
    labels = large.body["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "cq-0-0-cohort-0"
    assert labels["kueue.x-k8s.io/priority-class"] == "priority-200"
    assert labels["kueue.x-k8s.io/performance-scheduler-running-ms"] == "1000"
    # the operator governs it, waits for it (suspended) and reads one 20-CPU pod
    assert governed(large.body)
    assert job_phase(large.body) == "pending"
    parsed = parse_job(large.body)
    assert parsed.queue == "cq-0-0-cohort-0/cq-0-0-cohort-0"  # namespace/LocalQueue
    assert parsed.priority_class == "priority-200"
    assert [(ps.count, ps.requests[CPU]) for ps in parsed.podsets] == [(1, 20_000)]
    small = by_name["cq-0-0-cohort-0/small-0-349-0"]
    assert small.at == pytest.approx(35.0)
    assert small.body["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1000m"}
    }


def test_kueue_measures_on_a_hand_built_run(measures: ModuleType) -> None:
    """Nominal quota 2 CPU. A (small, 1 CPU) created at 0, admitted 1 -> 3. B (large, 2 CPU)
    created at 1, admitted 2, preempted 2.5, admitted again 3 -> 4. CPU admitted: 1 over
    [1, 2], 3 over [2, 2.5], 1 over [2.5, 3], 2 over [3, 4]: 5 CPU-s over a 4 s window of
    2 CPU = 62.5%. Time to admission: A 1 s; B 2 s to its last admission, 1 s to its first."""
    observed = [
        measures.Observed("small", 1.0, 0.0, [(1.0, 3.0)], runtime=2.0),
        measures.Observed("large", 2.0, 1.0, [(2.0, 2.5), (3.0, 4.0)], runtime=1.0),
    ]
    out = measures.kueue_measures(observed, 2.0)
    assert out["average_usage_percent"] == 62.5
    assert out["admitted_cpu_seconds"] == 5.0
    assert out["work_cpu_seconds"] == 4.0
    assert out["window_s"] == [0.0, 4.0]
    assert out["mean_time_to_admission_s"] == {"large": 2.0, "small": 1.0}
    assert out["mean_first_admission_s"] == {"large": 1.0, "small": 1.0}
    assert out["admitted_per_class"] == {"large": 1, "small": 1}
    assert out["useful_usage_percent"] == 50.0  # 4 CPU-s of work over 8
    assert out["mean_time_admitted_s"] == {"large": 0.75, "small": 2.0}


def test_usage_timeline_splits_the_average_into_intervals(measures: ModuleType) -> None:
    """The hand-built run above in 1 s intervals: usage 0, 50, 100, 100 % (A's 1 CPU over
    [1, 2]; A's 1 and B's 2 x 0.5 over [2, 3]; B's 2 over [3, 4]), which average to the run's
    62.5 %; one admission begins in each interval but the first; B waits at t = 1."""
    observed = [
        measures.Observed("small", 1.0, 0.0, [(1.0, 3.0)], runtime=2.0),
        measures.Observed("large", 2.0, 1.0, [(2.0, 2.5), (3.0, 4.0)], runtime=1.0),
    ]
    timeline = measures.usage_timeline(observed, 2.0, step=1.0)
    assert [b["t"] for b in timeline] == [0.0, 1.0, 2.0, 3.0]
    assert [b["usage_percent"] for b in timeline] == [0.0, 50.0, 100.0, 100.0]
    assert sum(b["usage_percent"] for b in timeline) / 4 == 62.5
    assert [b["admissions_per_s"] for b in timeline] == [0.0, 1.0, 1.0, 1.0]
    assert [b["backlog"] for b in timeline] == [1, 0, 0, 0]
    with pytest.raises(ValueError, match="step"):
        measures.usage_timeline(observed, 2.0, step=0.0)


def test_usage_in_the_operators_accounting(bench: ModuleType) -> None:
    """Samples (time, pending, admitted, CPU, writes): 1 CPU from 10 s, 2 from 12 s, none
    from 13 s; the one at 15 s is after the window [10, 14]. 1 x 2 + 2 x 1 + 0 x 1 = 4 CPU-s
    over 4 s of a 2-CPU quota: 50 %."""
    samples = [[10.0, 5, 1, 1.0, 0], [12.0, 4, 2, 2.0, 1], [13.0, 0, 0, 0.0, 0],
               [15.0, 0, 3, 3.0, 0]]  # fmt: skip
    assert bench.accounted_usage(samples, 10.0, 14.0, 2.0) == 50.0
    assert bench.accounted_usage(samples, 20.0, 24.0, 2.0) is None
    timeline = bench.view_timeline(samples, 10.0, 2.0, step=2.0)
    assert [b["t"] for b in timeline] == [0.0, 2.0, 4.0]
    assert [b["view_usage_percent"] for b in timeline] == [50.0, 50.0, 150.0]  # 1; (2 + 0) / 2


def test_a_workload_never_admitted_counts_in_the_window_only(measures: ModuleType) -> None:
    observed = [
        measures.Observed("small", 1.0, 0.0, [(0.0, 2.0)]),
        measures.Observed("medium", 5.0, 1.0, []),
    ]
    out = measures.kueue_measures(observed, 1.0)
    assert out["average_usage_percent"] == 100.0
    assert "medium" not in out["mean_time_to_admission_s"]
    with pytest.raises(ValueError, match="nominal_cpu"):
        measures.kueue_measures(observed, 0.0)


def test_recorded_times_become_observed_records(bench: ModuleType) -> None:
    classes = {"ns/a": ("small", 1.0, 0.2), "ns/b": ("large", 20.0, 1.0)}
    out = bench.observed_of({"ns/a": 0.5}, {"ns/a": [[1.0, 1.5]]}, classes)
    assert len(out) == 1  # b was never created
    assert (out[0].cls, out[0].cpu, out[0].created) == ("small", 1.0, 0.5)
    assert list(out[0].admissions) == [(1.0, 1.5)]


def test_pipeline_hops_from_admission_to_pod_and_from_pod_to_release(bench: ModuleType) -> None:
    spans = {"ns/a": [[1.0, 4.0]], "ns/b": [[2.0, 5.5]], "ns/c": [[1.0, 2.0], [3.0, None]]}
    ran = {"ns/a": [1.25, 1.5, 3.0, 3.5], "ns/b": [2.5, 3.0, 4.5],  # created, bound, told,
           "ns/c": [1.1, 1.2, 1.9]}  # written; c was preempted: left out  # fmt: skip
    assert bench.hops(spans, ran) == {
        "admitted_to_pod_created_s": 0.38,  # (0.25 + 0.5) / 2, rounded
        "pod_created_to_bound_s": 0.38,
        "admitted_to_pod_bound_s": 0.75,
        "pod_done_to_released_s": 1.0,
        "kubelet_status_write_s": 0.5,  # a's only
    }


def test_recorder_releases_a_job_when_its_pod_succeeded(bench: ModuleType) -> None:
    """The recorder applies the operator's rule: released at the pod's success, before the
    Job's Complete condition."""
    recorder = bench.Recorder(kube=None)  # not started: observe() only
    trace = load(cohorts=1, queues_per_cohort=1, node_cpus=20)
    job = bench.arrivals(trace)[0].body
    key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
    record = Admitted(("default",), ((("n0", 1),),), 0.5, "t", {}).to_json()
    job["metadata"]["annotations"] = {ADMISSION: record}
    recorder.jobs[key] = {**job, "spec": {**job["spec"], "suspend": False}}
    recorder.observe(key, 1.0)
    assert recorder.phase[key] == "admitted" and recorder.spans[key] == [[1.0, None]]
    recorder.pods[key] = {"p": {"metadata": {"name": "p", "uid": "u"},
                                "status": {"phase": "Succeeded"}}}  # fmt: skip
    recorder.observe(key, 3.0)
    assert recorder.spans[key] == [[1.0, 3.0]] and key in recorder.finished


def test_operator_in_its_own_process_admits_and_reports(
    bench: ModuleType, kube: Any, ns: str, tmp_path: Path
) -> None:
    """The benchmark's default: the operator in a process of its own (as Kueue's runner runs
    its controller) admits a Job through the real API server and, once stopped, hands back
    its statistics and where the sampled Jobs are in its view."""
    from fleetshare.operator.kube import JOBS
    from tests.kube_harness import apply_policy

    trace = load(cohorts=1, queues_per_cohort=1, node_cpus=20)
    apply_policy(kube, trace.load_policy())
    job = bench.arrivals(trace)[0]
    kube.ensure_namespace(job.namespace)
    kube.add_node(f"{ns}-n0", {"cpu": "20", "memory": "1Ti", "pods": "100"},
                  {"fleetshare-test": ns})  # fmt: skip
    child = bench.OperatorProcess(kube.plane.kubeconfig, 50.0, 100, False, tmp_path)
    try:
        child.wait_ready(120)
        child.start()
        kube.kube.create(JOBS, job.body, job.namespace)
        deadline = time.monotonic() + 60
        while kube.kube.get(JOBS, job.name, job.namespace)["spec"].get("suspend"):
            assert time.monotonic() < deadline, "the Job was not admitted"
            time.sleep(0.2)
        key = f"{job.namespace}/{job.name}"
        stats = child.stop([key])
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
        kube.kube.delete(JOBS, job.name, job.namespace, propagationPolicy="Background")
    assert child.proc.returncode == 0
    assert stats["operator_job_writes"].get("admit", 0) >= 1
    assert stats["operator_reconciles"] >= 1 and stats["operator_requests"] >= 1
    assert stats["operator_reconcile_wall_s"]["p99"] is not None  # its reconciles were timed
    assert stats["views"][key]  # the admitted Job is in the operator's view
    assert {"operator_token_wait_s", "event_requests", "events_combined",
            "operator_reconcile_cpu_s", "operator_process_cpu_s"} <= stats.keys()  # fmt: skip
