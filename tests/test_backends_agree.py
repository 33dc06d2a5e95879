"""The same scenario against the simulated cloud and against the EC2 adapter decides the same.

The control loop talks to any :class:`~fleetshare.autoscaling.cloud.CloudProvider`. Here one
run uses the simulated cloud directly; the other uses :class:`Ec2FleetProvider` over a real
boto3 client whose calls botocore's Stubber answers from an identical simulated cloud (see
``tests/aws_worlds.py``). Every decision -- admissions, preemptions, launches (type, zone,
capacity type, price), terminations and the bill -- must be the same; only instance ids differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetshare.autoscaling.aws import Ec2FleetProvider, HyperPodProvider
from fleetshare.autoscaling.simulated_cloud import SimulatedCloud
from fleetshare.scenario.loader import Scenario, load_scenario, load_scenario_data
from fleetshare.scenario.report import to_json
from fleetshare.scenario.runner import Runner
from tests.aws_worlds import Ec2World, HyperPodWorld

GPU = "nvidia.com/gpu"
BUNDLED = Path(__file__).resolve().parents[1] / "src" / "fleetshare" / "scenarios"


def spot_and_ice() -> Scenario:
    """Spot and on-demand offerings, an offering that runs out (ICE), a gang and scale down."""
    data: dict[str, Any] = {
        "name": "spot-and-ice",
        "cluster": {"nodes": []},
        "policy": {
            "cluster": {"idle_resource_sharing": True},
            "teams": [
                {"name": "vision", "quota": [{"resources": {GPU: 16}}]},
                {"name": "nlp", "quota": [{"resources": {GPU: 8}}]},
            ],
        },
        "node_pools": [
            {
                "name": "gpu",
                "families": ["g5", "g6"],
                "capacity_types": ["spot", "on-demand"],
                "disruption": {"consolidate_after_seconds": 120},
            }
        ],
        "cloud": {
            "seed": 3,
            "launch_latency_seconds": 75,
            "capacity_limits": [
                {"instance_type": t, "zone": z, "capacity_type": "spot", "max": 1}
                for t in ("g6.xlarge", "g6.2xlarge", "g6.12xlarge")
                for z in ("us-east-1a", "us-east-1b", "us-east-1c")
            ],
        },
        "workloads": [
            {
                "name": f"w{i}",
                "team": "vision" if i % 2 else "nlp",
                "at": 40 * i,
                "pods": 1 + i % 3,
                "duration": 900 + 60 * i,
                "requests": {GPU: 1 + i % 4, "cpu": 2, "memory": "8Gi"},
            }
            for i in range(10)
        ],
    }
    return load_scenario_data(data, Path("."))


HYPERPOD_GROUPS = {
    "train-p4d": ("ml.p4d.24xlarge", "us-east-1a"),
    "infer-g5": ("ml.g5.8xlarge", "us-east-1a"),
}


def hyperpod_groups() -> Scenario:
    """HyperPod instance groups: a training gang that needs two p4d nodes, inference on g5,
    one group short of capacity for a while, and scale down to the groups' minimums."""
    data: dict[str, Any] = {
        "name": "hyperpod-groups",
        "cluster": {"nodes": []},
        "policy": {
            "cluster": {"idle_resource_sharing": True},
            "teams": [
                {"name": "research", "quota": [{"instance_type": "ml.p4d.24xlarge", "count": 2}]},
                {"name": "product", "quota": [{"instance_type": "ml.g5.8xlarge", "count": 3}]},
            ],
        },
        "node_pools": [
            {
                "name": "hyperpod",
                "capacity_types": ["on-demand"],
                "instance_groups": [
                    {"name": "train-p4d", "instance_type": "ml.p4d.24xlarge", "max_count": 2},
                    {
                        "name": "infer-g5",
                        "instance_type": "ml.g5.8xlarge",
                        "min_count": 1,
                        "max_count": 3,
                    },
                ],
                "disruption": {"consolidate_after_seconds": 300},
            }
        ],
        "cloud": {
            "seed": 5,
            "zones": ["us-east-1a"],
            "launch_latency_seconds": 600,
            "capacity_limits": [{"instance_type": "g5.8xlarge", "zone": "us-east-1a", "max": 2}],
        },
        "workloads": [
            {
                "name": "pretrain",
                "team": "research",
                "at": 0,
                "pods": 2,
                "duration": 7200,
                "requests": {GPU: 8, "cpu": 90, "memory": "1000Gi"},
            },
            *(
                {
                    "name": f"serve-{i}",
                    "team": "product",
                    "at": 30 * i,
                    "duration": 3600,
                    "requests": {GPU: 1, "cpu": 16, "memory": "64Gi"},
                }
                for i in range(3)
            ),
        ],
    }
    return load_scenario_data(data, Path("."))


