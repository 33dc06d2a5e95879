"""Trace loaders: the facts of each real trace, quotas, team assignment, job synthesis."""

from __future__ import annotations

import csv
import gzip
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fleetshare.governance.quota import compile_policy
from fleetshare.governance.tree import QuotaTree
from fleetshare.model.resources import CPU, GPU
from fleetshare.placement.predicate import may_run_on
from fleetshare.traces import TRACES, Trace, load_trace
from fleetshare.traces.common import (
    CENSORED_LABEL,
    DAY,
    coarsen,
    concurrent,
    jobs_from_counts,
    proportional_quotas,
)
from fleetshare.traces.helios import EARTH_START_LABEL
from tests.conftest import TRACE_DATA

MINUTES_OF_MAY = 31 * 24 * 60


def gpus(trace: Trace) -> int:
    return trace.capacity(GPU) // 1000


def team_gpu_concurrency(trace: Trace, team: str, at: np.ndarray) -> np.ndarray:
    mine = [w for w in trace.workloads if w.team == team]
    return concurrent(
        [(w.submit_time, w.submit_time + (w.duration or 0)) for w in mine],
        at,
        [w.total_requests()[GPU] / 1000 for w in mine],
    )


# -- shared helpers ------------------------------------------------------------------------------


def test_jobs_from_counts_reproduces_the_curve() -> None:
    rng = np.random.default_rng(7)
    counts = np.cumsum(rng.integers(-3, 4, 500)).clip(0)
    times = np.arange(500) * 60.0
    for order in ("lifo", "random"):
        jobs = jobs_from_counts(times, counts, 500 * 60.0, order, seed=3)  # type: ignore[arg-type]
        assert np.array_equal(concurrent(jobs, times), counts)
        assert all(0 <= s < e <= 500 * 60.0 for s, e in jobs)
    assert jobs_from_counts(times, counts, 3e4, "random", 3) == jobs_from_counts(
        times, counts, 3e4, "random", 3
    )


def test_lifo_ends_the_newest_job_first() -> None:
    jobs = jobs_from_counts([0, 60, 120, 180], [1, 2, 1, 0], 240.0)
    assert jobs == [(0.0, 180.0), (60.0, 120.0)]


def test_coarsen_never_falls_below_the_data() -> None:
    times = np.arange(100) * 60.0
    values = np.array([i % 7 for i in range(100)], dtype=np.int64)
    t, v = coarsen(times, values, 10)
    assert len(t) == 10 and (v == 6).all()
    fine = np.concatenate(([0], v))[np.searchsorted(t, times, side="right")]
    assert (fine >= values).all()


def test_proportional_quotas_sum_exactly() -> None:
    q = proportional_quotas({"a": 1.0, "b": 1.0, "c": 1.0}, 100)
    assert sum(q.values()) == 100 and sorted(q.values()) == [33, 33, 34]
    assert proportional_quotas({"a": 0.0, "b": 0.0}, 7) in ({"a": 4, "b": 3}, {"a": 3, "b": 4})
    assert proportional_quotas({"a": 3.0, "b": 1.0}, 8) == {"a": 6, "b": 2}


def test_registry_and_option_errors() -> None:
    assert set(TRACES) == {"alibaba", "helios", "philly", "dlrm", "kueue-generator"}
    with pytest.raises(ValueError, match="unknown trace 'nope'"):
        load_trace("nope")
    with pytest.raises(TypeError, match=r"no option colour; options: .*start_day"):
        load_trace("helios", colour="red")


@pytest.mark.parametrize(
    ("name", "section"),
    [
        ("alibaba", "alibaba-gpu-v2023/"),
        ("helios", "helios-earth/"),
        ("philly", "philly/"),
        ("dlrm", "alibaba-dlrm/"),
    ],
)
def test_missing_data_names_the_file_and_readme_section(
    name: str, section: str, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError) as err:
        load_trace(name, data_dir=tmp_path)
    message = str(err.value)
    assert str(tmp_path) in message and f"`{section}`" in message and "README.md" in message


# -- Alibaba GPU 2023 ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def alibaba() -> Trace:
    return load_trace("alibaba")


