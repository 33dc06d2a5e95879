"""The autoscaler's step decides without changing the cloud: it asks for each launch as a
typed request, the effect layer launches it, and what came of it (instances, or a capacity
shortage) decides what the step asks next."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fleetshare.autoscaling.cloud import CloudTraits, Instance, LaunchRequest, Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.settings import AutoscalerSpec
from fleetshare.autoscaling.simulated_cloud import SimulatedCloud, SimulatedCloudConfig
from fleetshare.control.autoscaler import Autoscaler, Moment, Step
from fleetshare.control.autoscaler.cloud_calls import drive
from fleetshare.governance.admission import Engine
from fleetshare.model.catalog import load_catalog
from fleetshare.model.resources import parse_resources
from fleetshare.model.workload import PodSet, Workload
from fleetshare.policy.schema import load_policy

CATALOG = load_catalog()


class ReadOnly:
    """A cloud that answers questions and refuses to change anything."""

    def __init__(self, cloud: SimulatedCloud) -> None:
        self.cloud = cloud

    @property
    def traits(self) -> CloudTraits:
        return self.cloud.traits

    def offerings(self, instance_types: Iterable[str], now: float) -> list[Offering]:
        return self.cloud.offerings(instance_types, now)

    def instances(self, now: float) -> list[Instance]:
        return self.cloud.instances(now)

    def interruption_at(self, instance_id: str) -> float | None:
        return self.cloud.interruption_at(instance_id)

    def launch(self, request: LaunchRequest, now: float) -> list[Instance]:
        raise AssertionError(f"the decision launched {request}")

    def terminate(self, instance_ids: Sequence[str], now: float) -> None:
        raise AssertionError(f"the decision terminated {instance_ids}")


def one_step(ice_probability: float) -> tuple[Autoscaler, SimulatedCloud, Step]:
    """One step for one pending job: the autoscaler decides against a cloud it cannot change;
    the effect layer launches on the simulated cloud behind it."""
    cloud = SimulatedCloud(SimulatedCloudConfig(seed=1, ice_probability=ice_probability))
    pool = NodePool(name="cpu", families=["m5"])
    settings = AutoscalerSpec(batch_idle_seconds=0, batch_max_seconds=0)
    scaler = Autoscaler([pool], ReadOnly(cloud), CATALOG, settings)
    policy = load_policy({"teams": [{"name": "t", "quota": [{"resources": {"cpu": 64}}]}]})
    requests = parse_resources({"cpu": 2, "memory": "4Gi"})
    job = Workload("job", "t", (PodSet("main", 1, requests),))
    out = Step()
    drive(scaler.decide(Moment(0.0, {}, [job]), Engine(policy, CATALOG), {}, out), cloud, 0.0)
    return scaler, cloud, out


def test_the_decision_asks_for_a_node_and_the_effect_layer_launches_it() -> None:
    scaler, cloud, out = one_step(ice_probability=0.0)
    [(ready_at, node)] = out.joins
    [instance] = cloud.instances(0.0)
    assert scaler.nodes[node.name].instance == instance
    assert ready_at == scaler.nodes[node.name].ready_at > 0
    note = scaler.note("job")
    assert note is not None and note.kind == "launching" and note.nodes == (node.name,)


def test_a_capacity_shortage_makes_the_same_step_plan_another_offering() -> None:
    _, cloud, out = one_step(ice_probability=1.0)
    short = [
        (e["instance_type"], e["zone"], e["capacity_type"]) for e in out.log if e["action"] == "ice"
    ]
    assert len(short) == 3  # three plans in the step, each on an offering not yet short
    assert len(set(short)) == 3
    assert not out.joins and not cloud.instances(0.0)
    assert 180.0 in out.wake  # the cooldown's end: stuck work is planned again then
