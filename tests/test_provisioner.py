"""The provisioner picks the cheapest nodes that fit, within pool rules and limits."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import PodShape, plan_nodes
from fleetshare.cli import app
from fleetshare.model.catalog import Catalog, load_catalog
from fleetshare.model.node import Toleration
from fleetshare.model.resources import parse_resources
from tests.catalog_helpers import cpu_type

CATALOG = load_catalog()
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def shape(count: int, **requests: str | int) -> PodShape:
    """``shape(2, cpu=4, gpu=1)``: ``gpu`` stands for nvidia.com/gpu."""
    spec = {("nvidia.com/gpu" if k == "gpu" else k): v for k, v in requests.items()}
    return PodShape(tuple(sorted(parse_resources(spec).items())), count)


def offerings(*names: str, zone: str = "z1") -> list[Offering]:
    out = []
    for inst in CATALOG:
        if inst.price_per_hour is not None and (not names or inst.family in names):
            out.append(Offering(inst.name, zone, "on-demand", inst.price_per_hour))
    return out


def test_every_pod_is_covered_and_the_plan_is_near_the_lower_bound() -> None:
    pools = [NodePool(name="cpu", families=["m6i", "c6i"])]
    shapes = [shape(40, cpu=3, memory="12Gi"), shape(5, cpu=15, memory="30Gi")]
    plan = plan_nodes(shapes, pools, CATALOG, offerings("m6i", "c6i"))
    assert plan.bound_is_proven
    assert plan.lower_bound <= plan.hourly_cost
    # never worse than the simple plan: each shape alone on its cheapest-per-pod type
    naive = 0.0
    for s in shapes:
        req = dict(s.requests)
        naive += min(
            inst.price_per_hour * -(-s.count // per_node)
            for inst in CATALOG
            if inst.family in ("m6i", "c6i") and inst.price_per_hour
            for per_node in [min(inst.allocatable.get(r, 0) // v for r, v in req.items())]
            if per_node > 0
        )
    assert plan.hourly_cost <= naive + 1e-9
    capacity = sum(
        CATALOG.get(launch.instance_type).allocatable["cpu"] * launch.count
        for launch in plan.launches
    )
    assert capacity >= (40 * 3 + 5 * 15) * 1000


def test_cheapest_gpu_instance_is_chosen_and_fallback_can_be_forbidden() -> None:
    gpu_pod = shape(1, cpu=4, memory="16Gi", gpu=1)
    # only 4-GPU instances are offered in the g5 family besides 1-GPU ones: allow both
    pools = [NodePool(name="gpu", instance_types=["g5.2xlarge", "g5.12xlarge"])]
    plan = plan_nodes([gpu_pod], pools, CATALOG, offerings("g5"))
    assert [(la.instance_type, la.count) for la in plan.launches] == [("g5.2xlarge", 1)]
    # with the 1-GPU offering gone, fallback to the 4-GPU type is allowed by default...
    only_big = [o for o in offerings("g5") if o.instance_type == "g5.12xlarge"]
    plan = plan_nodes([gpu_pod], pools, CATALOG, only_big)
    assert [la.instance_type for la in plan.launches] == ["g5.12xlarge"]
    # ...and forbidden when the pool says so, unless it is the smallest that fits
    strict = [NodePool(name="gpu", instance_types=["g5.12xlarge"], allow_gpu_fallback=False)]
    plan = plan_nodes([gpu_pod], strict, CATALOG, only_big)
    assert [la.instance_type for la in plan.launches] == ["g5.12xlarge"]


def test_pool_limits_are_never_exceeded() -> None:
    pools = [NodePool(name="cpu", families=["m6i"], limits={"nodes": 3})]
    plan = plan_nodes([shape(100, cpu=1, memory="2Gi")], pools, CATALOG, offerings("m6i"))
    assert sum(la.count for la in plan.launches) <= 3


def test_taints_and_selectors_are_respected() -> None:
    pools = [
        NodePool(name="gpu", families=["g5"], taints=[{"key": "gpu", "effect": "NoSchedule"}]),
        NodePool(name="cpu", families=["m6i"]),
    ]
    plain = shape(2, cpu=1, memory="1Gi")
    plan = plan_nodes([plain], pools, CATALOG, offerings("g5", "m6i"))
    assert {la.pool for la in plan.launches} == {"cpu"}
    tolerant = PodShape(
        plain.requests,
        2,
        node_selector=(("node.kubernetes.io/instance-type", "g5.xlarge"),),
        tolerations=(Toleration("gpu", "Exists"),),
    )
    plan = plan_nodes([tolerant], pools, CATALOG, offerings("g5", "m6i"))
    assert {(la.pool, la.instance_type) for la in plan.launches} == {("gpu", "g5.xlarge")}


def test_pods_no_pool_can_run_are_reported_not_planned() -> None:
    pools = [NodePool(name="cpu", families=["m6i"])]
    plan = plan_nodes([shape(1, cpu=10_000)], pools, CATALOG, offerings("m6i"))
    assert plan.launches == []
    assert "large enough" in plan.unplaceable[0]


def test_plan_command_json() -> None:
    result = CliRunner().invoke(
        app,
        [
            "plan",
            "--pools",
            str(EXAMPLES / "pools.yaml"),
            "--pending",
            str(EXAMPLES / "pending.yaml"),
            "--json",
        ],
    )
    # the example's too-big job cannot be placed: the plan is printed and the exit code says so
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert data["hourly_cost"] >= data["lower_bound"] > 0
    assert {la["instance_type"] for la in data["launches"]} >= {"p4d.24xlarge"}
    assert data["unplaceable"][0]["workloads"] == ["too-big"]


def test_plan_command_exits_zero_only_when_every_pod_is_placed(tmp_path: Path) -> None:
    pending = tmp_path / "pending.yaml"
    pending.write_text(
        "workloads: [{name: w, team: t, pods: 2, requests: {cpu: 2, memory: 4Gi}}]\n"
    )
    pools = tmp_path / "pools.yaml"
    pools.write_text("pools: [{name: cpu, families: [m6i]}]\n")
    args = ["plan", "--pools", str(pools), "--pending", str(pending)]
    ok = CliRunner().invoke(app, args)
    assert ok.exit_code == 0, ok.output
    assert "cannot place" not in ok.output
    pending.write_text("workloads: [{name: w, team: t, requests: {cpu: 10000}}]\n")
    bad = CliRunner().invoke(app, args)
    assert bad.exit_code == 1, bad.output
    assert "cannot place" in bad.output
    # nothing to buy: no "bound 0.0000" next to a cost
    assert "lower bound 0.0000" not in bad.output or "total 0.0000" in bad.output


def test_the_pods_per_node_limit_is_respected() -> None:
    # m6i.large holds 29 pods; 60 tiny pods need three of them even though cpu would allow one
    pools = [NodePool(name="cpu", instance_types=["m6i.large"])]
    plan = plan_nodes([shape(60, cpu="10m", memory="16Mi")], pools, CATALOG, offerings("m6i"))
    assert [(la.instance_type, la.count) for la in plan.launches] == [("m6i.large", 3)]
    assert all(sum(k for _, k in node.pods) <= 29 for node in plan.nodes)


def test_every_planned_node_lists_its_pods() -> None:
    pools = [NodePool(name="cpu", families=["m6i", "c6i"])]
    shapes = [shape(40, cpu=3, memory="12Gi"), shape(5, cpu=15, memory="30Gi")]
    plan = plan_nodes(shapes, pools, CATALOG, offerings("m6i", "c6i"))
    assert sum(la.count for la in plan.launches) == len(plan.nodes)
    for s, sh in enumerate(shapes):
        assert sum(dict(node.pods).get(s, 0) for node in plan.nodes) == sh.count
    for node in plan.nodes:
        alloc = CATALOG.get(node.instance_type).allocatable
        for resource in ("cpu", "memory"):
            assert (
                sum(dict(shapes[s].requests)[resource] * k for s, k in node.pods) <= alloc[resource]
            )


def fake_types(count: int) -> Catalog:
    """Karpenter's fake instance types: i+1 vCPU, 2(i+1) GiB, 10(i+1) pods, linear prices."""
    return Catalog(
        cpu_type(
            f"fake-{i}",
            family="fake",
            vcpu=i + 1,
            memory_mib=2048 * (i + 1),
            allocatable={
                "cpu": 1000 * (i + 1) - 100,
                "memory": (2 * (i + 1) * 2**30 - 10 * 2**20) * 1000,
                "pods": 10_000 * (i + 1),
            },
            price=0.3 * (i + 1),
        )
        for i in range(count)
    )


