"""The local search's swap on a hand-built pair of nodes: a pod that fits on no other node
takes the place of a smaller one, which moves to the node being made cheaper. The swap makes
the plan cheaper, and keeps zones, per-node caps (anti-affinity) and gangs on one host."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import PlanBudget, PodShape
from fleetshare.autoscaling.provisioner.budget import SafetyNet
from fleetshare.autoscaling.provisioner.local_search import (
    _swap,
    evictions,
    evictions_plain,
    improve,
)
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem, build_problem
from fleetshare.autoscaling.provisioner.result import Plan
from fleetshare.model.catalog import Catalog, InstanceType
from fleetshare.model.node import HOSTNAME_LABEL, ZONE_LABEL
from tests.catalog_helpers import cpu_type

GI = 2**30 * 1000  # memory in milli-bytes


def node_type(name: str, cpu: int, mem_gi: int, price: float) -> InstanceType:
    allocatable = {"cpu": cpu, "memory": mem_gi * GI, "pods": 110_000}
    return cpu_type(
        name, vcpu=cpu // 1000, memory_mib=mem_gi * 1024, allocatable=allocatable, price=price
    )


# large: 4 CPUs, 8 GiB for 1.0 $/h; small: 2.5 CPUs, 1 GiB for 0.6 $/h (neither dominates)
CATALOG = Catalog([node_type("large", 4000, 8, 1.0), node_type("small", 2500, 1, 0.6)])
OFFERS = [
    Offering(t.name, z, "on-demand", t.price_per_hour or 0) for t in CATALOG for z in ("z1", "z2")
]


def pods(cpu: int, mem: float, count: int, **kw: object) -> PodShape:
    return PodShape((("cpu", cpu), ("memory", int(mem * GI))), count, **kw)  # type: ignore[arg-type]


def problem(shapes: list[PodShape]) -> Problem:
    p = build_problem(shapes, [NodePool(name="p")], CATALOG, OFFERS, {}, None, (), Plan())
    assert p is not None
    return p


def packing(p: Problem, nodes: Sequence[tuple[str, str, Mapping[int, int]]]) -> Packing:
    """Nodes as (instance type, zone, {shape: planned units})."""
    pack = Packing(p)
    for name, zone, content in nodes:
        j = next(
            j
            for j, c in enumerate(p.candidates)
            if c.instance.name == name and c.offering.zone == zone
        )
        rows = pack.open(j, 1)
        for s, units in content.items():
            c = next(c for c, its in enumerate(p.class_items) if p.items[its[0]].shape == s)
            pack.add(rows, c, np.array([units]))
    return pack


def cost(p: Problem, pack: Packing) -> float:
    return float(p.obj[pack.cand[: pack.n]].sum())


def check(p: Problem, pack: Packing, before: np.ndarray) -> None:
    """Every node within its type's capacity, per-node caps and allowed candidates kept,
    every pod still planned."""
    cand, counts = pack.cand[: pack.n], pack.counts[: pack.n]
    assert (counts @ p.size <= p.cap[cand]).all()
    assert (counts <= p.upper[None, :]).all()
    assert all(p.allowed[c, cand[n]] for n, c in zip(*np.nonzero(counts), strict=True))
    assert (pack.covered() == before).all()


def search(p: Problem, pack: Packing, swaps: int = 1_000_000) -> None:
    improve(p, pack, PlanBudget(search_swap_work=swaps), SafetyNet(600))


# x: 1.5 CPUs; y: 1 CPU; z: 2.5 CPUs and 3 GiB (only "large" holds it). Node A (large):
# two x (3 CPUs). Node B (large): y and z (3.5 CPUs). A fits "small" without one x, which fits
# nowhere (B has 0.5 CPU free) unless y makes way and moves to A: A = x + y on "small",
# B = x + z (4 CPUs): 1.6 $/h instead of 2.0. Without swaps nothing moves.
X, Y, Z = pods(1500, 0.1, 2), pods(1000, 0.1, 1), pods(2500, 3, 1)


def test_a_swap_makes_the_pair_cheaper_and_every_node_still_fits() -> None:
    p = problem([X, Y, Z])
    nodes = [("large", "z1", {0: 2}), ("large", "z1", {1: 1, 2: 1})]
    plain = packing(p, nodes)
    search(p, plain, swaps=0)
    assert cost(p, plain) == pytest.approx(2.0)
    pack = packing(p, nodes)
    before = pack.covered()
    search(p, pack)
    assert cost(p, pack) == pytest.approx(1.6)
    check(p, pack, before)
    names = sorted(p.candidates[j].instance.name for j in pack.cand[: pack.n])
    assert names == ["large", "small"]


def test_a_pod_pinned_to_another_zone_is_not_swapped_onto_the_node() -> None:
    # x in z1 and y in z2: x still may not leave A, nor y join it
    x_z1 = PodShape(X.requests, 2, node_selector=((ZONE_LABEL, "z1"),))
    y_z2 = PodShape(Y.requests, 1, node_selector=((ZONE_LABEL, "z2"),))
    p = problem([x_z1, y_z2, Z])
    pack = packing(p, [("large", "z1", {0: 2}), ("large", "z2", {1: 1, 2: 1})])
    before = pack.covered()
    search(p, pack)
    assert cost(p, pack) == pytest.approx(2.0)  # y may not go to z1: no swap
    check(p, pack, before)


def test_a_swap_keeps_one_pod_per_node_of_an_anti_affinity_deployment() -> None:
    # A (to become "small", 3.5 CPUs) holds x and y, y one per node; B holds y, w and z. For
    # an x to join B, y or w (1 CPU each) must make way onto A: only w may, A has its y
    y_one = pods(1000, 0.1, 2, max_per_node=1)
    w = pods(1000, 0.2, 1)
    z = pods(1500, 3, 1)
    catalog = Catalog([node_type("large", 4000, 8, 1.0), node_type("small", 3500, 1, 0.6)])
    offers = [Offering(t.name, "z1", "on-demand", t.price_per_hour or 0) for t in catalog]
    p = build_problem(
        [y_one, w, pods(1500, 0.1, 1), z],
        [NodePool(name="p")],
        catalog,
        offers,
        {},
        None,
        (),
        Plan(),
    )
    assert p is not None
    pack = packing(p, [("large", "z1", {2: 1, 0: 1}), ("large", "z1", {0: 1, 1: 1, 3: 1})])
    cls = {s: c for c, its in enumerate(p.class_items) for s in [p.items[its[0]].shape]}
    assert cls[0] < cls[1]  # y comes first in class order: only its cap turns it away
    small = next(j for j, c in enumerate(p.candidates) if c.instance.name == "small")
    got = _swap(p, pack, 0, small, cls[2], np.array([False, True]))
    assert got == [(1, cls[1], -1), (0, cls[1], 1), (1, cls[2], 1)]


def test_a_gang_on_one_host_moves_whole() -> None:
    # y is a gang of two 0.5-CPU pods that must share a host: it swaps as one unit
    gang = pods(500, 0.05, 2, gang="g", domain=HOSTNAME_LABEL)
    p = problem([X, gang, Z])
    assert p.unit[1] == 2  # the gang is one bundle of two pods
    pack = packing(p, [("large", "z1", {0: 2}), ("large", "z1", {1: 1, 2: 1})])
    before = pack.covered()
    search(p, pack)
    assert cost(p, pack) == pytest.approx(1.6)
    check(p, pack, before)
    g = next(c for c, its in enumerate(p.class_items) if p.items[its[0]].shape == 1)
    assert (pack.counts[: pack.n, g] > 0).sum() == 1  # the bundle is on one node


@st.composite
def _eviction_cases(
    draw: st.DrawFn,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A node's classes (sizes per resource, some zero; pods of each), a deficit per resource
    (some already cleared) and an order to evict in."""
    classes = draw(st.integers(1, 7))
    resources = draw(st.integers(1, 3))
    sizes = draw(
        st.lists(
            st.lists(st.integers(0, 6), min_size=resources, max_size=resources),
            min_size=classes,
            max_size=classes,
        )
    )
    counts = draw(st.lists(st.integers(1, 5), min_size=classes, max_size=classes))
    deficit = draw(st.lists(st.integers(-5, 30), min_size=resources, max_size=resources))
    order = draw(st.permutations(range(classes)))
    return (
        np.array(deficit, np.int64),
        np.array(sizes, np.int64),
        np.array(counts, np.int64),
        np.array(order, np.int64),
    )


@settings(max_examples=400, deadline=None)
@given(_eviction_cases())
def test_array_evictions_choose_the_same_pods_as_the_plain_loop(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """The local search's eviction choice in arrays is the plain per-class loop's, pod for
    pod, and what it evicts clears the deficit (or it says nothing can)."""
    deficit, sizes, counts, order = case
    fast = evictions(deficit, sizes, counts, order)
    assert fast == evictions_plain(deficit, sizes, counts, order)
    if fast is not None:
        cleared = sum((k * sizes[i] for i, k in fast), np.zeros_like(deficit))
        assert (cleared >= deficit).all()
        assert all(0 < k <= counts[i] for i, k in fast)
