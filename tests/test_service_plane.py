"""The control plane in-process: metrics on hand-built cases with known answers, restart
from the store, and the config."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from sqlalchemy import select

from fleetshare.autoscaling.nodepool import NodePool, PoolSet
from fleetshare.model.catalog import load_catalog
from fleetshare.model.reason import PENDING_CATEGORIES
from fleetshare.scenario.loader import ScenarioError, load_scenario_data
from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service import nodepools
from fleetshare.service import store as tables
from fleetshare.service.auth import Principal
from fleetshare.service.config import load_config
from fleetshare.service.metrics import ServiceMetrics
from fleetshare.service.plane import ControlPlane, Forbidden, NotFound, PoolProblems
from fleetshare.service.store import Store

ADMIN = Principal(1, "admin")
CONFIG: dict[str, Any] = {
    "name": "two-nodes",
    "cluster": {"nodes": [{"instance_type": "ml.g5.8xlarge", "count": 2, "zone": "z1"}]},
    "policy": {
        "cluster": {"idle_resource_sharing": False},
        "teams": [
            {
                "name": "team-a",
                "group": "lab",
                "quota": [{"instance_type": "ml.g5.8xlarge", "count": 1}],
                "borrow_limits": [{"percent_of_quota": 100}],
            },
            {
                "name": "team-b",
                "group": "lab",
                "quota": [{"instance_type": "ml.g5.8xlarge", "count": 1}],
            },
        ],
        "groups": [{"name": "lab"}],
    },
}


def plane_for(tmp_path: Path, config: dict[str, Any] = CONFIG) -> ControlPlane:
    scenario = load_scenario_data(config, Path("."))
    return ControlPlane(scenario, Store(f"sqlite:///{tmp_path / 'fs.db'}"))


def submit(plane: ControlPlane, name: str, team: str, **extra: Any) -> None:
    spec = {"name": name, "team": team, "requests": {"nvidia.com/gpu": 1, "cpu": 2}, **extra}
    plane.submit(WorkloadSpec.model_validate(spec), ADMIN)


def samples(metrics: ServiceMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            out[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found[name, tuple(sorted(labels.items()))]


def test_metrics_of_a_reclaim(tmp_path: Path) -> None:
    """team-a runs a1 and a2 (one borrowed); team-b's b1 reclaims one; a3 waits."""
    plane = plane_for(tmp_path)
    metrics = ServiceMetrics(plane)
    submit(plane, "a1", "team-a")
    submit(plane, "a2", "team-a")
    plane.step()
    assert set(plane.view.running) == {"a1", "a2"}
    # team-a borrows 1 of the 2 GPUs of quota in the cluster (its other resources are
    # within its quota): weighted share 1/2 / weight 1
    share = "fleetshare_cluster_queue_weighted_share"
    assert value(samples(metrics), share, cluster_queue="team-a") == 0.5
    submit(plane, "b1", "team-b")
    submit(plane, "a3", "team-a")
    plane.step()
    running = set(plane.view.running)
    assert "b1" in running and len(running & {"a1", "a2"}) == 1  # one of a's reclaimed
    found = samples(metrics)
    lab = {"cohort": "lab", "flavor": "ml.g5.8xlarge"}
    gpu = {**lab, "resource": "nvidia.com/gpu"}

    assert value(found, "fleetshare_admitted_active_workloads", cluster_queue="team-a") == 1
    assert value(found, "fleetshare_admitted_active_workloads", cluster_queue="team-b") == 1
    pending = "fleetshare_pending_workloads"
    assert value(found, pending, cluster_queue="team-a", status="inadmissible") == 2
    assert value(found, pending, cluster_queue="team-a", status="active") == 0
    assert value(found, pending, cluster_queue="team-b", status="inadmissible") == 0
    usage = "fleetshare_cluster_queue_resource_usage"
    assert value(found, usage, cluster_queue="team-a", **gpu) == 1
    assert value(found, usage, cluster_queue="team-b", **gpu) == 1
    cpu = {**lab, "resource": "cpu"}
    assert value(found, usage, cluster_queue="team-a", **cpu) == 2
    quota = "fleetshare_cluster_queue_nominal_quota"
    assert value(found, quota, cluster_queue="team-a", **gpu) == 1
    g5 = load_catalog().get("ml.g5.8xlarge")
    assert value(found, quota, cluster_queue="team-a", **cpu) == g5.allocatable["cpu"] / 1000
    borrowed = "fleetshare_cluster_queue_borrowed_resources"
    assert value(found, borrowed, cluster_queue="team-a", **gpu) == 0
    # borrow_limits: percent_of_quota 100 of 1 GPU (Kueue's borrowingLimit gauge)
    limit = "fleetshare_cluster_queue_borrowing_limit"
    assert value(found, limit, cluster_queue="team-a", **gpu) == 1
    # neither team borrows now (a: 1 of 1 GPU, b: 1 of 1): both shares are 0; weight 1
    assert value(found, "fleetshare_cluster_queue_weighted_share", cluster_queue="team-a") == 0
    assert value(found, "fleetshare_cluster_queue_fair_share_weight", cluster_queue="team-b") == 1
    assert (
        value(
            found,
            "fleetshare_preempted_workloads_total",
            preempting_cluster_queue="team-b",
            reason="InCohortReclamation",
        )
        == 1
    )
    evicted = "fleetshare_evicted_workloads_total"
    assert value(found, evicted, cluster_queue="team-a", reason="Preempted") == 1
    admitted = "fleetshare_admitted_workloads_total"
    assert value(found, admitted, cluster_queue="team-a") == 2
    assert value(found, admitted, cluster_queue="team-b") == 1
    wait = "fleetshare_admission_wait_time_seconds_count"
    assert value(found, wait, cluster_queue="team-a") == 2
    assert value(found, wait, cluster_queue="team-b") == 1
    node = {"instance_type": "ml.g5.8xlarge", "capacity_type": "on-demand", "source": "config"}
    assert value(found, "fleetshare_nodes", zone="z1", **node) == 2
    assert g5.price_per_hour is not None
    cost = value(found, "fleetshare_nodes_hourly_cost_dollars", **node)
    assert cost == pytest.approx(2 * g5.price_per_hour)
    assert value(found, "fleetshare_loop_reconcile_duration_seconds_count") == 2
    assert value(found, "fleetshare_loop_up") == 1


