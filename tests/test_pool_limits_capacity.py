"""A node pool's limits count each node's capacity, as Karpenter's NodePool ``spec.limits``
do: a user who writes ``limits: {cpu: 1000}`` gets the cut-off Karpenter would give."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool, counted
from fleetshare.autoscaling.provisioner import PodShape, plan_nodes
from fleetshare.model.catalog import load_catalog
from fleetshare.model.resources import parse_resources
from fleetshare.scenario.loader import load_scenario_data
from fleetshare.scenario.report import to_json
from fleetshare.scenario.runner import run_scenario
from fleetshare.service.nodepools import status

CATALOG = load_catalog()
C6I = CATALOG.get("c6i.xlarge")  # 4 vCPUs (3920m allocatable), 8 GiB (6584Mi allocatable)


def test_a_cpu_limit_of_1000_launches_the_nodes_whose_vcpus_it_holds() -> None:
    """Karpenter's NodePools page (``spec.limits``): "Karpenter supports limits of any resource
    type reported by your cloudprovider. It limits instance types when scheduling to those
    that will not exceed the specified limits." Its scheduler drops a type "if the instance
    capacity is greater than the remaining quantity for this resource" (``scheduler.go``
    ``filterByRemainingResources``, on ``it.Capacity``), and its NodePool counter sums each
    node's ``Capacity()``. So ``cpu: 1000`` on 4-vCPU nodes is 250 nodes (1000 vCPUs), not
    the 255 whose 3920m allocatable it would hold."""
    shape = PodShape(tuple(sorted(parse_resources({"cpu": 3, "memory": "1Gi"}).items())), 300)
    pool = NodePool(name="cpu", instance_types=["c6i.xlarge"], limits={"cpu": 1000})
    offering = Offering("c6i.xlarge", "z1", "on-demand", C6I.price_per_hour or 1.0)
    plan = plan_nodes([shape], [pool], CATALOG, [offering])
    assert [(launch.instance_type, launch.count) for launch in plan.launches] == [
        ("c6i.xlarge", 250)
    ]
    assert plan.unplaceable[0].startswith("50 of 300 pods not planned: node pool 'cpu' limit cpu")


def _job(name: str, at: float, duration: float) -> dict[str, Any]:
    return {"name": name, "team": "t", "at": at, "duration": duration,
            "requests": {"cpu": 3, "memory": "1Gi"}}  # fmt: skip


def test_the_nodes_a_pool_has_count_their_capacity_before_the_next_launch() -> None:
    """Two c6i.xlarge running under ``cpu: 11900m`` use 8 of it (their vCPUs, not their
    7840m allocatable): a third (4 more) would pass it, so the job that needs one waits,
    told which limit blocks it."""
    quota = [{"resources": {"cpu": 100, "memory": "400Gi"}}]
    data = {
        "name": "pool-cpu-limit",
        "cluster": {"nodes": []},
        "policy": {"teams": [{"name": "t", "quota": quota}]},
        "node_pools": [
            {"name": "cpu", "instance_types": ["c6i.xlarge"], "limits": {"cpu": "11900m"}}
        ],
        "cloud": {"seed": 1, "launch_latency_seconds": 90},
        "workloads": [_job("a", 0, 10_000), _job("b", 0, 10_000), _job("c", 1000, 100)],
        "until": 5000,
    }
    result = to_json(run_scenario(load_scenario_data(data, Path("."))))
    assert [node["instance_type"] for node in result["nodes"]] == ["c6i.xlarge"] * 2
    waiting = result["workloads"]["c"]
    assert waiting["state"] == "pending"
    assert waiting["pending_reason"].endswith(
        "the autoscaler cannot add nodes for it: 1 of 1 pods not planned: "
        "node pool 'cpu' limit cpu (11.9 cpu, 8 in use) blocks c6i.xlarge"
    )


def test_a_pool_shows_its_nodes_capacity_against_its_limits() -> None:
    """What a pool's nodes hold against its limits (``GET /api/v1/nodepools``, Karpenter's
    NodePool ``status.resources``): their capacity, 4 CPUs and 7577Mi (8 GiB less the VM's
    7.5 %) a c6i.xlarge; a node of a type the catalog does not know, its allocatable."""
    pool = NodePool(name="cpu", instance_types=["c6i.xlarge"], limits={"cpu": 8, "memory": "1Ti"})
    members = [
        ("cpu", counted(CATALOG, "c6i.xlarge", C6I.allocatable)),
        ("cpu", counted(CATALOG, "made-up.large", {"cpu": 1500})),
    ]
    [shown] = status([pool], members)
    assert shown.nodes == 2
    assert shown.used["cpu"] == 5.5
    assert shown.used["memory"] == 7577 * 2**20
    assert C6I.capacity["pods"] == C6I.allocatable["pods"]