def test_alibaba_facts(alibaba: Trace) -> None:
    assert alibaba.facts["pods_in_file"] == 8152
    assert len(alibaba.workloads) == 8151  # one never-scheduled pod lasted 0 s
    assert alibaba.facts["skipped"]["zero_duration"] == 1
    assert alibaba.duration == 12_902_960  # the last deletion: 149.34 days
    assert round(alibaba.duration / DAY, 2) == 149.34
    assert min(w.submit_time for w in alibaba.workloads) == 0
    assert len(alibaba.nodes) == 1213 and gpus(alibaba) == 6212
    assert alibaba.facts["cpu_only_pods"] == 1088
    assert alibaba.facts["unscheduled_pods"] == 897
    # replayed on its own clock the trace is light: concurrent GPU requests peak at ~1% of
    # the cluster (the FGD paper uses it as a packing workload, not a load over time)
    assert 60 < alibaba.demand["cluster"].peak < 70


def test_alibaba_requests_and_priorities(alibaba: Trace) -> None:
    by_name = {w.name: w for w in alibaba.workloads}
    share = by_name["openb-pod-0001"]  # num_gpu 1, gpu_milli 460, 6 cores, 12 GiB
    assert share.podsets[0].requests == {
        CPU: 6000,
        "memory": 12288 * 2**20 * 1000,
        GPU: 460,
    }
    assert share.priority_class == "alibaba-ls" and share.priority == 75
    gpu_counts = Counter(w.total_requests().get(GPU, 0) for w in alibaba.workloads)
    assert gpu_counts[8000] == 44 and gpu_counts[0] == 1088
    # 3,398 BE pods in the file; the zero-duration one is BE
    assert Counter(w.labels["alibaba.com/qos"] for w in alibaba.workloads)["BE"] == 3398 - 1


def test_alibaba_teams_and_quotas(alibaba: Trace) -> None:
    assert alibaba.teams == ["team-0", "team-1", "team-2", "team-3"]
    assert alibaba.quota_total(GPU) == alibaba.capacity(GPU) == 6212 * 1000
    sizes = Counter(w.team for w in alibaba.workloads)
    assert all(abs(n - 8151 / 4) < 0.05 * 8151 / 4 for n in sizes.values()), sizes
    again = load_trace("alibaba")
    assert [w.team for w in again.workloads] == [w.team for w in alibaba.workloads]
    other = load_trace("alibaba", seed=1)
    moved = sum(a.team != b.team for a, b in zip(alibaba.workloads, other.workloads, strict=True))
    assert moved > 0.5 * len(alibaba.workloads)
    assert other.quota_total(GPU) == 6212 * 1000


def test_alibaba_gpu_model_constraints() -> None:
    trace = load_trace("alibaba", pods="gpuspec33")
    selectors = Counter(tuple(sorted(w.podsets[0].node_selector.items())) for w in trace.workloads)
    assert sum(n for sel, n in selectors.items() if sel) == 2388
    for sel in selectors:  # every selector is met by some node
        assert any(may_run_on(n.all_labels(), n.taints, dict(sel)) for n in trace.nodes), sel
    v100 = {"fleetshare.io/gpu-spec.V100M16.V100M32": "true"}
    models = {
        n.labels["nvidia.com/gpu.product"]
        for n in trace.nodes
        if may_run_on(n.all_labels(), n.taints, v100)
    }
    assert models == {"V100M16", "V100M32"}
    with pytest.raises(ValueError, match="packing sample"):
        load_trace("alibaba", pods="multigpu50")


# -- Helios Earth --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helios() -> Trace:
    return load_trace("helios")


def _raw(vc: str, column: str) -> np.ndarray:
    with gzip.open(TRACE_DATA / "helios-earth" / f"{vc}.csv.gz", "rt") as f:
        rows = list(csv.DictReader(f))
    return np.array([int(r[column]) for r in rows])


def _raw_demand(vc: str) -> np.ndarray:
    return _raw(vc, "running_gpu_num") + _raw(vc, "pending_gpu_num")