def test_borrowed_and_admission_wait(tmp_path: Path) -> None:
    """a2 borrows one GPU; the wait histogram counts each admission once, in its bucket."""
    plane = plane_for(tmp_path)
    metrics = ServiceMetrics(plane)
    submit(plane, "a1", "team-a")
    submit(plane, "a2", "team-a")
    plane.step()
    found = samples(metrics)
    gpu = {"cohort": "lab", "flavor": "ml.g5.8xlarge", "resource": "nvidia.com/gpu"}
    borrowed = "fleetshare_cluster_queue_borrowed_resources"
    assert value(found, borrowed, cluster_queue="team-a", **gpu) == 1
    assert value(found, borrowed, cluster_queue="team-b", **gpu) == 0
    bucket = "fleetshare_admission_wait_time_seconds_bucket"
    assert value(found, bucket, cluster_queue="team-a", le="60.0") == 2  # admitted at once
    assert value(found, bucket, cluster_queue="team-a", le="+Inf") == 2


def test_pending_workloads_by_the_category_of_their_reason(tmp_path: Path) -> None:
    """Issue 28 item 6: one pending workload per kind of reason, each counted under its
    category, on the leader and on a follower that reads them from the event log. Two nodes
    of one GPU and 32 CPUs; team-a (quota one node, may borrow as much) runs a1 and a2 (a2
    borrows team-b's idle GPU); a3 is over quota and borrowing limit (``quota``); a4 asks 64
    CPUs, more than any node has (``too-large``); b1 selects a zone no node is in
    (``no-node``); team-c is stopped (``refused``)."""
    config = {
        **CONFIG,
        "policy": {
            **CONFIG["policy"],
            "teams": [
                *CONFIG["policy"]["teams"],
                {"name": "team-c", "quota": [], "stop_policy": "Hold"},
            ],
        },
    }
    plane = plane_for(tmp_path, config)
    metrics = ServiceMetrics(plane)
    submit(plane, "a1", "team-a")
    submit(plane, "a2", "team-a")
    plane.step()
    submit(plane, "a3", "team-a")
    submit(plane, "a4", "team-a", requests={"nvidia.com/gpu": 1, "cpu": 64})
    submit(plane, "b1", "team-b", node_selector={"topology.kubernetes.io/zone": "z9"})
    submit(plane, "c1", "team-c")
    plane.step()
    expected = {
        ("team-a", "quota"): 1,
        ("team-a", "too-large"): 1,
        ("team-b", "no-node"): 1,
        ("team-c", "refused"): 1,
    }
    follower = ControlPlane(plane.config, Store(plane.store.url), mode="api")
    try:
        for replica in (plane, follower):
            found = samples(ServiceMetrics(replica) if replica is follower else metrics)
            for team in ("team-a", "team-b", "team-c"):
                for category in PENDING_CATEGORIES:
                    count = value(
                        found,
                        "fleetshare_pending_workloads_by_reason",
                        cluster_queue=team,
                        reason=category,
                    )
                    assert count == expected.get((team, category), 0), (replica.mode, team)
                inadmissible = value(
                    found, "fleetshare_pending_workloads", cluster_queue=team, status="inadmissible"
                )
                assert inadmissible == sum(n for (t, _), n in expected.items() if t == team)
        waiting = plane.current_view().waiting
        assert waiting["a3"].reason.category == "quota" and "borrow" in waiting["a3"].reason
    finally:
        follower.close()


