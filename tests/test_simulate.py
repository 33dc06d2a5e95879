"""fleetshare simulate: policy variants on one input; metrics checked by second computations."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from fleetshare.cli import app
from fleetshare.model.catalog import load_catalog
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import GPU
from fleetshare.scenario.report import autoscaling_summary
from fleetshare.scenario.runner import Runner
from fleetshare.simulate.metrics import (
    HOUR,
    Step,
    lent,
    percentiles,
    step_from_deltas,
    with_max,
    within_quota_at_submission,
)
from fleetshare.simulate.run import (
    ProgressRunner,
    SimulationInput,
    VariantResult,
    build_scenario,
    from_scenario,
    from_trace,
    run_variants,
)
from fleetshare.simulate.variants import (
    VARIANTS,
    autoscale_pools,
    node_instance_type,
    node_price,
    select,
    stand_in_types,
)

P4D = "p4d.24xlarge"

# Two teams of 8 GPUs on two 8-GPU nodes. Team a wants 24 GPUs at t=0 (three 8-GPU jobs), team
# b only comes back at t=1800: sharing lets a borrow b's idle quota until b reclaims it.
SCENARIO: dict[str, Any] = {
    "name": "two-teams",
    "description": "a borrows b's idle quota until b comes back",
    "cluster": {"nodes": [{"instance_type": P4D, "count": 2}]},
    "policy": {
        "teams": [
            {"name": "a", "quota": [{"resources": {GPU: 8}}]},
            {"name": "b", "quota": [{"resources": {GPU: 8}}]},
        ]
    },
    "workloads": [
        {"name": "a1", "team": "a", "at": 0, "duration": 3600, "requests": {GPU: 8}},
        {"name": "a2", "team": "a", "at": 0, "duration": 3600, "requests": {GPU: 8}},
        {"name": "a3", "team": "a", "at": 100, "duration": 600, "requests": {GPU: 8}},
        {"name": "b1", "team": "b", "at": 1800, "duration": 3600, "requests": {GPU: 8}},
    ],
}
ALL = list(VARIANTS)


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "two-teams.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


@pytest.fixture(scope="module")
def tiny(scenario_file: Path) -> SimulationInput:
    return from_scenario(scenario_file)


@pytest.fixture(scope="module")
def results(tiny: SimulationInput) -> dict[str, VariantResult]:
    return {r.name: r for r in run_variants(tiny, select(ALL), jobs=1)}


def _work_done(inp: SimulationInput) -> float:
    """GPU-hours the input's workloads need (each runs its duration once)."""
    return sum(
        w.total_requests().get(GPU, 0) / MILLI * (w.duration or 0.0) / HOUR for w in inp.workloads
    )


def _check_invariants(inp: SimulationInput, r: VariantResult) -> None:
    c, teams = r.cluster, r.teams
    eps = 1e-6
    # capacity: never more used than there was
    assert c["used_hours"] <= c["available_hours"] + eps
    assert c["used_hours_in_window"] <= c["available_hours_in_window"] + eps
    assert c["used_hours"] <= c["paid_hours"] + eps
    # undefined only when nothing was schedulable in the window (autoscaled nodes came later)
    assert c["allocation"] is not None or (r.variant.autoscale and c["used_hours_in_window"] == 0)
    assert c["allocation"] is None or 0 <= c["allocation"] <= 1 + eps
    # under-provisioning: autoscaled runs only; GPU-hours short never exceed the wait of all work
    if r.variant.autoscale:
        assert 0 <= c["under_provision_events"] <= c["under_provisioned_jobs"] <= c["workloads"]
        assert c["under_provisioned_hours"] >= 0
    else:
        assert c["under_provision_events"] is None
    assert 0 <= c["utilisation_of_paid"] <= 1 + eps
    # teams add up to the cluster
    assert math.isclose(sum(t["used_hours"] for t in teams.values()), c["used_hours"], abs_tol=1e-3)
    assert math.isclose(sum(t["preemptions"] for t in teams.values()), c["preemptions"], abs_tol=0)
    # borrowing and losses are parts of use
    assert c["borrowed_hours"] <= c["used_hours"] + eps
    assert c["lost_hours"] <= c["used_hours"] + eps
    for t in teams.values():
        assert t["borrowed_hours"] <= t["used_hours"] + eps
        # over quota at any moment is at most what the running jobs borrowed at admission
        assert t["borrowed_hours"] <= t["borrowed_at_admission_hours"] + eps
        assert t["borrowed_at_admission_hours"] <= t["used_hours"] + eps
    # useful allocation: allocation less the lost work in the window
    if c["allocation"] is not None:
        lost_share = c["lost_hours_in_window"] / c["available_hours_in_window"]
        assert math.isclose(c["useful_allocation"], c["allocation"] - lost_share, abs_tol=1e-3)
    # total queueing time is at least the first wait, and equal when nothing was requeued
    for key in ("mean", "p50", "p95", "p99"):
        first, total = c["first_wait_seconds"][key], c["queue_wait_seconds"][key]
        assert total >= first - eps
        if c["requeued"] == 0:
            assert total == first
    # second computation of use: the usage step function's area equals the sum over runs
    m = r.measured
    area = float(np.sum(m.usage.area(m.end))) / HOUR
    assert math.isclose(area, c["used_hours"], abs_tol=1e-3)  # JSON numbers: 4 decimals
    # third: every workload finished once, so use minus lost work is exactly the work asked for
    if c["finished"] == len(inp.workloads):
        assert math.isclose(c["used_hours"] - c["lost_hours"], _work_done(inp), abs_tol=1e-3)
    # cost: a fixed cluster is nodes x price x hours; an autoscaled one the cloud's bill
    if not r.variant.autoscale:
        price = load_catalog().get(inp.stand_in["gpu"]).price_per_hour
        assert price is not None
        expected = len(inp.nodes) * price * r.measured.end / HOUR
        assert math.isclose(c["cost_usd"], expected, abs_tol=1e-3)
        assert math.isclose(
            c["cost_in_window_usd"], len(inp.nodes) * price * inp.duration / HOUR, abs_tol=1e-3
        )
        assert c["nodes_launched"] == 0
    # in the window and after it: the two parts of cost add up; a fixed cluster's paid
    # capacity in the window is its schedulable capacity (every node up here)
    assert math.isclose(
        c["cost_after_window_usd"], c["cost_usd"] - c["cost_in_window_usd"], abs_tol=1e-3
    )
    if not r.variant.autoscale and c["allocation"] is not None:
        assert math.isclose(c["utilisation_of_paid_in_window"], c["allocation"], abs_tol=1e-3)
    # lent is borrowed seen from the lenders: never more, and the teams add up
    assert c["lent_hours"] <= c["borrowed_hours"] + eps
    assert math.isclose(sum(t["lent_hours"] for t in teams.values()), c["lent_hours"], abs_tol=1e-3)
    assert c["preemptions_in_quota"] <= c["preemptions"]
    assert c["lost_hours_in_quota"] <= c["lost_hours"] + eps
    assert c["in_quota_jobs"] == sum(t["in_quota_jobs"] for t in teams.values())
    assert c["in_quota_jobs"] <= c["workloads"]
    # waits: all workloads were submitted; the censored ones are counted
    assert c["workloads"] == len(inp.workloads)
    assert c["never_admitted"] == sum(t["never_admitted"] for t in teams.values())


