"""The local search's rebalance on hand-built packings: one node with room only in CPU and
one with room only in memory exchange pods so that a third node's pod, which fits neither
before (and no swap helps), fits after and the third node goes; the exchanges keep zones,
per-node caps and host bundles."""

from __future__ import annotations

import numpy as np
import pytest

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import PlanBudget, PodShape
from fleetshare.autoscaling.provisioner.budget import SafetyNet
from fleetshare.autoscaling.provisioner.local_search import balance, improve
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem, build_problem
from fleetshare.autoscaling.provisioner.result import Plan
from fleetshare.model.catalog import Catalog
from fleetshare.model.node import HOSTNAME_LABEL, ZONE_LABEL
from tests.test_provisioner_swap import check, cost, node_type, packing, pods

# big: 4 CPUs, 8 GiB for 1.0 $/h; tiny: 1 CPU, 2 GiB for 0.3 $/h
CATALOG = Catalog([node_type("big", 4000, 8, 1.0), node_type("tiny", 1000, 2, 0.3)])
OFFERS = [
    Offering(t.name, z, "on-demand", t.price_per_hour or 0) for t in CATALOG for z in ("z1", "z2")
]
MEM_HEAVY = pods(250, 2, 4)  # A: four of them, memory full, 3 CPUs free
CPU_HEAVY = pods(1000, 0.5, 4)  # B: four of them, CPU full, 6 GiB free
SMALL = pods(500, 1, 1)  # C (tiny): needs CPU and memory on the same node


def problem(shapes: list[PodShape]) -> Problem:
    p = build_problem(shapes, [NodePool(name="p")], CATALOG, OFFERS, {}, None, (), Plan())
    assert p is not None
    return p


def three_nodes(p: Problem, zone_b: str = "z1") -> Packing:
    return packing(
        p,
        [("big", "z1", {0: 4}), ("big", zone_b, {1: 4}), ("tiny", "z1", {2: 1})],
    )


def test_the_rebalance_lets_a_third_node_go() -> None:
    p = problem([MEM_HEAVY, CPU_HEAVY, SMALL])
    plain = three_nodes(p)
    improve(p, plain, PlanBudget(search_rebalances=0), SafetyNet(600))
    assert cost(p, plain) == pytest.approx(2.3)  # neither a move nor a swap empties C
    pack = three_nodes(p)
    before = pack.covered()
    improve(p, pack, PlanBudget(), SafetyNet(600))
    pack.compact()
    assert cost(p, pack) == pytest.approx(2.0)  # one exchange, then C's pod joins A
    check(p, pack, before)


def test_the_exchange_keeps_pods_in_their_zones() -> None:
    # B in z2 and every pod pinned to its own node's zone: nothing may cross
    mem_z1 = PodShape(MEM_HEAVY.requests, 4, node_selector=((ZONE_LABEL, "z1"),))
    cpu_z2 = PodShape(CPU_HEAVY.requests, 4, node_selector=((ZONE_LABEL, "z2"),))
    p = problem([mem_z1, cpu_z2, SMALL])
    pack = three_nodes(p, zone_b="z2")
    before = pack.counts[: pack.n].copy()
    assert balance(p, pack, 100, np.zeros(pack.n, bool)) == 0
    assert (pack.counts[: pack.n] == before).all()


def test_the_exchange_keeps_per_node_caps() -> None:
    # A holds one of a one-per-node deployment, B another: the exchange that helps moves a
    # plain CPU-heavy pod to A, never a second one-per-node pod to either
    cpu_one = pods(1000, 0.5, 2, max_per_node=1)
    p = problem([MEM_HEAVY, cpu_one, pods(1000, 0.5, 3)])
    pack = packing(p, [("big", "z1", {0: 3, 1: 1}), ("big", "z1", {1: 1, 2: 3})])
    before = pack.covered()
    assert balance(p, pack, 100, np.zeros(pack.n, bool)) >= 1
    check(p, pack, before)  # per-node caps included
    one = next(c for c, its in enumerate(p.class_items) if p.items[its[0]].shape == 1)
    assert (pack.counts[: pack.n, one] == 1).all()


def test_a_host_bundle_is_exchanged_whole() -> None:
    # two gangs of two memory-heavy pods that share a host: each moves as one unit
    g1 = pods(250, 2, 2, gang="g1", domain=HOSTNAME_LABEL)
    g2 = pods(250, 1.9, 2, gang="g2", domain=HOSTNAME_LABEL)  # its own class
    p = problem([g1, g2, CPU_HEAVY, SMALL])
    assert p.unit[0] == p.unit[1] == 2
    pack = packing(p, [("big", "z1", {0: 1, 1: 1}), ("big", "z1", {2: 4}), ("tiny", "z1", {3: 1})])
    before = pack.covered()
    assert balance(p, pack, 100, np.zeros(pack.n, bool)) >= 1
    check(p, pack, before)
    for shape in (0, 1):
        g = next(c for c, its in enumerate(p.class_items) if p.items[its[0]].shape == shape)
        assert pack.counts[: pack.n, g].tolist().count(1) == 1  # whole, on one node