def _admissions(running: Any) -> dict[str, tuple[float, Any]]:
    """Admission times and assignments."""
    return {n: (r.admitted_at, r.assignment) for n, r in running.items()}


def _same(actual: dict[str, tuple[float, Any]], expected: dict[str, tuple[float, Any]]) -> bool:
    """The same admissions: times to the microsecond (they go through Unix time in the store,
    so a float round trip may move the last digit), the same assignments."""
    return actual.keys() == expected.keys() and all(
        actual[n][1] == expected[n][1] and actual[n][0] == pytest.approx(expected[n][0], abs=2e-6)
        for n in expected
    )


def test_restart_keeps_admissions_and_their_finish_times(tmp_path: Path) -> None:
    plane = plane_for(tmp_path)
    submit(plane, "a1", "team-a", duration=3600)
    submit(plane, "b1", "team-b")
    submit(plane, "a2", "team-a", node_selector={"no": "such-node"})
    plane.step()
    before = _admissions(plane.view.running)
    assert set(before) == {"a1", "b1"}
    waiting = set(plane.view.pending)
    plane.close()

    again = plane_for(tmp_path)  # a new process on the same store
    assert _same(_admissions(again.backend.running), before)
    assert set(again.backend.pending) == waiting
    finish = again.backend.next_timer()
    assert finish is not None and finish == pytest.approx(before["a1"][0] + 3600)
    again.step()
    assert _same(_admissions(again.view.running), before)


def test_restart_requeues_work_of_nodes_that_left(tmp_path: Path) -> None:
    plane = plane_for(tmp_path)
    submit(plane, "a1", "team-a")
    plane.step()
    node = plane.view.running["a1"].assignment.placement[0][0][0]
    plane.close()
    config = {**CONFIG, "cluster": {"nodes": [{"name": "other", "instance_type": "ml.g5.8xlarge"}]}}
    again = plane_for(tmp_path, config)
    assert node not in again.backend.nodes
    again.step()
    assert set(again.view.running) == {"a1"}
    assert again.view.running["a1"].assignment.placement[0][0][0] == "other"


def test_viewer_cannot_submit(tmp_path: Path) -> None:
    plane = plane_for(tmp_path)
    with pytest.raises(Forbidden):
        plane.submit(
            WorkloadSpec.model_validate({"name": "v", "team": "team-a", "requests": {"cpu": 1}}),
            Principal(2, "viewer"),
        )


