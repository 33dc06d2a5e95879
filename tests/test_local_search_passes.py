"""The local search's passes on hand-built packings: after an improving pass the next visits
only the nodes it changed (a node stepping down one type per pass costs one move a pass, not
one per node), and when those improve nothing a pass over every node still finds a move that
another node's change made possible."""

from __future__ import annotations

import pytest

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import PlanBudget, PodShape
from fleetshare.autoscaling.provisioner.budget import SafetyNet
from fleetshare.autoscaling.provisioner.local_search import improve
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem, build_problem
from fleetshare.autoscaling.provisioner.result import Plan
from fleetshare.model.catalog import Catalog, InstanceType
from tests.test_provisioner_swap import check, cost, node_type, packing, pods


def problem(types: list[InstanceType], shapes: list[PodShape]) -> Problem:
    catalog = Catalog(types)
    offers = [Offering(t.name, "z1", "on-demand", t.price_per_hour or 0) for t in catalog]
    p = build_problem(shapes, [NodePool(name="p")], catalog, offers, {}, None, (), Plan())
    assert p is not None
    return p


def names(p: Problem, pack: Packing) -> list[str]:
    return [p.candidates[j].instance.name for j in pack.cand[: pack.n]]


def test_later_passes_revisit_only_the_nodes_the_last_pass_changed() -> None:
    # one half-CPU pod on an xl node beside nine xl nodes full of one 8-CPU pod each; with one
    # target per move the node steps down a type per pass: xl -> l -> m -> s
    types = [
        node_type("xl", 8000, 8, 4.0),
        node_type("l", 4000, 4, 2.0),
        node_type("m", 2000, 2, 1.0),
        node_type("s", 1000, 1, 0.5),
    ]
    p = problem(types, [pods(500, 0.5, 1), pods(8000, 8, 9)])
    pack = packing(p, [("xl", "z1", {0: 1})] + [("xl", "z1", {1: 1})] * 9)
    before = pack.covered()
    tried = improve(p, pack, PlanBudget(search_targets=1), SafetyNet(600))
    assert names(p, pack) == ["s"] + ["xl"] * 9
    check(p, pack, before)
    # pass 1: all 10 nodes; passes 2-4: the stepping node alone (the last finds nothing);
    # pass 5: all 10 again, nothing: 23 moves (a full pass each time would be 40)
    assert tried == 10 + 1 + 1 + 1 + 10


def test_a_full_pass_follows_when_the_changed_nodes_improve_nothing() -> None:
    # A (mem, 0.5 $/h) holds a 2.9 GiB pod; B (cpu4, 1.0 $/h) three 0.9-CPU pods. Pass 1: A
    # cannot empty (B has 0.5 GiB free), then B moves to bal (3 CPUs, 6 GiB, 0.9 $/h). Pass 2
    # visits B alone: nothing. Only a pass over every node then empties A into B's new room.
    types = [
        node_type("cpu4", 4000, 2, 1.0),
        node_type("bal", 3000, 6, 0.9),
        node_type("mem", 1000, 4, 0.5),
    ]
    p = problem(types, [pods(100, 2.9, 1), pods(900, 0.5, 3)])
    pack = packing(p, [("mem", "z1", {0: 1}), ("cpu4", "z1", {1: 3})])
    before = pack.covered()
    improve(p, pack, PlanBudget(), SafetyNet(600))
    pack.compact()
    assert names(p, pack) == ["bal"]
    assert cost(p, pack) == pytest.approx(0.9)
    check(p, pack, before)