def test_invariants_hold_for_every_variant(
    tiny: SimulationInput, results: dict[str, VariantResult]
) -> None:
    assert set(results) == set(VARIANTS)
    for r in results.values():
        _check_invariants(tiny, r)


def test_static_quotas_never_borrow(results: dict[str, VariantResult]) -> None:
    for name in ("static", "static-autoscale"):
        c = results[name].cluster
        assert c["borrowed_hours"] == 0
        assert c["borrowed_at_admission_hours"] == 0
        # nothing to reclaim; only consolidation moves (batch) work on an autoscaled cluster
        assert set(c["preemptions_by_reason"]) <= {"consolidation"}
    assert results["static"].cluster["preemptions"] == 0
    # a waits for its own quota: a2 and a3 run one after another on a's 8 GPUs
    assert results["static"].cluster["makespan_hours"] == pytest.approx(7800 / HOUR, abs=1e-3)
    assert results["static"].teams["a"]["queue_wait_seconds"]["p99"] == pytest.approx(7100)


def test_static_run_use_paid_spillover_and_completion_by_hand(
    results: dict[str, VariantResult],
) -> None:
    """Static quotas on the two-team case, by hand. a1 runs 0-3600 on a's 8 GPUs, b1 1800-5400
    on b's; a2 (submitted at 0) waits for a's quota until 3600 and runs to 7200, a3 (at 100)
    runs 7200-7800. Window 5400 s (the latest submit + duration: b1's), run 7800 s.
    used = 8 x (3600 + 3600 + 3600 + 600) = 91,200 GPU-s; spillover = 8 x (1800 + 600) =
    19,200 GPU-s (a2 after 5400, a3); paid = 16 GPUs x 7800 s = 124,800 GPU-s, so utilisation
    of paid = 91,200 / 124,800; JCT: a1 3600, b1 3600, a2 7200, a3 7700 (mean 5525, nearest-rank
    p50 the 2nd of 4 = 3600); team a's: 3600, 7200, 7700."""
    c = results["static"].cluster
    assert c["window_hours"] == pytest.approx(5400 / HOUR, abs=1e-4)
    assert c["run_hours"] == pytest.approx(7800 / HOUR, abs=1e-4)
    assert c["used_hours"] == pytest.approx(91_200 / HOUR, abs=1e-3)
    assert c["spillover_hours"] == pytest.approx(19_200 / HOUR, abs=1e-3)
    assert c["paid_hours"] == pytest.approx(124_800 / HOUR, abs=1e-3)
    assert c["utilisation_of_paid"] == pytest.approx(91_200 / 124_800, abs=1e-4)
    assert c["completion_seconds"]["mean"] == pytest.approx(5525, abs=1e-3)
    assert c["completion_seconds"]["p50"] == pytest.approx(3600)
    assert c["completion_seconds"]["p99"] == pytest.approx(7700)
    a = results["static"].teams["a"]["completion_seconds"]
    assert (a["p50"], a["p99"]) == (pytest.approx(7200), pytest.approx(7700))
    assert (c["fixed_nodes"], c["peak_nodes"], c["node_hours"]) == (2, 2, 0)


def test_idle_sharing_borrows_until_the_owner_reclaims(results: dict[str, VariantResult]) -> None:
    for name in ("fair-share", "no-fair-share", "borrow-quota"):
        r = results[name]
        a = r.teams["a"]
        # a used 16 GPUs from t=0 until b came back at t=1800 (one of a's jobs is reclaimed,
        # 1800 s of its work lost), and again from 5400 to 6000 once b was done
        assert a["borrowed_hours"] == pytest.approx(8 * (1800 + 600) / HOUR, abs=1e-3)
        assert a["preemptions_by_reason"] == {"reclaim": 1}
        assert a["lost_hours"] == pytest.approx(8 * 1800 / HOUR, abs=1e-3)
        # admission-time borrowing: a2 (8 GPUs) and a3 (8 GPUs, 600 s) were admitted beyond
        # a's quota; a1 and a2 started together, so the reclaim takes the younger, a2, after
        # 1800 s of borrowing
        assert a["borrowed_at_admission_hours"] == pytest.approx(8 * (1800 + 600) / HOUR, abs=1e-3)
        assert r.teams["b"]["borrowed_hours"] == 0
        # b got its quota back at once
        assert r.teams["b"]["queue_wait_seconds"]["p99"] == 0
    # sharing used the idle GPUs: busier cluster than static quotas in the same window
    assert results["fair-share"].cluster["allocation"] > results["static"].cluster["allocation"]


def test_percent_of_idle_limit_binds(results: dict[str, VariantResult]) -> None:
    # at t=0 b's 8 GPUs are idle; 50% of them is 4 GPUs, less than an 8-GPU job
    assert results["idle50"].cluster["borrowed_hours"] == 0
    assert results["fair-share"].cluster["borrowed_hours"] > 0