def test_default_config_and_configs_without_workloads(tmp_path: Path) -> None:
    config = load_config()
    assert [n.name for n in config.nodes] == [f"g5.8xlarge-{i}" for i in range(4)]
    assert [t.name for t in config.policy.teams] == ["team-a", "team-b"]
    path = tmp_path / "config.yaml"
    with_work = {**CONFIG, "workloads": [{"name": "w", "team": "team-a", "requests": {"cpu": 1}}]}
    path.write_text(yaml.safe_dump(with_work))
    with pytest.raises(ScenarioError, match="submit workloads through the API"):
        ControlPlane(load_config(path), Store(f"sqlite:///{tmp_path / 'x.db'}"))


AUTOSCALED: dict[str, Any] = {
    "name": "autoscaled",
    "cluster": {"nodes": []},
    "policy": {"teams": [{"name": "research", "quota": [{"resources": {"nvidia.com/gpu": 8}}]}]},
    "node_pools": [{"name": "gpu", "families": ["g5"], "capacity_types": ["on-demand"]}],
    "cloud": {"seed": 1, "launch_latency_seconds": 0.3},
    "autoscaler": {"batch_idle_seconds": 0, "batch_max_seconds": 0},
}


def test_node_pools_launch_nodes_live(tmp_path: Path) -> None:
    """With node pools, the autoscaler launches a node on the simulated cloud; it joins after
    its launch latency (wall clock) and the work is admitted on it."""
    plane = plane_for(tmp_path, AUTOSCALED)
    metrics = ServiceMetrics(plane)
    plane.start()
    try:
        submit(plane, "train", "research")
        deadline = time.monotonic() + 15
        while "train" not in plane.view.running and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "train" in plane.view.running
    finally:
        plane.stop()
    node = plane.view.running["train"].assignment.placement[0][0][0]
    info = plane.view.node_info[node]
    assert info.source == "autoscaler" and info.pool == "gpu" and info.price_per_hour
    found = samples(metrics)
    labels = {"capacity_type": "on-demand", "source": "autoscaler"}
    itype = next(n.instance_type for n in plane.view.nodes if n.name == node)
    assert itype is not None
    cost = value(found, "fleetshare_nodes_hourly_cost_dollars", instance_type=itype, **labels)
    assert cost == pytest.approx(info.price_per_hour)


def _run_until_admitted(plane: ControlPlane, *names: str) -> None:
    plane.start()
    try:
        deadline = time.monotonic() + 15
        while not set(names) <= set(plane.view.running) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert set(names) <= set(plane.view.running)
    finally:
        plane.stop()


def test_restart_takes_back_autoscaled_nodes_and_their_work(tmp_path: Path) -> None:
    """A restart takes back the nodes the autoscaler launched (same name, instance and
    price): their work stays admitted there, the autoscaler manages them again, and its next
    launch takes a new name and instance id. A node whose pool left the config leaves."""
    plane = plane_for(tmp_path, AUTOSCALED)
    submit(plane, "train", "research")
    _run_until_admitted(plane, "train")
    node = plane.view.running["train"].assignment.placement[0][0][0]
    info = plane.view.node_info[node]
    admitted = _admissions(plane.view.running)
    plane.close()

    again = plane_for(tmp_path, AUTOSCALED)
    assert again.backend.node_info[node] == info
    assert _same(_admissions(again.backend.running), admitted)
    assert again.autoscaler is not None and again.autoscaler.manages(node)
    submit(again, "train-2", "research")  # the node's one GPU is taken: a launch
    _run_until_admitted(again, "train", "train-2")
    assert _same(_admissions({"train": again.view.running["train"]}), admitted)
    second = again.view.running["train-2"].assignment.placement[0][0][0]
    instance = again.view.node_info[second].instance
    assert second != node and instance is not None and info.instance is not None
    assert instance["id"] != info.instance["id"]
    again.close()

    without_pools = {k: v for k, v in AUTOSCALED.items() if k not in ("node_pools", "cloud")}
    third = plane_for(tmp_path, without_pools)
    assert not third.backend.nodes
    assert set(third.backend.pending) == {"train", "train-2"}  # requeued: node-removed
    with third.store.read("workloads-read") as conn:
        rows = conn.execute(
            select(tables.nodes.c.name, tables.nodes.c.leave_reason).where(
                tables.nodes.c.name == node
            )
        ).all()
    assert [tuple(r) for r in rows] == [(node, "its node pool 'gpu' is not in the config any more")]
    third.close()


