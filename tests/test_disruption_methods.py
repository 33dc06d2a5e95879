"""The disruption methods behind one protocol: every method honours budgets, PDBs and
do-not-disrupt from configuration; repair pauses by one rule; decide walks METHODS in order."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.disruption import (
    METHODS,
    REPAIR,
    DoNotDisrupt,
    Method,
    NodeView,
    Pdb,
    PodView,
    State,
    decide,
    repair_paused,
    validate,
)
from fleetshare.autoscaling.nodepool import Budget, Disruption, NodePool
from fleetshare.autoscaling.settings import (
    AutoscalerSpec,
    DisruptionSettingsSpec,
    DoNotDisruptSpec,
    PdbSpec,
)
from fleetshare.model.catalog import load_catalog
from fleetshare.model.resources import parse_resources

CATALOG = load_catalog()
ZONE = "us-east-1a"
NOW = 100_000.0
TYPES = ["g5.xlarge", "g5.2xlarge", "g5.12xlarge", "m5.large", "m5.xlarge", "m5.2xlarge"]


def offerings() -> list[Offering]:
    out = []
    for name in TYPES:
        price = CATALOG.get(name).price_per_hour
        assert price is not None
        out.append(Offering(name, ZONE, "on-demand", price))
    return out


def node(name: str, itype: str = "g5.xlarge", **kw: Any) -> NodeView:
    inst = CATALOG.get(itype)
    assert inst.price_per_hour is not None
    kw.setdefault("launched_at", NOW - 100)
    return NodeView(
        name, "p", itype, ZONE, "on-demand", inst.price_per_hour, inst.allocatable, **kw
    )


def pod(name: str, on: str, *, cpu: str = "1", gpu: int = 0) -> PodView:
    spec: dict[str, str | int] = {"cpu": cpu, "memory": "2Gi", "nvidia.com/gpu": gpu}
    return PodView(
        name=name,
        workload=name,
        team="t",
        node=on,
        requests=parse_resources(spec),
        labels={"app": "web"},
    )


def sick(name: str) -> NodeView:
    return node(name, ready=False, healthy=False, unhealthy_since=NOW - 600)


def cluster(method: str) -> tuple[list[NodeView], list[PodView]]:
    """A cluster where exactly ``method`` has something to do (to node "target")."""
    if method == "repair":
        return [sick("target"), node("ok")], [pod("w-0", "target", gpu=1)]
    if method == "emptiness":
        return [node("target")], []
    if method == "expiration":
        return [node("target", launched_at=NOW - 4000)], [pod("w-0", "target", gpu=1)]
    if method == "drift":
        return [node("target", drifted=True)], [pod("w-0", "target", gpu=1)]
    if method == "multi-node-consolidation":
        nodes = [node(n, "m5.xlarge") for n in ("target", "n1", "n2")]
        return nodes, [pod(f"w-{i}", n.name) for i, n in enumerate(nodes)]
    assert method == "single-node-consolidation"
    return [node("target", "g5.12xlarge")], [pod("w-0", "target", gpu=1)]


def state(
    method: str,
    *,
    budget: str = "100%",
    pdbs: list[Pdb] | None = None,
    pinned: DoNotDisrupt | None = None,
) -> State:
    expire = 3600.0 if method == "expiration" else None
    spec = Disruption(budgets=[Budget(nodes=budget)], expire_after_seconds=expire)
    nodes, pods = cluster(method)
    pools = [NodePool(name="p", instance_types=TYPES, disruption=spec)]
    return State(
        nodes,
        pods,
        pools,
        NOW,
        pdbs=pdbs or (),
        do_not_disrupt=pinned,
        catalog=CATALOG,
        offerings=offerings(),
    )


def by_name(name: str) -> Method:
    return next(m for m in METHODS if m.name == name)


NAMES = [m.name for m in METHODS]
NO_ROOM = PdbSpec(name="web", selector={"app": "web"}, max_unavailable=0)


def test_methods_are_walked_in_karpenters_order_with_repair_first() -> None:
    assert NAMES == [
        "repair",
        "emptiness",
        "expiration",
        "drift",
        "multi-node-consolidation",
        "single-node-consolidation",
    ]
    assert [m.name for m in METHODS if m.forced] == ["repair", "expiration"]


@pytest.mark.parametrize("name", NAMES)
def test_each_cluster_gives_its_method_something_to_do(name: str) -> None:
    method = by_name(name)
    decision = decide(state(name), (method,))
    assert decision.actions, decision.reasons
    assert all(validate(state(name), a).valid for a in decision.actions)


@pytest.mark.parametrize("name", NAMES)
def test_a_pool_budget_of_zero_blocks_every_method_but_repair(name: str) -> None:
    decision = decide(state(name, budget="0"), (by_name(name),))
    if name == "repair":
        assert [a.nodes for a in decision.actions] == [("target",)]
        return
    assert decision.actions == []
    reason = decision.why_not("target")
    assert reason is not None and reason.category == "budget"
    assert "budget nodes=0" in str(reason)


@pytest.mark.parametrize("name", [n for n in NAMES if n != "emptiness"])  # empty: no pods
def test_a_pdb_from_the_schema_blocks_voluntary_methods_not_forced_ones(name: str) -> None:
    method = by_name(name)
    decision = decide(state(name, pdbs=[NO_ROOM.pdb()]), (method,))
    if method.forced:
        assert [a.nodes for a in decision.actions] == [("target",)]
        return
    assert decision.actions == []
    reason = decision.why_not("target")
    assert reason is not None and reason.category == "pdb"
    assert reason.numbers["allowed"] == 0


@pytest.mark.parametrize("name", NAMES)
def test_do_not_disrupt_on_the_pool_blocks_voluntary_methods_not_forced_ones(name: str) -> None:
    method = by_name(name)
    pinned = DoNotDisruptSpec(pools=["p"]).do_not_disrupt()
    decision = decide(state(name, pinned=pinned), (method,))
    if method.forced:
        assert [a.nodes for a in decision.actions] == [("target",)]
        return
    assert decision.actions == []
    reason = decision.why_not("target")
    assert reason is not None and reason.category == "do-not-disrupt"
    assert "the node is annotated karpenter.sh/do-not-disrupt" in str(reason)


@pytest.mark.parametrize("name", [n for n in NAMES if n != "emptiness"])
def test_do_not_disrupt_on_a_workload_blocks_voluntary_methods_not_forced_ones(name: str) -> None:
    method = by_name(name)
    workloads = [p.workload for p in cluster(name)[1]]
    pinned = DoNotDisruptSpec(workloads=workloads).do_not_disrupt()
    decision = decide(state(name, pinned=pinned), (method,))
    if method.forced:
        assert [a.nodes for a in decision.actions] == [("target",)]
        return
    assert decision.actions == []
    reason = decision.why_not("target")
    assert reason is not None and reason.category == "do-not-disrupt"
    assert "pod w-0 (w-0) is annotated" in str(reason)


def test_the_workload_label_pins_its_pods_too() -> None:
    nodes, pods = cluster("drift")
    labelled = [replace(p, labels={"karpenter.sh/do-not-disrupt": "true"}) for p in pods]
    pools = [NodePool(name="p", instance_types=TYPES)]
    decision = decide(State(nodes, labelled, pools, NOW, catalog=CATALOG), METHODS)
    assert decision.actions == []
    reason = decision.why_not("target")
    assert reason is not None and reason.category == "do-not-disrupt"


# -- repair pauses by one rule (Karpenter's) -----------------------------------------------------


@pytest.mark.parametrize(
    ("total", "unhealthy", "paused"),
    [(6, 2, False), (5, 1, False), (10, 2, False), (10, 3, True), (2, 1, False), (6, 3, True)],
)
def test_repair_pauses_when_more_than_20_percent_rounded_up_are_unhealthy(
    total: int, unhealthy: int, paused: bool
) -> None:
    assert repair_paused(total, unhealthy) is paused
    nodes = [sick(f"s{i}") for i in range(unhealthy)]
    nodes += [node(f"h{i}") for i in range(total - unhealthy)]
    decision = decide(State(nodes, [], [], NOW), (REPAIR,))
    if paused:
        assert decision.actions == []
        reason = decision.why_not("s0")
        assert reason is not None and reason.category == "repair-halted"
        assert (reason.numbers["unhealthy"], reason.numbers["nodes"]) == (unhealthy, total)
    else:
        assert sorted(a.nodes[0] for a in decision.actions) == [f"s{i}" for i in range(unhealthy)]


def test_repair_threshold_and_grace_come_from_the_settings_spec() -> None:
    spec = AutoscalerSpec(
        repair_after_seconds=900, disruption=DisruptionSettingsSpec(max_unhealthy_fraction=0.5)
    )
    settings = spec.disruption_settings()
    nodes = [sick("s0"), sick("s1"), node("h0"), node("h1")]  # 50%: paused at the default 20%
    assert decide(State(nodes, [], [], NOW), (REPAIR,)).actions == []
    waiting = decide(State(nodes, [], [], NOW, settings=settings), (REPAIR,))
    assert waiting.actions == []  # unhealthy for 600 s of the 900 s grace
    reason = waiting.why_not("s0")
    assert reason is not None and reason.category == "repair-grace"
    later = decide(State(nodes, [], [], NOW + 300, settings=settings), (REPAIR,))
    assert len(later.actions) == 2


# -- decide walks METHODS in order ---------------------------------------------------------------


def test_decide_returns_the_first_method_with_actions_and_merges_why_nodes_were_kept() -> None:
    pool = NodePool(
        name="p",
        instance_types=TYPES,
        disruption=Disruption(budgets=[Budget(nodes="100%")], expire_after_seconds=3600),
    )
    everything = [
        sick("broken"),
        node("empty"),
        node("old", launched_at=NOW - 4000),
        node("drifted", drifted=True),
        node("big", "g5.12xlarge"),
    ]
    pods = [
        pod("a", "old", gpu=1),
        pod("b", "drifted", gpu=1),
        pod("c", "big", gpu=1),
    ]
    expected = [
        ("broken", "repair"),
        ("empty", "delete-empty"),
        ("old", "expire"),
        ("drifted", "drift"),
        ("big", "replace"),
    ]
    nodes = list(everything)
    for gone, kind in expected:
        decision = decide(State(nodes, pods, [pool], NOW, catalog=CATALOG, offerings=offerings()))
        assert [(a.kind, a.nodes) for a in decision.actions] == [(kind, (gone,))]
        nodes = [n for n in nodes if n.name != gone]
    # "why was my node kept": reasons from every method walked, not just the one that acted
    recent = [replace(n, unhealthy_since=NOW - 5) if n.name == "broken" else n for n in everything]
    busy = [*pods, pod("h", "empty")]
    decision = decide(State(recent, busy, [pool], NOW, catalog=CATALOG))
    assert [(a.kind, a.nodes) for a in decision.actions] == [("expire", ("old",))]
    broken = decision.why_not("broken")
    assert broken is not None and broken.category == "repair-grace"
    assert decision.why_not("old") is None


# -- the schema specs ----------------------------------------------------------------------------


def test_disruption_settings_spec_builds_the_settings_and_names_bad_fields() -> None:
    built = DisruptionSettingsSpec(plan_time_limit_seconds=3, expiry_grace_seconds=60).settings()
    assert (built.plan_time_limit, built.expiry_grace_seconds) == (3, 60)
    assert (built.repair_grace_seconds, built.max_unhealthy_fraction) == (60, 0.2)
    with pytest.raises(ValidationError, match="max_unhealthy_fraction"):
        DisruptionSettingsSpec(max_unhealthy_fraction=1.5)
    with pytest.raises(ValidationError, match="repair_grace_seconds"):
        # one knob for the repair grace: the autoscaler's repair_after_seconds
        DisruptionSettingsSpec(repair_grace_seconds=60)  # type: ignore[call-arg]


def test_pdb_spec_needs_a_selection_and_a_limit() -> None:
    pdb = PdbSpec(name="web", workloads=["w-0"], min_available=1).pdb(disrupted=0)
    assert pdb.covers(pod("w-0", "n")) and not pdb.covers(pod("w-1", "n"))
    assert pdb.allowed(running=3) == 2
    with pytest.raises(ValidationError, match="give 'workloads' or 'selector'"):
        PdbSpec(name="web", max_unavailable=1)
    with pytest.raises(ValidationError, match="give 'max_unavailable' or 'min_available'"):
        PdbSpec(name="web", workloads=["w-0"])
    with pytest.raises(ValidationError, match="max_unavailable"):
        PdbSpec(name="web", workloads=["w-0"], max_unavailable=-1)


def test_do_not_disrupt_spec_rejects_empty_names() -> None:
    pinned = DoNotDisruptSpec(nodes=["n1"]).do_not_disrupt()
    assert pinned.node(node("n1")) and not pinned.node(node("n2"))
    with pytest.raises(ValidationError, match="workloads"):
        DoNotDisruptSpec(workloads=[""])