def test_autoscaled_cost_is_the_cloud_bill(
    tiny: SimulationInput, results: dict[str, VariantResult]
) -> None:
    for name in ALL:
        r = results[name]
        if not r.variant.autoscale:
            continue
        c = r.cluster
        assert c["nodes_launched"] > 0
        assert c["nodes_terminated"] == c["nodes_launched"]
        assert c["fixed_nodes"] == 0
        assert c["cost_usd"] == pytest.approx(r.measured.cloud_bill)
        # the bill again, from a fresh run of the same scenario
        again = Runner(build_scenario(tiny, r.variant, load_catalog())).run()
        assert c["cost_usd"] == pytest.approx(autoscaling_summary(again)["cost"]["total_usd"])
        assert c["finished"] == len(tiny.workloads)
        # a node is paid for from launch, before it can take work
        assert c["paid_hours"] >= c["available_hours"]


def test_parallel_runs_match_sequential_ones(
    tiny: SimulationInput, results: dict[str, VariantResult]
) -> None:
    names = ["fair-share", "static-autoscale"]
    parallel = run_variants(tiny, select(names), jobs=2)
    for r in parallel:
        a = {k: v for k, v in r.cluster.items()}
        b = dict(results[r.name].cluster)
        assert a == b
        assert r.teams == results[r.name].teams


def test_progress_reports_simulated_time(tiny: SimulationInput) -> None:
    seen: list[float] = []
    scenario = build_scenario(tiny, VARIANTS["static"], load_catalog())
    result = ProgressRunner(scenario, seen.append, every=0.0).run()
    assert seen == sorted(seen)
    assert seen[-1] == result.end_time


def test_step_functions_and_percentiles() -> None:
    step = step_from_deltas(np.array([0.0, 10.0, 10.0, 30.0]), np.array([2.0, 1.0, -2.0, -1.0]))
    assert step.times.tolist() == [0.0, 10.0, 30.0]
    assert step.values.tolist() == [2.0, 1.0, 0.0]
    assert step.area(40.0) == pytest.approx(2 * 10 + 1 * 20)
    assert step.area(5.0) == pytest.approx(10)
    means = step.bin_means(np.array([0.0, 20.0, 40.0]))
    assert means.tolist() == pytest.approx([1.5, 0.5])
    assert Step(np.zeros(0), np.zeros(0)).area(5.0) == 0.0
    p = percentiles(np.arange(1.0, 101.0))
    assert (p["p50"], p["p95"], p["p99"], p["mean"]) == (50.0, 95.0, 99.0, 50.5)
    assert percentiles(np.zeros(0))["p50"] is None


def test_variant_policies() -> None:
    catalog = load_catalog()
    base = SCENARIO["policy"]
    static = VARIANTS["static"].policy(base, catalog)
    assert {t["sharing"] for t in static["teams"]} == {"DontLend"}
    assert static["cluster"]["idle_resource_sharing"] is False
    quota = VARIANTS["borrow-quota"].policy(base, catalog)
    assert quota["teams"][0]["borrow_limits"] == [
        {"flavor": "default", "resource": GPU, "absolute": "8"}
    ]
    idle = VARIANTS["idle50"].policy(base, catalog)
    assert idle["teams"][0]["borrow_limits"] == [{"percent_of_idle": 50.0}]
    assert VARIANTS["no-fair-share"].policy(base, catalog)["cluster"]["fair_share"] is False
    with pytest.raises(ValueError, match="unknown policy nope"):
        select(["nope"])


def test_node_shape_for_traces_without_instance_types() -> None:
    from fleetshare.model.node import Node

    catalog = load_catalog()
    eight = [Node("n", {GPU: 8 * MILLI})]
    assert node_instance_type(eight, catalog) == P4D
    assert node_instance_type(eight, catalog, "p5.48xlarge") == "p5.48xlarge"
    cpu = [Node("c", {"cpu": 120 * MILLI})]
    chosen = catalog.get(node_instance_type(cpu, catalog))
    assert chosen.gpu_count == 0 and chosen.allocatable["cpu"] >= 120 * MILLI


def test_helios_window_invariants() -> None:
    inp = from_trace("helios", {"start_day": 15, "days": 0.1})
    assert "fleetshare.io/kind=training" in " ".join(inp.all_assumptions(load_catalog()))
    static, shared = run_variants(inp, select(["static", "fair-share"]), jobs=1)
    for r in (static, shared):
        _check_invariants(inp, r)
    assert static.cluster["borrowed_hours"] == 0
    # day 15 asks for more than the cluster: sharing lends idle quota, and is reclaimed
    assert shared.cluster["borrowed_hours"] > 0


def test_cli_json(scenario_file: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "simulate",
            str(scenario_file),
            "--policy",
            "static",
            "--policy",
            "fair-share-autoscale",
            "--json",
            "--jobs",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data["policies"]) == {"static", "fair-share-autoscale"}
    for policy in data["policies"].values():
        assert set(policy) == {"cluster", "teams"}
        assert set(policy["teams"]) == {"a", "b"}
        for key in ("allocation", "utilisation_of_paid", "cost_usd", "queue_wait_seconds"):
            assert key in policy["cluster"]
        assert set(policy["teams"]["a"]["queue_wait_seconds"]) == {"mean", "p50", "p95", "p99"}
    assert data["input"]["assumptions"]


def test_cli_out_writes_a_report(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    # a symlink already in the folder is replaced by the report's file, never written through
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / "metrics.json").symlink_to(victim)
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(scenario_file),
            "-p",
            "static",
            "-p",
            "idle50-autoscale",
            "--out",
            str(out),
            "--jobs",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "static" in result.stdout and "idle50-autoscale" in result.stdout
    assert "under-provisioning (autoscaled)" in result.stdout
    page = (out / "index.html").read_text()
    # top-down: the verdict and its chart first, details after, assumptions last
    order = [
        page.index(h)
        for h in (
            "<h2>Verdict",
            "<h2>The lender's view",
            "overview.png",
            "<h2>Definitions",
            "<h2>All measures",
            "<h2>Per team",
            "<h2>Assumptions",
        )
    ]
    assert order == sorted(order)
    assert "Assumptions" in page
    assert "Autoscaled cost = the simulated cloud" in page
    assert "No checkpointing" in page
    assert "data:image/png;base64," in page
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert {"idle.png", "queue-wait.png", "nodes-cost.png", "preemptions.png"} <= set(pngs)
    assert "usage-static.png" in pngs
    for name in pngs:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["policies"]) == {"static", "idle50-autoscale"}
    assert not (out / "metrics.json").is_symlink()
    assert victim.read_text() == "keep me"


