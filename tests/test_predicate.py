"""May this pod run on this node: the one predicate, and its three users deciding alike."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.disruption import NodeView
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import Candidate, _labels_ok, launch_labels, pool_taints
from fleetshare.autoscaling.topology import PodShape
from fleetshare.model.catalog import load_catalog
from fleetshare.model.node import (
    INSTANCE_TYPE_LABEL,
    ZONE_LABEL,
    Node,
    NodeSelectorRequirement,
    Taint,
    Toleration,
)
from fleetshare.model.workload import PodSet
from fleetshare.placement.first_fit import Room, first_fit
from fleetshare.placement.fit import pod_may_run_on
from fleetshare.placement.predicate import may_run_on

CATALOG = load_catalog()
IT = INSTANCE_TYPE_LABEL


def req(key: str, op: Any, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key, op, values)


def test_instance_type_names_match_with_or_without_ml_prefix() -> None:
    labels = {IT: "g6.xlarge"}
    assert may_run_on(labels, (), {IT: "ml.g6.xlarge"})
    assert may_run_on({IT: "ml.g6.xlarge"}, (), {IT: "g6.xlarge"})
    assert not may_run_on(labels, (), {IT: "ml.g6.2xlarge"})
    assert may_run_on(labels, (), {}, (), [(req(IT, "In", "ml.g6.xlarge", "ml.g5.xlarge"),)])
    assert not may_run_on(labels, (), {}, (), [(req(IT, "NotIn", "ml.g6.xlarge"),)])
    # the prefix is special only for the instance-type label
    assert not may_run_on({"team": "vision"}, (), {"team": "ml.vision"})


def test_node_affinity_terms_are_ored_and_requirements_anded() -> None:
    labels = {ZONE_LABEL: "us-east-1a", "gpus": "8", "team": "vision"}
    a_zone = req(ZONE_LABEL, "In", "us-east-1b")
    big = req("gpus", "Gt", "4")
    assert may_run_on(labels, (), {}, (), [(a_zone,), (big,)])  # second term holds
    assert not may_run_on(labels, (), {}, (), [(a_zone, big)])  # one term, one fails
    assert may_run_on(labels, (), {}, (), [(req("team", "Exists"), req("spot", "DoesNotExist"))])
    assert not may_run_on(labels, (), {}, (), [(req("gpus", "Lt", "8"),)])
    assert not may_run_on(labels, (), {}, (), [(req("missing", "Gt", "1"),)])
    assert may_run_on(labels, (), {}, (), [])  # no terms: no constraint


def test_taints_need_tolerations_except_prefer_no_schedule() -> None:
    gpu = Taint("nvidia.com/gpu", "true", "NoSchedule")
    soft = Taint("spot", "true", "PreferNoSchedule")
    assert not may_run_on({}, [gpu], {})
    assert may_run_on({}, [gpu], {}, [Toleration("nvidia.com/gpu", "Exists")])
    assert may_run_on({}, [soft], {})
    assert not may_run_on({}, [Taint("x", "1", "NoExecute")], {}, [Toleration("x", value="2")])


POOLS = [
    NodePool(name="plain", families=["g6", "g5"]),
    NodePool(
        name="tainted",
        families=["g6"],
        labels={"team": "vision"},
        taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
    ),
]
TYPES = ["g6.xlarge", "g6.2xlarge", "g5.xlarge"]
selector_values = {
    IT: ["g6.xlarge", "ml.g6.xlarge", "ml.g5.xlarge", "g6.2xlarge"],
    ZONE_LABEL: ["us-east-1a", "us-east-1b"],
    "team": ["vision", "nlp"],
    "karpenter.sh/capacity-type": ["spot", "on-demand"],
}


@st.composite
def pods(draw: st.DrawFn) -> tuple[dict[str, str], tuple[Toleration, ...], tuple[Any, ...]]:
    keys = draw(st.lists(st.sampled_from(sorted(selector_values)), unique=True, max_size=2))
    selector = {k: draw(st.sampled_from(selector_values[k])) for k in keys}
    tolerations = draw(
        st.sampled_from([(), (Toleration("nvidia.com/gpu", "Exists"),), (Toleration(),)])
    )
    terms = []
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(sorted(selector_values)))
        op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
        values = (
            tuple(draw(st.lists(st.sampled_from(selector_values[key]), min_size=1, max_size=2)))
            if op in ("In", "NotIn")
            else ()
        )
        terms.append((NodeSelectorRequirement(key, op, values),))
    return selector, tolerations, tuple(terms)


@settings(max_examples=300, deadline=None)
@given(
    pod=pods(),
    pool_i=st.integers(0, len(POOLS) - 1),
    type_i=st.integers(0, len(TYPES) - 1),
    zone=st.sampled_from(["us-east-1a", "us-east-1b"]),
    capacity=st.sampled_from(["spot", "on-demand"]),
)
def test_governance_provisioner_and_disruption_decide_alike(
    pod: tuple[dict[str, str], tuple[Toleration, ...], tuple[Any, ...]],
    pool_i: int,
    type_i: int,
    zone: str,
    capacity: Any,
) -> None:
    """A pod the provisioner buys a node for can be placed there by governance, and
    disruption can move it there: the three ask the same predicate of the same labels."""
    selector, tolerations, affinity = pod
    pool, inst = POOLS[pool_i], CATALOG.get(TYPES[type_i])
    if not pool.allows(inst):
        return
    requests = {"cpu": 1000}
    # the provisioner, about a node it could buy
    shape = PodShape(
        requests=tuple(requests.items()),
        count=1,
        node_selector=tuple(sorted(selector.items())),
        tolerations=tolerations,
        affinity=affinity,
    )
    offering = Offering(inst.name, zone, capacity, 1.0)
    provisioner = _labels_ok(shape, Candidate(pool.name, inst, offering), pool)
    # governance, about the node once it joined
    node = Node(
        name="n",
        allocatable=dict(inst.allocatable),
        instance_type=inst.name,
        zone=zone,
        labels=launch_labels(pool, inst, zone, capacity),
        taints=pool_taints(pool),
        capacity_type=capacity,
    )
    podset = PodSet("main", 1, requests, selector, tolerations, affinity)
    governance = pod_may_run_on(podset, node)
    # disruption, moving the pod onto the node
    view = NodeView(
        name="n",
        pool=pool.name,
        instance_type=inst.name,
        zone=zone,
        capacity_type=capacity,
        price_per_hour=1.0,
        allocatable=dict(inst.allocatable),
        labels=node.labels,
        taints=node.taints,
    )
    room = Room(view.name, view.all_labels(), view.taints, dict(view.allocatable))
    disruption = bool(first_fit([room], requests, 1, selector, tolerations, affinity))
    assert provisioner == governance == disruption


def test_first_fit_fills_rooms_in_order_and_skips_those_that_refuse() -> None:
    rooms = [
        Room("tainted", {}, (Taint("gpu", "1"),), {"cpu": 8000}),
        Room("small", {}, (), {"cpu": 1500}),
        Room("big", {}, (), {"cpu": 4000}),
    ]
    placed = first_fit(rooms, {"cpu": 1000}, 5, {})
    assert [(r.name, n) for r, n in placed] == [("small", 1), ("big", 4)]
    assert rooms[1].free["cpu"] == 500 and rooms[2].free["cpu"] == 0
    assert rooms[0].free["cpu"] == 8000