# -- node pools and an admin's node operations ---------------------------------------------------

GPU_POOL: dict[str, Any] = {"name": "gpu", "families": ["g5"], "limits": {"nodes": 2}}


def _pools(*specs: dict[str, Any]) -> list[NodePool]:
    return PoolSet.model_validate({"pools": list(specs)}).pools


def _audit(plane: ControlPlane) -> list[tuple[str, str, Any]]:
    with plane.store.read("workloads-read") as conn:
        rows = conn.execute(select(tables.audit_log).order_by(tables.audit_log.c.id)).all()
    return [(r.action, r.actor, r.details) for r in rows]


def test_node_pools_set_live_are_stored_and_win_over_the_config(tmp_path: Path) -> None:
    """A config without pools: pools set by an admin give the loop an autoscaler at once
    (work waiting for a GPU gets a node), are audited, and after a restart the stored pools
    are in force, with the node launched under them taken back."""
    no_pools = {k: v for k, v in AUTOSCALED.items() if k != "node_pools"}
    plane = plane_for(tmp_path, no_pools)
    assert plane.autoscaler is None and plane.pools_in_force() == (None, [])
    submit(plane, "train", "research")
    plane.step()
    assert "train" in plane.view.pending  # no node, no pool
    with pytest.raises(Forbidden):
        plane.set_pools(_pools(GPU_POOL), Principal(2, "viewer"))
    version = plane.set_pools(_pools(GPU_POOL), ADMIN)
    _run_until_admitted(plane, "train")
    node = plane.view.running["train"].assignment.placement[0][0][0]
    assert plane.view.node_info[node].pool == "gpu"
    row, pools = plane.pools_in_force()
    assert row is not None and row.id == version and pools == _pools(GPU_POOL)
    assert ("nodepools-set", ADMIN.actor, {"version": version, "pools": ["gpu"]}) in _audit(plane)
    plane.close()

    again = plane_for(tmp_path, no_pools)  # the config still has none: the store's win
    assert again.node_pools == _pools(GPU_POOL)
    assert again.autoscaler is not None and again.autoscaler.manages(node)
    assert set(again.backend.running) == {"train"}
    again.close()


def test_node_pools_are_checked_naming_the_field(tmp_path: Path) -> None:
    plane = plane_for(tmp_path, AUTOSCALED)
    typo = {"name": "gpu", "instance_types": ["g5.2xlarge", "g5.4xlarg"], "zones": ["mars-1a"]}
    with pytest.raises(PoolProblems) as caught:
        plane.set_pools(_pools(typo), ADMIN)
    found = {tuple(loc): why for loc, why in caught.value.problems}
    assert set(found) == {("body", "pools", 0, "instance_types[1]"), ("body", "pools", 0, "zones")}
    assert "g5.4xlarge" in found["body", "pools", 0, "instance_types[1]"]  # did you mean
    assert "mars-1a" in found["body", "pools", 0, "zones"]
    assert plane.pools_in_force()[0] is None  # nothing stored
    with pytest.raises(ValidationError, match="budget nodes"):
        _pools({"name": "gpu", "disruption": {"budgets": [{"nodes": "ten"}]}})
    plane.close()