def _running_and_pending(trace: Trace, team: str, at: np.ndarray) -> tuple[np.ndarray, ...]:
    """GPUs of the team's synthetic jobs running (from their Earth start for their duration)
    and waiting (from submission to that start, or to the end) at each of ``at``."""
    mine = [w for w in trace.workloads if w.team == team]
    gpus = [w.total_requests()[GPU] / 1000 for w in mine]
    started = [
        float(w.labels[EARTH_START_LABEL]) if EARTH_START_LABEL in w.labels else trace.duration
        for w in mine
    ]
    running = concurrent(
        [(s, s + (w.duration or 0)) for s, w in zip(started, mine, strict=True)], at, gpus
    )
    waiting = concurrent([(w.submit_time, s) for s, w in zip(started, mine, strict=True)], at, gpus)
    return running, waiting


def test_helios_facts_and_quotas(helios: Trace) -> None:
    assert len(helios.teams) == 16
    assert helios.start == "2020-05-01T00:00:00" and helios.duration == 31 * DAY
    assert all(helios.demand[vc].times.size == MINUTES_OF_MAY for vc in helios.teams)
    quotas = {t["name"]: t["quota"][0]["resources"][GPU] for t in helios.policy["teams"]}
    assert quotas["vc6YE"] == 208 and quotas["vcgkz"] == 8 and sum(quotas.values()) == 856
    assert helios.quota_total(GPU) == helios.capacity(GPU) == 856 * 1000
    assert len(helios.nodes) == 107
    assert any("2020-05-09" in a for a in helios.assumptions)  # the glitch row is named
    assert helios.policy["cluster"]["starvation_guard_seconds"] is None


def test_helios_jobs_reproduce_running_and_pending(helios: Trace) -> None:
    """Each job runs what ran and waits what was pending: per minute, the jobs' running and
    waiting GPUs are Earth's (up to size mismatches, tiny), and the work asked for is what
    ran, not what ran plus what waited."""
    minutes = np.arange(MINUTES_OF_MAY) * 60.0
    for vc in ("vchbv", "vc6YE", "vcpDC"):  # checked against the file itself, read independently
        running, waiting = _running_and_pending(helios, vc, minutes)
        raw_run, raw_pend = _raw(vc, "running_gpu_num"), _raw(vc, "pending_gpu_num")
        assert (running == raw_run).mean() > 0.99, vc
        assert (waiting == raw_pend).mean() > 0.99, vc
        assert abs(running.sum() - raw_run.sum()) <= 0.001 * raw_run.sum()
        assert np.array_equal(helios.demand[vc].values, _raw_demand(vc))
    ran = helios.facts["earth_running_gpu_hours"]
    assert ran == pytest.approx(424_772.6, abs=0.1)  # Σ running_gpu_num / 60 over the 16 files
    assert helios.facts["earth_pending_gpu_hours"] == pytest.approx(45_671.6, abs=0.1)
    assert helios.facts["earth_allocation"] == pytest.approx(ran / (856 * 744), abs=1e-4)
    asked = sum(w.total_requests()[GPU] / 1000 * (w.duration or 0) for w in helios.workloads)
    assert asked / 3600 == pytest.approx(ran, rel=0.001)  # was 470k: pending counted as work