def test_cli_out_naming_a_file_is_refused_before_the_run(scenario_file: Path, tmp_path: Path):
    out = tmp_path / "report.html"
    out.write_text("not a folder")
    result = CliRunner().invoke(
        app, ["simulate", str(scenario_file), "-p", "static", "--out", str(out)]
    )
    assert result.exit_code == 2
    assert "exists and is not a folder" in result.output
    assert "simulating" not in result.output  # refused before the run started
    assert out.read_text() == "not a folder"


def test_cli_help_lists_policies_and_rejects_bad_input(scenario_file: Path) -> None:
    runner = CliRunner()
    help_text = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"}).stdout
    for name in ("static", "idle50", "borrow-quota", "fair-share-autoscale"):
        assert name in help_text
    bad = runner.invoke(app, ["simulate", str(scenario_file), "--policy", "nope"])
    assert bad.exit_code == 2
    both = runner.invoke(app, ["simulate", str(scenario_file), "--trace", "helios"])
    assert both.exit_code == 2


# -- definitions on hand-built cases (issue 13, items 1, 2 and 4) --------------------------------


def test_queue_wait_counts_time_queued_again_after_a_preemption(
    results: dict[str, VariantResult],
) -> None:
    """Fair share on the two-team case: a1 and a2 start at 0 (a2 on b's idle quota), b1 comes
    at 1800 and reclaims a2, which waits again until a1 ends at 3600; a3 (submitted at 100)
    waits until b1 is done at 5400. Queued in total: a1 0, a2 1800 (first wait 0), a3 5300."""
    r = results["fair-share"]
    m = r.measured
    queued, still, requeues = m.queue_times(m.end)
    first, _ = m.waits(m.end)
    assert queued.tolist() == [0, 1800, 5300, 0]
    assert first.tolist() == [0, 0, 5300, 0]
    assert requeues.tolist() == [0, 1, 0, 0]
    assert not still.any()
    a = r.teams["a"]
    assert a["requeued"] == 1
    assert a["queue_wait_seconds"]["mean"] == pytest.approx((0 + 1800 + 5300) / 3, abs=1e-3)
    assert a["first_wait_seconds"]["mean"] == pytest.approx(5300 / 3, abs=1e-3)


def test_useful_allocation_leaves_out_work_thrown_away(
    results: dict[str, VariantResult],
) -> None:
    """Window 1.5 h on 16 GPUs (24 GPU-h). Fair share keeps all 16 busy (allocation 100 %) but
    throws away a2's first 1800 s on 8 GPUs (4 GPU-h): useful 20/24. Static quotas keep 8 GPUs
    idle until b1 arrives at 1800 (20 GPU-h used) and lose nothing: the same 20/24."""
    fair, static = results["fair-share"].cluster, results["static"].cluster
    assert fair["allocation"] == pytest.approx(1.0)
    assert fair["lost_hours_in_window"] == pytest.approx(4.0)
    assert fair["useful_allocation"] == pytest.approx(20 / 24, abs=1e-4)
    assert static["allocation"] == pytest.approx(20 / 24, abs=1e-4)
    assert static["useful_allocation"] == pytest.approx(20 / 24, abs=1e-4)
    assert fair["capacity_basis"] == "fixed"
    assert results["fair-share-autoscale"].cluster["capacity_basis"] == "ready-autoscaled"


def test_borrowed_hours_stop_when_the_team_is_back_within_quota(tmp_path: Path) -> None:
    """a (8 GPUs of quota) runs a1 (600 s) and a2 (3600 s) at once; a2 is admitted on b's idle
    quota. At 600 a1 ends and a is within its quota again: a used 8 GPUs beyond it for 600 s
    (borrowed 8 x 600), though a2 was admitted as borrowing for its whole 3600 s."""
    scenario = {
        **SCENARIO,
        "workloads": [
            {"name": "a1", "team": "a", "at": 0, "duration": 600, "requests": {GPU: 8}},
            {"name": "a2", "team": "a", "at": 0, "duration": 3600, "requests": {GPU: 8}},
        ],
    }
    path = tmp_path / "borrow.yaml"
    path.write_text(yaml.safe_dump(scenario))
    (r,) = run_variants(from_scenario(path), select(["fair-share"]), jobs=1)
    a = r.teams["a"]
    assert a["borrowed_hours"] == pytest.approx(8 * 600 / HOUR, abs=1e-3)
    assert a["borrowed_at_admission_hours"] == pytest.approx(8 * 3600 / HOUR, abs=1e-3)


def test_policies_that_come_out_the_same_are_said_to_and_why(tmp_path: Path) -> None:
    """Issue 13 item 8: two teams that never contend (b never comes) give every sharing
    policy the same numbers; the output says so and why, instead of leaving a user to read
    equal numbers as equal policies."""
    from fleetshare.simulate.report import coinciding

    scenario = {
        **SCENARIO,
        "workloads": [
            {"name": "a1", "team": "a", "at": 0, "duration": 600, "requests": {GPU: 8}},
            {"name": "a2", "team": "a", "at": 0, "duration": 600, "requests": {GPU: 4}},
        ],
    }
    path = tmp_path / "calm.yaml"
    path.write_text(yaml.safe_dump(scenario))
    runs = run_variants(
        from_scenario(path), select(["fair-share", "no-fair-share", "static"]), jobs=1
    )
    (note,) = coinciding(runs)
    assert note.startswith("fair-share, no-fair-share came out the same")
    assert "used at most 12 of 16 GPUs" in note
    # the contended two-team case tells its policies apart: nothing to say there
    contended = run_variants(
        from_scenario(_write(tmp_path, SCENARIO)), select(["fair-share", "static"]), jobs=1
    )
    assert coinciding(contended) == []


HELIOS_SUBCLUSTER = ["vcLJZ", "vcMod", "vcpDC", "vc8Sj", "vcTJs"]
"""The contended sub-cluster of issue 27 item 10: five Helios Earth VCs, 280 GPUs."""