def test_a_cordoned_node_takes_no_new_work_and_stays_cordoned(tmp_path: Path) -> None:
    plane = plane_for(tmp_path)
    first, second = sorted(plane.backend.nodes)
    with pytest.raises(Forbidden):
        plane.node_action(first, "cordon", Principal(2, "team:team-a"))
    with pytest.raises(NotFound):
        plane.node_action("no-such-node", "cordon", ADMIN)
    assert plane.node_action(first, "cordon", ADMIN) is True
    submit(plane, "a1", "team-a")
    submit(plane, "b1", "team-b")
    plane.step()
    assert not next(n for n in plane.view.nodes if n.name == first).schedulable
    on = {n: r.assignment.placement[0][0][0] for n, r in plane.view.running.items()}
    assert list(on.values()) == [second]  # one fits on the other node; the other waits
    assert len(plane.view.pending) == 1
    plane.close()

    again = plane_for(tmp_path)  # a restart: still cordoned
    assert again.backend.nodes[first].unschedulable
    assert not again.backend.nodes[second].unschedulable
    assert again.node_action(first, "uncordon", ADMIN) is False
    again.step()
    assert len(again.view.running) == 2 and not again.view.pending
    actions = [a for a, _, _ in _audit(again) if a.startswith("node-")]
    assert actions == ["node-cordon", "node-uncordon"]
    with again.store.read("workloads-read") as conn:
        kinds = conn.execute(
            select(tables.events.c.kind, tables.events.c.details).where(
                tables.events.c.kind.in_(["cordon", "uncordon"])
            )
        ).all()
    assert [(k, d["node"]) for k, d in kinds] == [("cordon", first), ("uncordon", first)]
    again.close()


def test_a_drain_requeues_the_work_even_across_a_crash(tmp_path: Path) -> None:
    """A drain committed and acknowledged, the process killed before the loop applied it:
    after the restart the node is cordoned and its work requeued (then admitted elsewhere)."""
    plane = plane_for(tmp_path)
    submit(plane, "a1", "team-a", duration=3600)
    plane.step()
    node = plane.view.running["a1"].assignment.placement[0][0][0]
    assert plane.node_action(node, "drain", ADMIN) is True
    plane.lease.release()  # the loop never stepped again: as after kill -9
    plane.store.close()

    again = plane_for(tmp_path)
    assert again.backend.nodes[node].unschedulable
    assert "a1" in again.backend.pending
    again.step()
    other = again.view.running["a1"].assignment.placement[0][0][0]
    assert other != node
    with again.store.read("workloads-read") as conn:
        row = conn.execute(
            select(tables.workloads.c.preemptions).where(tables.workloads.c.name == "a1")
        ).one()
        reasons = conn.execute(
            select(tables.events.c.details).where(tables.events.c.kind == "preempt")
        ).scalars()
        assert [d["reason"] for d in reasons] == ["node-drained"]
    assert row.preemptions == 1
    again.close()


def test_a_drain_on_the_running_loop(tmp_path: Path) -> None:
    plane = plane_for(tmp_path)
    submit(plane, "a1", "team-a", duration=3600)
    plane.step()
    node = plane.view.running["a1"].assignment.placement[0][0][0]
    plane.node_action(node, "drain", ADMIN)
    plane.step()
    assert plane.view.running["a1"].assignment.placement[0][0][0] != node
    assert not next(n for n in plane.view.nodes if n.name == node).schedulable
    plane.close()


def test_pool_status_counts_its_nodes_against_its_limits() -> None:
    """Two nodes of gpu (4 and 8 GPUs, 16 and 32 cores) and one of another pool: gpu holds
    2 nodes, 12 GPUs and 48 cores against limits of 3 nodes and 16 GPUs; cpu-pool has none."""
    pools = _pools(
        {"name": "gpu", "limits": {"nodes": 3, "nvidia.com/gpu": 16}},
        {"name": "cpu-pool", "limits": {"cpu": "500m"}},
    )
    members = [
        ("gpu", {"nvidia.com/gpu": 4000, "cpu": 16000}),
        ("other", {"cpu": 8000}),
        ("gpu", {"nvidia.com/gpu": 8000, "cpu": 32000}),
    ]
    gpu, cpu = nodepools.status(pools, members)
    assert (gpu.nodes, gpu.used, gpu.limits) == (
        2,
        {"cpu": 48, "nodes": 2, "nvidia.com/gpu": 12},
        {"nodes": 3, "nvidia.com/gpu": 16},
    )
    assert (cpu.nodes, cpu.used, cpu.limits) == (0, {"nodes": 0}, {"cpu": 0.5})