def test_a_mixed_batch_is_planned_within_the_time_limit_and_near_the_bound() -> None:
    catalog = fake_types(100)
    offers = [
        Offering(t.name, z, "on-demand", t.price_per_hour or 0) for t in catalog for z in "abc"
    ]
    shapes = []
    for k in range(60):  # 60 deployments, 1,800 pods, a fifth each of every constraint
        cpu, mem = (100, 250, 500, 1000, 1500)[k % 5], (256, 512, 1024, 2048)[k % 4]
        requests = (("cpu", cpu), ("memory", mem * 2**20 * 1000))
        kind = k % 5
        shapes.append(
            PodShape(
                requests,
                30,
                zone_spread=kind == 1,
                max_per_node=1 if kind in (2, 3) else None,
                same_zone=kind == 4,
            )
        )
    pools = [NodePool(name="fake", families=["fake"])]
    plan = plan_nodes(shapes, pools, catalog, offers, time_limit=3)
    assert not plan.unplaceable
    assert plan.bound_is_proven and plan.gap <= 0.03


def test_gpu_shares_are_planned_one_gpu_at_a_time_not_by_node_totals() -> None:
    # six pods of 0.6 GPU need six GPUs (no GPU holds two): one 4-GPU node is not enough,
    # though 3.6 < 4 in total
    only_4_gpu = [Offering("g5.12xlarge", "z1", "on-demand", 5.672)]
    plan = plan_nodes(
        [shape(6, cpu=1, memory="2Gi", gpu="600m")],
        [NodePool(name="gpu", families=["g5"])],
        CATALOG,
        only_4_gpu,
    )
    assert [(launch.instance_type, launch.count) for launch in plan.launches] == [
        ("g5.12xlarge", 2)
    ]
    # a third of a GPU: three per GPU, so twelve pods fit one 4-GPU node and thirteen do not
    for pods, nodes in ((12, 1), (13, 2)):
        plan = plan_nodes(
            [shape(pods, cpu=1, memory="2Gi", gpu="300m")],
            [NodePool(name="gpu", families=["g5"])],
            CATALOG,
            only_4_gpu,
        )
        assert sum(launch.count for launch in plan.launches) == nodes