def test_policies_that_come_out_the_same_with_preemptions_say_so() -> None:
    """Issue 27 item 10: on the Helios sub-cluster, fair-share and borrow-quota came out the
    same with 92 preemptions, 74 of them reclaims, and the note said "nothing had to be
    reclaimed". A note must match its own table.

    Since fair share stopped taking a victim whose team would be back within its quota with
    another victim of it waiting (a hunt's case), the two runs differ on that input (in
    borrowed hours and waits, with 83 preemptions each); the note is checked on the
    borrow-quota run given twice, under both policies' names, so that they come out the same
    by construction."""
    from dataclasses import replace

    from fleetshare.simulate.report import coinciding

    options = {"days": 3, "start_day": 13, "clusters": HELIOS_SUBCLUSTER}
    fair, quota = select(["fair-share", "borrow-quota"])
    (run,) = run_variants(from_trace("helios", options), [quota])
    runs = [replace(run, variant=fair), run]
    (note,) = coinciding(runs)
    preemptions = runs[0].cluster["preemptions"]
    reclaims = runs[0].cluster["preemptions_by_reason"]["reclaim"]
    assert preemptions > 0 and reclaims > 0
    assert f"preemptions included ({preemptions}: " in note
    assert f"{reclaims} reclaim" in note
    assert "nothing had to be reclaimed" not in note
    # why the borrow limit of a team's own quota never bound: nobody borrowed that much
    assert (
        "At most a team used 100% of its quota beyond it (vcTJs: 48 GPUs beyond a quota of "
        "48): within a borrow limit of its own quota." in note
    )


def _write(tmp_path: Path, scenario: dict[str, Any]) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return path


def test_work_that_can_never_run_is_said_first(tmp_path: Path) -> None:
    """Issue 13 item 9: a 16-GPU pod on 8-GPU nodes (and a pool of 8-GPU types) can never
    run; the run says so at the top (terminal, JSON, report) instead of reporting silent
    waits."""
    scenario = {
        **SCENARIO,
        "workloads": [
            *SCENARIO["workloads"],
            {"name": "huge", "team": "a", "at": 0, "duration": 60, "requests": {GPU: 16}},
        ],
    }
    path = _write(tmp_path, scenario)
    runs = run_variants(from_scenario(path), select(["static", "static-autoscale"]), jobs=1)
    for r in runs:
        assert r.never_served is not None
        assert r.never_served.startswith("1 of 5 workloads can never run")
        assert "huge: nvidia.com/gpu=16 per pod" in r.never_served
        assert r.to_json()["cluster"]["never_served"] == r.never_served
    out = CliRunner().invoke(app, ["simulate", str(path), "-p", "static"])
    assert out.exit_code == 0, out.output
    first = out.output.index("can never run")
    assert first < out.output.index("useful alloc")
    # a run where everything can be served says nothing
    (calm,) = run_variants(from_scenario(_write(tmp_path, SCENARIO)), select(["static"]), jobs=1)
    assert calm.never_served is None