def scenarios() -> list[tuple[str, Scenario]]:
    return [
        (name, load_scenario(BUNDLED / f"{name}.yaml"))
        for name in ("autoscaling-quota-aware", "autoscaling-consolidation")
    ] + [
        ("spot-and-ice", spot_and_ice()),
    ]


def decisions(out: dict[str, Any]) -> dict[str, Any]:
    """The JSON output less the instance ids (EC2's are not the simulator's) and the
    providers' error texts (EC2's name its error code); what failed where stays."""
    for node in out.get("nodes", []):
        node.pop("instance_id", None)
    for event in out["events"]:
        if event["event"] == "autoscaler" and event.get("action") == "ice":
            event.pop("message")
    return out


@pytest.mark.parametrize(("name", "scenario"), scenarios(), ids=[n for n, _ in scenarios()])
def test_simulated_cloud_and_ec2_adapter_decide_the_same(name: str, scenario: Scenario) -> None:
    simulated = decisions(to_json(Runner(scenario).run()))

    backing = SimulatedCloud(scenario.spec.cloud.config(scenario.catalog))
    holder: dict[str, Runner] = {}
    world = Ec2World(backing, clock=lambda: holder["runner"].clock.now())
    provider = Ec2FleetProvider(
        world.client,
        "lt-0123456789abcdef0",
        "fleetshare-test",
        zones=list(backing.config.zones),
        traits=backing.traits,
    )
    runner = Runner(scenario, cloud=provider, billing=backing)
    holder["runner"] = runner
    through_ec2 = decisions(to_json(runner.run()))

    assert {"CreateFleet", "DescribeSpotPriceHistory", "DescribeInstances"} <= set(world.calls)
    assert through_ec2["nodes"], "nodes were launched"
    if name == "spot-and-ice":
        ice = [e for e in through_ec2["events"] if e.get("action") == "ice"]
        assert ice and {e["capacity_type"] for e in ice} == {"spot"}
        assert len({n["zone"] for n in through_ec2["nodes"]}) > 1  # moved on from the ICE
    assert through_ec2 == simulated
    world.stubber.assert_no_pending_responses()


def test_hyperpod_adapter_decides_as_the_simulated_cloud() -> None:
    scenario = hyperpod_groups()
    simulated = decisions(to_json(Runner(scenario).run()))

    backing = SimulatedCloud(scenario.spec.cloud.config(scenario.catalog))
    holder: dict[str, Runner] = {}
    world = HyperPodWorld(backing, lambda: holder["runner"].clock.now(), HYPERPOD_GROUPS)
    provider = HyperPodProvider(
        world.client,
        "fleetshare-test",
        {itype: group for group, (itype, _) in HYPERPOD_GROUPS.items()},
        zones={group: zone for group, (_, zone) in HYPERPOD_GROUPS.items()},
        traits=backing.traits,
    )
    runner = Runner(scenario, cloud=provider, billing=backing)
    holder["runner"] = runner
    through_hyperpod = decisions(to_json(runner.run()))

    assert {"BatchAddClusterNodes", "BatchDeleteClusterNodes"} <= set(world.calls)
    types = {n["instance_type"] for n in through_hyperpod["nodes"]}
    assert types == {"p4d.24xlarge", "g5.8xlarge"}
    assert through_hyperpod["workloads"]["pretrain"]["state"] == "finished"
    assert through_hyperpod == simulated
    world.stubber.assert_no_pending_responses()