def test_helios_jobs_have_sizes_and_gangs(helios: Trace) -> None:
    sizes = Counter(w.total_requests()[GPU] // 1000 for w in helios.workloads)
    assert {1, 2, 4, 8, 16, 32} <= set(sizes)
    for w in helios.workloads:
        (ps,) = w.podsets
        gpus = ps.count * ps.requests[GPU] // 1000
        if gpus >= 8:  # a gang of 8-GPU pods, one per node
            assert ps.requests[GPU] == 8000
        else:
            assert ps.count == 1
    quotas = {t["name"]: t["quota"][0]["resources"][GPU] for t in helios.policy["teams"]}
    assert all(w.total_requests()[GPU] // 1000 <= quotas[w.team] for w in helios.workloads)


def test_helios_window_random_order_and_coarse_jobs() -> None:
    week = load_trace("helios", start_day=10, days=5, end_order="random", seed=4)
    assert week.start == "2020-05-11T00:00:00" and week.duration == 5 * DAY
    assert not any("2020-05-09" in a for a in week.assumptions)
    minutes = np.arange(5 * 24 * 60) * 60.0
    raw = _raw("vcvlY", "running_gpu_num")[10 * 1440 : 15 * 1440]
    running, _ = _running_and_pending(week, "vcvlY", minutes)
    assert (running == raw).mean() > 0.99
    assert any(CENSORED_LABEL in w.labels for w in week.workloads)
    coarse = load_trace("helios", start_day=10, days=5, resolution_minutes=10)
    assert len(coarse.workloads) < len(week.workloads)
    coarse_running, _ = _running_and_pending(coarse, "vcvlY", minutes)
    assert (coarse_running >= raw).mean() > 0.99


def test_helios_clusters_keep_a_sub_cluster_of_those_teams() -> None:
    """Issue 28 item 8: ``clusters`` keeps the named VCs only -- their jobs exactly as in the
    whole trace, their quotas, and a cluster of their quotas' size (48 + 64 = 112 GPUs on 14
    8-GPU nodes); a VC without a file is refused, naming the VCs there are."""
    whole = load_trace("helios", start_day=13, days=1)
    sub = load_trace("helios", start_day=13, days=1, clusters=["vcLJZ", "vc8Sj"])
    assert sub.teams == ["vc8Sj", "vcLJZ"]
    quotas = {t["name"]: t["quota"][0]["resources"][GPU] for t in sub.policy["teams"]}
    assert quotas == {"vc8Sj": 48, "vcLJZ": 64}
    assert len(sub.nodes) == 14 and sub.capacity(GPU) == 112 * 1000
    assert [w.name for w in sub.workloads] == [
        w.name for w in whole.workloads if w.team in ("vc8Sj", "vcLJZ")
    ]
    assert "2 of its 16 teams (vc8Sj, vcLJZ; 112 GPUs of quota)" in sub.description
    assert any(a.startswith("Sub-cluster: only the VCs vc8Sj, vcLJZ") for a in sub.assumptions)
    with pytest.raises(ValueError, match=r"no per-minute file for vcNope .*VCs: vc3sl, vc6YE"):
        load_trace("helios", days=1, clusters=["vcNope"])
    with pytest.raises(ValueError, match="at least one VC"):
        load_trace("helios", days=1, clusters=[])


# -- Philly --------------------------------------------------------------------------------------


def test_philly_facts_and_jobs() -> None:
    trace = load_trace("philly")
    assert trace.facts["rows"] == 105_644
    assert trace.start == "2017-10-03T00:00:00"
    assert trace.duration == 6_374_580  # 2017-10-03 00:00 .. 2017-12-15 18:43 = 73.78 days
    assert len(trace.nodes) == 420 and trace.facts["active_peak"] == 450
    assert trace.quota_total(GPU) == trace.capacity(GPU) == 420 * 8 * 1000
    assert trace.facts["gaps"] == 1  # 2017-10-25 14:00 .. 2017-10-26 00:00
    assert all(w.podsets[0].requests == {GPU: 8000} for w in trace.workloads)
    active = trace.demand["active_nodes"]
    intervals = [(w.submit_time, w.submit_time + (w.duration or 0)) for w in trace.workloads]
    assert np.array_equal(concurrent(intervals, active.times), active.values)
    # after the gap: 18 hours of zero active nodes (2017-10-26 00:00 .. 18:00, day 23), then
    # 1, 1, 1, 1, 7 and 248 nodes at 18:06
    gap_end = 23 * 86_400.0
    assert active.at(np.array([gap_end - 60])).tolist() == [317]  # held across the gap
    zero = np.arange(gap_end, gap_end + 18 * 3600 + 1, 60.0)
    assert not active.at(zero).any()
    after = gap_end + 18 * 3600 + np.arange(1, 7) * 60.0
    assert active.at(after).tolist() == [1, 1, 1, 1, 7, 248]


# -- Alibaba DLRM --------------------------------------------------------------------------------


def test_dlrm_facts_and_cluster() -> None:
    trace = load_trace("dlrm")
    f = trace.facts
    assert f["instances_in_file"] == 23_871 and f["apps"] == 156
    assert f["hn_instances"] == 7386 and f["cn_instances"] == 16_485
    assert trace.duration == 2_677_541  # the last time in the file, 30.99 days
    assert len(trace.workloads) == 23_871 - 16  # instances with zero run time
    assert f["peak_gpus"] == 3414 and f["min_gpus"] == 2626
    assert trace.capacity(GPU) >= f["peak_gpus"] * 1000
    assert trace.capacity(CPU) >= f["peak_cpus"] * 1000 * 0.9
    assert trace.quota_total(GPU) == trace.capacity(GPU)
    never_deleted = sum(CENSORED_LABEL in w.labels for w in trace.workloads)
    assert never_deleted >= 8_878 - 16


def test_dlrm_synthesized_jobs_follow_the_gpu_curve() -> None:
    trace = load_trace("dlrm", jobs="synthesized", days=3)
    grid = np.arange(0, trace.duration, 60.0)
    expected = np.rint(trace.demand["gpus"].at(grid))
    assert np.array_equal(team_gpu_concurrency(trace, "dlrm", grid), expected)


# -- Kueue's scheduler benchmark -----------------------------------------------------------------


@pytest.fixture(scope="module")
def kueue() -> Trace:
    return load_trace("kueue-generator")


def test_kueue_generator_counts_and_arrivals(kueue: Trace) -> None:
    assert len(kueue.workloads) == 15_000
    assert len(kueue.teams) == 30
    per_queue = Counter(
        (w.team, w.labels["kueue.x-k8s.io/performance-scheduler-class"]) for w in kueue.workloads
    )
    assert set(per_queue.values()) == {350, 100, 50}
    assert all(per_queue[(q, "small")] == 350 for q in kueue.teams)
    expected = {"small": (0.1, 0.2, 1000), "medium": (0.5, 0.5, 5000), "large": (1.2, 1.0, 20000)}
    q0 = kueue.teams[0]
    for klass, (every, runs, cpu) in expected.items():
        mine = sorted(
            (w for w in kueue.workloads if w.team == q0 and klass in w.labels.values()),
            key=lambda w: w.submit_time,
        )
        times = np.array([w.submit_time for w in mine])
        assert times[0] == pytest.approx(every)
        assert np.allclose(np.diff(times), every)
        assert all(w.duration == runs and w.total_requests() == {CPU: cpu} for w in mine)
    prio = {
        w.labels["kueue.x-k8s.io/performance-scheduler-class"]: w.priority for w in kueue.workloads
    }
    assert prio["small"] < prio["medium"] < prio["large"] == 100


def test_kueue_generator_policy_and_nodes(kueue: Trace) -> None:
    policy = kueue.load_policy()
    assert [g.name for g in policy.groups] == [f"cohort-{c}" for c in range(5)]
    assert Counter(t.group for t in policy.teams) == {f"cohort-{c}": 6 for c in range(5)}
    assert all(t.quota[0].resources == {CPU: 20} for t in policy.teams)
    assert all(t.borrow_limits[0].absolute == 100 for t in policy.teams)
    assert kueue.capacity(CPU) == 600 * 1000 == kueue.quota_total(CPU)
    # Kueue cohorts are separate trees: a team of a full cohort borrows nothing elsewhere
    model = compile_policy(policy, None)
    fr = ("rf", CPU)
    tree = QuotaTree(model, {fr: 600_000}, idle_sharing=False)
    for q in range(6):
        tree.add(f"cq-0-{q}-cohort-0", {fr: 20_000})
    assert tree.available("cq-0-0-cohort-0", fr) == 0
    assert tree.available("cq-0-0-cohort-1", fr) == 120_000  # 20 own + 100 borrowed


# -- every trace ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["alibaba", "helios", "philly", "dlrm", "kueue-generator"])
def test_every_trace_validates(name: str, request: pytest.FixtureRequest) -> None:
    if name in ("alibaba", "helios", "kueue-generator"):
        trace = request.getfixturevalue(name.replace("-generator", ""))
    else:
        trace = load_trace(name, days=7)
    assert trace.problems() == []
    assert trace.assumptions and all(isinstance(a, str) and a for a in trace.assumptions)
    compile_policy(trace.load_policy(), None)
    assert all(w.submit_time >= 0 and (w.duration or 0) > 0 for w in trace.workloads)
    assert trace.quota_total(GPU) + trace.quota_total(CPU) > 0