def test_gpu_and_cpu_nodes_each_get_a_pool_of_their_own_class() -> None:
    """Issue 13 item 9: a trace with GPU and CPU-only nodes that name no type (Alibaba DLRM)
    gets a stand-in type per class, prices each node by its class, and autoscales with a GPU
    pool of a GPU type and a CPU pool of a CPU type: a CPU type never stands for GPU nodes."""
    from fleetshare.model.node import Node

    catalog = load_catalog()
    gpu_node = Node("g", {GPU: 8 * MILLI, "cpu": 96 * MILLI})
    cpu_node = Node("c", {"cpu": 192 * MILLI})
    nodes = [cpu_node, cpu_node, cpu_node, gpu_node]  # CPU nodes are the most common shape
    stand_in = stand_in_types(nodes, catalog)
    assert catalog.get(stand_in["gpu"]).gpu_count == 8
    assert catalog.get(stand_in["cpu"]).gpu_count == 0
    assert node_price(gpu_node, catalog, stand_in)[0] == stand_in["gpu"]
    assert node_price(cpu_node, catalog, stand_in)[0] == stand_in["cpu"]
    pools = autoscale_pools(nodes, stand_in, catalog)
    assert [(p.name, p.instance_types) for p in pools] == [
        ("gpu", [stand_in["gpu"]]),
        ("cpu", [stand_in["cpu"]]),
    ]
    # each pool's ceiling is its own class's capacity in whole instances
    per_gpu_node = catalog.get(stand_in["gpu"]).allocatable[GPU]
    assert pools[0].limits[GPU] == str(-(-8 * MILLI // per_gpu_node) * per_gpu_node // MILLI)
    # an override stands for every class: one pool
    only = stand_in_types(nodes, catalog, "m5.large")
    assert only == {"gpu": "m5.large", "cpu": "m5.large"}
    assert len(autoscale_pools(nodes, only, catalog)) == 1


def test_a_gpu_node_larger_than_every_real_type_stands_as_a_real_gpu_type() -> None:
    """The DLRM loader's GPU node (8 GPUs, 3.2 TiB) exceeds every catalog type: the stand-in
    is a preferred 8-GPU type, never a CPU type that covers the CPU and memory."""
    from fleetshare.model.node import Node

    huge = Node("g", {GPU: 8 * MILLI, "cpu": 192 * MILLI, "memory": 3200 * 2**30 * MILLI})
    assert node_instance_type([huge], load_catalog()) == P4D


def test_autoscaled_gpu_and_cpu_work_both_run(tmp_path: Path) -> None:
    """GPU and CPU-only work on an input with both node classes: autoscaled, both run, on
    the classes' stand-in types, and nothing is left unserved."""
    scenario = {
        "name": "two-classes",
        "description": "GPU and CPU nodes, no instance types",
        "cluster": {
            "nodes": [
                {"name": "g", "allocatable": {GPU: 8, "cpu": 96, "memory": "1000Gi"}},
                {"name": "c", "allocatable": {"cpu": 192, "memory": "700Gi"}},
            ]
        },
        "policy": {"teams": [{"name": "t", "quota": [{"resources": {GPU: 8, "cpu": 288}}]}]},
        "workloads": [
            {
                "name": "gpu-job",
                "team": "t",
                "at": 0,
                "duration": 600,
                "requests": {GPU: 1, "cpu": 8, "memory": "40Gi"},
            },
            {
                "name": "cpu-job",
                "team": "t",
                "at": 0,
                "duration": 600,
                "requests": {"cpu": 64, "memory": "320Gi"},
            },
        ],
    }
    inp = from_scenario(_write(tmp_path, scenario))
    (r,) = run_variants(inp, select(["static-autoscale"]), jobs=1)
    assert r.never_served is None
    assert r.cluster["finished"] == 2
    run = Runner(build_scenario(inp, select(["static-autoscale"])[0], load_catalog())).run()
    assert run.autoscaler is not None
    launched = {m.instance.instance_type for m in run.autoscaler.nodes.values()}
    # the GPU job got a GPU node; the CPU job may share it (one node is cheaper than two)
    assert inp.stand_in["gpu"] in launched
    assert launched <= {inp.stand_in["gpu"], inp.stand_in["cpu"]}


def test_the_terminal_tables_fit_120_columns(
    tiny: SimulationInput, results: dict[str, VariantResult]
) -> None:
    """Issue 14: every number whole at 120 columns (two tables, a third for the autoscaled
    runs' under-provisioning), all columns with --wide."""
    from rich.console import Console

    from fleetshare.simulate.report import comparison_tables

    runs = list(results.values())
    console = Console(width=120, record=True)
    tables = comparison_tables(tiny, runs)
    assert len(tables) == 3
    for table in tables:
        assert console.measure(table).maximum <= 120
        console.print(table)
    text = console.export_text()
    assert "…" not in text and "..." not in text
    for r in runs:  # every policy's name and wait p99 are shown whole
        assert r.name in text
    wide = comparison_tables(tiny, runs, wide=True)
    assert len(wide) == 1
    headers = {c.header for t in tables for c in t.columns}
    assert headers <= {c.header for c in wide[0].columns}


def test_under_provisioning_is_shown_for_autoscaled_runs_only(tmp_path: Path) -> None:
    """Hand-built: one 8-GPU job at 0 and one at 4 h, on one fixed node or an autoscaled pool
    that starts empty: each autoscaled job waits for its node to launch, two events."""
    from rich.console import Console

    from fleetshare.simulate.report import comparison_tables, duration, write_report

    scenario = {
        "name": "two-waits",
        "cluster": {"nodes": [{"instance_type": P4D, "count": 1}]},
        "policy": {"teams": [{"name": "a", "quota": [{"resources": {GPU: 8}}]}]},
        "workloads": [
            {"name": "x1", "team": "a", "at": 0, "duration": 1800, "requests": {GPU: 8}},
            {"name": "x2", "team": "a", "at": 4 * 3600, "duration": 1800, "requests": {GPU: 8}},
        ],
    }
    path = tmp_path / "two-waits.yaml"
    path.write_text(yaml.safe_dump(scenario))
    inp = from_scenario(path)
    fixed, scaled = run_variants(inp, select(["static", "static-autoscale"]), jobs=1)
    m = scaled.measured
    waits = m.first_admit - m.submit  # a second computation: every wait was for a launch
    assert np.all(waits > 0)
    c = scaled.cluster
    assert (c["under_provision_events"], c["under_provisioned_jobs"]) == (2, 2)
    assert c["under_provisioned_hours"] == pytest.approx(8 * waits.sum() / HOUR, abs=1e-4)
    assert c["under_provision_span_hours"] == pytest.approx(waits.sum() / HOUR, abs=1e-4)
    assert fixed.cluster["under_provision_events"] is None

    console = Console(width=120, record=True)
    tables = comparison_tables(inp, [fixed, scaled])
    assert len(tables) == 3 and tables[2].title == "under-provisioning (autoscaled)"
    console.print(tables[2])
    rows = [line for line in console.export_text().splitlines() if "static" in line]
    assert len(rows) == 1  # autoscaled runs only
    shown = f"{8 * waits.sum() / HOUR:,.1f}"
    cells = [cell.strip() for cell in rows[0].split("│")[1:-1]]
    assert cells == ["static-autoscale", "2", "2", shown, duration(waits.sum())]
    assert len(comparison_tables(inp, [fixed])) == 2  # no autoscaled run: no such table
    wide = comparison_tables(inp, [fixed, scaled], wide=True)[0]
    events = next(col for col in wide.columns if col.header == "under-prov.\nevents")
    assert list(events.cells) == ["—", "2"]  # a fixed cluster's run has no figures

    page = (write_report(tmp_path / "report", inp, [fixed, scaled])[0]).read_text()
    section = page[page.index("<h3>Under-provisioning") : page.index("overview.png")]
    assert f"<td>static-autoscale</td><td>2</td><td>2</td><td>{shown}</td>" in section
    assert "<td>static</td>" not in section and "demand kept waiting for capacity" in section


def test_findings_lead_with_the_cost_in_the_window_and_name_ties_together(
    results: dict[str, VariantResult],
) -> None:
    """Issue 28 item 8: the words lead with the cost in the window, the same for the five
    fixed-cluster policies (2 nodes x the p4d price x 1.5 h), named together, no "cheapest";
    the tail after the window is a line of its own; equal figures are never awarded to one
    policy."""
    from fleetshare.simulate.report import findings

    runs = list(results.values())
    lines = findings(runs)
    price = load_catalog().get(P4D).price_per_hour
    assert price is not None
    window = f"${2 * price * 1.5:,.2f}"  # cents below $100
    fixed = "static, idle50, borrow-quota, fair-share and no-fair-share"
    assert lines[0].startswith("Cost in the window (1.5 h): ")
    assert f"{window} under {fixed}" in lines[0]
    assert "sharing changes no fixed cluster's cost" in lines[0]
    assert lines[1].startswith("After the window, finishing the work left at its end (the tail")
    # static's tail: a2 and a3 run on to 7800 s, 2400 s after the window's 5400
    assert f"${2 * price * 2400 / HOUR:,.2f} (makespan 2.2h) under static" in lines[1]
    assert not any(line.startswith("Cheapest") for line in lines)
    assert findings(runs[:1]) == []


def test_a_tie_is_shown_as_a_tie(results: dict[str, VariantResult]) -> None:
    """Two policies with the same figure as shown are one group, in the order given, never a
    winner and a runner-up; a single group says it holds for every policy."""
    from fleetshare.simulate.report import findings, ranked

    runs = [results["fair-share"], results["no-fair-share"], results["static"]]
    groups = ranked(
        runs, lambda r: r.cluster["lost_hours"], lambda r: f"{r.cluster['lost_hours']:g}"
    )
    assert groups == [("0", ["static"]), ("4", ["fair-share", "no-fair-share"])]
    same = findings([results["fair-share"], results["no-fair-share"]])
    assert "p99 of time queued: 1.5h under all 2 policies." in same


def test_within_quota_at_submission_by_hand() -> None:
    """Team 0 (quota 8): j0 (8 GPUs, 0-100) fits; at 50 j1 (4) makes 12: does not; at 100
    j0's finish counts first, so j2 (4) joins j1's 4: fits (8); at 250 j1 is done: j3 (1,
    never finishes) makes 5: fits. At 400 j4 (7, zero-length) and j5 (1) come together with
    j3's 1 still there: 9, and both are judged together: neither fits. Team 1 has no quota:
    nothing fits. The input order of equal submissions does not matter."""
    submit = np.array([0.0, 50.0, 100.0, 250.0, 400.0, 400.0, 0.0])
    finish = np.array([100.0, 200.0, 300.0, np.nan, 400.0, 500.0, 50.0])
    team = np.array([0, 0, 0, 0, 0, 0, 1])
    amount = np.array([8.0, 4.0, 4.0, 1.0, 7.0, 1.0, 1.0])
    quota = np.array([8.0, 0.0])
    fits = within_quota_at_submission(submit, finish, team, amount, quota)
    assert fits.tolist() == [True, False, True, True, False, False, False]
    order = np.array([5, 4, 6, 3, 2, 1, 0])
    again = within_quota_at_submission(
        submit[order], finish[order], team[order], amount[order], quota
    )
    assert again.tolist() == fits[order].tolist()
    assert with_max(np.array([3.0, 1.0, 2.0]))["max"] == 3.0
    assert with_max(np.zeros(0))["max"] is None


def test_lent_is_what_others_borrow_shared_by_idle_quota_by_hand() -> None:
    """Quotas 8, 8, 16. From 0 to 10 s the teams use 16, 4, 8: team 0 is 8 beyond its quota,
    teams 1 and 2 have 4 and 8 idle, so they lent 8 x 4/12 and 8 x 8/12. From 10 to 20 s they
    use 20, 8, 16 (the cluster has 12 beyond the quotas): nobody has idle quota, nobody lent."""
    usage = Step(np.array([0.0, 10.0, 20.0]), np.array([[16, 4, 8], [20, 8, 16], [0, 0, 0]], float))
    given = lent(usage, np.array([8.0, 8.0, 16.0]))
    assert given.values[0].tolist() == pytest.approx([0.0, 8 * 4 / 12, 8 * 8 / 12])
    assert given.values[1].tolist() == [0.0, 0.0, 0.0]
    assert given.area(30.0).tolist() == pytest.approx([0.0, 80 * 4 / 12, 80 * 8 / 12])


GRACE: dict[str, Any] = {
    **SCENARIO,
    "policy": {**SCENARIO["policy"], "cluster": {"preemption": {"reclaim_grace_seconds": 2400}}},
    "workloads": SCENARIO["workloads"][:2] + SCENARIO["workloads"][3:],
}


def test_a_lender_waits_for_its_quota_while_reclaim_is_held_back(tmp_path: Path) -> None:
    """The lender's view by hand: a runs a1 and a2 at 0 (a2 on b's idle quota); b1 comes at
    1800, within b's quota, but borrowed work younger than 2400 s is not reclaimed: b1 waits
    600 s under sharing (0 under static quotas). b lent 8 GPUs for 2400 s (5.33 GPU-h), a
    borrowed as much; the reclaimed a2 was borrowed work, not work admitted within quota."""
    runs = run_variants(from_scenario(_write(tmp_path, GRACE)), select(["static", "fair-share"]))
    static, shared = (r.teams for r in runs)
    assert static["b"]["in_quota_jobs"] == shared["b"]["in_quota_jobs"] == 1
    assert static["b"]["in_quota_wait_seconds"]["max"] == 0
    assert shared["b"]["in_quota_wait_seconds"] == {
        "mean": 600.0,
        "p50": 600.0,
        "p95": 600.0,
        "p99": 600.0,
        "max": 600.0,
    }
    assert shared["b"]["lent_hours"] == pytest.approx(8 * 2400 / HOUR, abs=1e-3)
    assert shared["a"]["borrowed_hours"] == pytest.approx(8 * 2400 / HOUR, abs=1e-3)
    assert static["b"]["lent_hours"] == shared["a"]["lent_hours"] == 0
    assert shared["a"]["preemptions"] == 1 and shared["a"]["preemptions_in_quota"] == 0
    # a's a1 and a2 come together (16 GPUs on a quota of 8): judged together, neither fits
    assert shared["a"]["in_quota_jobs"] == 0


def test_preempting_work_admitted_within_quota_is_counted_as_such(tmp_path: Path) -> None:
    """Static quotas: team a's low-priority job (8 GPUs, within a's quota) runs from 0; a
    high-priority one of a's comes at 100 and preempts it: one preemption in quota, 100 s x 8
    GPUs lost. Under sharing the high one borrows b's idle quota instead: none."""
    scenario = {
        **SCENARIO,
        "policy": {
            **SCENARIO["policy"],
            "cluster": {
                "priority_classes": [{"name": "low", "weight": 10}, {"name": "high", "weight": 90}]
            },
        },
        "workloads": [
            {"name": "low", "team": "a", "at": 0, "duration": 3600, "requests": {GPU: 8}},
            {"name": "high", "team": "a", "at": 100, "duration": 600, "requests": {GPU: 8}},
        ],
    }
    scenario["workloads"][0]["priority"] = "low"
    scenario["workloads"][1]["priority"] = "high"
    static, shared = run_variants(
        from_scenario(_write(tmp_path, scenario)), select(["static", "fair-share"])
    )
    assert static.cluster["preemptions_by_reason"] == {"priority": 1}
    assert static.cluster["preemptions_in_quota"] == static.teams["a"]["preemptions_in_quota"] == 1
    assert static.cluster["lost_hours_in_quota"] == pytest.approx(8 * 100 / HOUR, abs=1e-3)
    assert shared.cluster["preemptions"] == shared.cluster["preemptions_in_quota"] == 0


def test_the_lender_s_view_in_the_terminal_and_the_report(
    tiny: SimulationInput, results: dict[str, VariantResult], tmp_path: Path
) -> None:
    """On the two-team case b lends (a borrows b's quota 0-1800 and 5400-6000 under sharing
    without limits: 8 x 2400 s = 5.3 GPU-h); its one job within quota never waits; a never
    lends. The terminal's table and the report's section show b under every policy."""
    from rich.console import Console

    from fleetshare.simulate.report import lender_table, lenders, write_report

    runs = [results[n] for n in ("static", "idle50", "fair-share")]
    assert lenders(runs) == ["b"]
    table = lender_table(tiny, runs)
    assert table is not None
    console = Console(width=120, record=True)
    assert console.measure(table).maximum <= 120
    console.print(table)
    rows = [line for line in console.export_text().splitlines() if "│" in line]
    cells = [[c.strip() for c in row.split("│")[1:-1]] for row in rows]
    assert cells[-3:] == [
        ["b", "static", "0.0", "1", "0s/0s/0s", "0 (0)", "0.0", "0.0"],
        ["", "idle50", "0.0", "1", "0s/0s/0s", "0 (0)", "0.0", "0.0"],
        ["", "fair-share", "5.3", "1", "0s/0s/0s", "0 (0)", "0.0", "0.0"],
    ]
    assert lender_table(tiny, runs[:1]) is None  # nothing to compare with
    page = write_report(tmp_path / "r", tiny, runs)[0].read_text()
    section = page[page.index("<h2>The lender's view") : page.index("<h2>Definitions")]
    assert "<td>b</td><td>static</td><td>0.0</td><td>1</td><td>0s/0s/0s</td>" in section


def test_every_column_of_the_report_is_defined(
    tiny: SimulationInput, results: dict[str, VariantResult], tmp_path: Path
) -> None:
    """Issue 28 item 8: a Definitions section defines every column header of the report's
    tables, and the terminal's captions define theirs."""
    import html
    import re

    from fleetshare.simulate.report import comparison_tables, write_report

    page = write_report(tmp_path / "r", tiny, list(results.values()))[0].read_text()
    headers = {html.unescape(h) for h in re.findall(r"<th[^>]*>([^<]*)</th>", page)}
    defs = page[page.index("<h2>Definitions") : page.index("<h2>All measures")]
    defined = {html.unescape(d) for d in re.findall(r"<dt>([^<]*)</dt>", defs)}
    assert headers and headers <= defined
    assert "cost in window $" in headers and "after window (tail) $" in headers
    for table in comparison_tables(tiny, list(results.values()), wide=True):
        for column in table.columns:
            if column.header != "policy":
                assert f"{str(column.header).replace(chr(10), ' ')}: " in str(table.caption)


# -- the showcase (issue 28 item 8) ---------------------------------------------------------------


FIXED = ["static", "idle50", "borrow-quota", "fair-share", "no-fair-share"]


def test_the_showcase_is_the_teams_that_needed_to_borrow() -> None:
    """The showcase's sub-cluster is its stated rule applied to days 13-16 (the teams whose
    demand exceeded their quota in at least 5% of the window), and stays when only the window
    is changed."""
    from fleetshare.simulate.showcase import (
        SHOWCASE_CLUSTERS,
        SHOWCASE_OPTIONS,
        contending_teams,
        over_quota_share,
        showcase_options,
    )

    assert contending_teams(13, 3) == list(SHOWCASE_CLUSTERS) == SHOWCASE_OPTIONS["clusters"]
    share = over_quota_share(13, 3)
    assert share["vcpDC"] == 1.0 and share["vcJkd"] == 0.0  # always beyond; never
    assert share["vcMod"] >= 0.05 > share["vchbv"] > 0  # in, and just out
    assert showcase_options(days=1) == {**SHOWCASE_OPTIONS, "days": 1}


def test_on_the_showcase_the_sharing_rules_differ_where_an_admin_decides() -> None:
    """``fleetshare simulate``'s default input: every fixed-cluster policy but one pair comes
    out different on what an admin decides by -- waits of jobs within quota, borrowed
    GPU-hours, preemptions and the work they threw away: each figure tells some of them
    apart, and every two of them differ in some -- and the note names the pair that did not
    (borrow-quota and fair-share: nobody borrowed beyond its own quota's limit)."""
    from fleetshare.simulate.report import coinciding
    from fleetshare.simulate.showcase import SHOWCASE_OPTIONS, SHOWCASE_TRACE

    inp = from_trace(SHOWCASE_TRACE, SHOWCASE_OPTIONS)
    runs = {r.name: r for r in run_variants(inp, select(FIXED), jobs=2)}
    distinct = ["static", "idle50", "fair-share", "no-fair-share"]
    keys = ("in_quota_wait_seconds", "borrowed_hours", "preemptions", "lost_hours")
    figures = {name: [repr(runs[name].cluster[key]) for key in keys] for name in distinct}
    for i, key in enumerate(keys):
        assert len({figures[name][i] for name in distinct}) > 1, key
    for one, other in itertools.combinations(distinct, 2):
        assert figures[one] != figures[other], (one, other)
    (note,) = coinciding(list(runs.values()))
    assert note.startswith("borrow-quota, fair-share came out the same, preemptions included")
    assert "within a borrow limit of its own quota" in note


def test_on_all_16_teams_the_sharing_rules_come_out_the_same_and_say_why() -> None:
    """The same window on the whole cluster (what the showcase was before): work never used
    more than the cluster, so the four sharing rules come out identical -- and the output says
    so, with the peak use, rather than leaving equal numbers to be read as equal policies."""
    from fleetshare.simulate.report import coinciding, findings

    inp = from_trace("helios", {"start_day": 13, "days": 3})
    runs = run_variants(inp, select(FIXED), jobs=2)
    (note,) = coinciding(runs)
    assert note.startswith("idle50, borrow-quota, fair-share, no-fair-share came out the same")
    assert "work used at most 821 of 856 GPUs" in note
    lines = findings(runs)
    assert "under idle50, borrow-quota, fair-share and no-fair-share" in lines[2]  # p99, a tie
