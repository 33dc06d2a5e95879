"""Disruption decisions: what the autoscaler removes or replaces, and why it keeps the rest."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.disruption import (
    Action,
    Decision,
    DisruptionSettings,
    NodeView,
    Pdb,
    PodView,
    consolidation,
    empty_nodes,
    expiration_and_drift,
    repair,
    revalidate,
)
from fleetshare.autoscaling.nodepool import Budget, Disruption, NodePool
from fleetshare.model.catalog import load_catalog
from fleetshare.model.resources import parse_resources

CATALOG = load_catalog()
ZONE = "us-east-1a"
NOW = 100_000.0
GPU_TYPES = ["g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.12xlarge"]
CPU_TYPES = ["m5.large", "m5.xlarge", "m5.2xlarge"]


def pool(
    name: str = "gpu",
    types: list[str] | None = None,
    *,
    budgets: list[Budget] | None = None,
    **disruption: Any,
) -> NodePool:
    """A pool allowing ``types`` with a 100% budget unless ``budgets`` are given."""
    spec = Disruption(budgets=budgets or [Budget(nodes="100%")], **disruption)
    return NodePool(name=name, instance_types=types or GPU_TYPES, disruption=spec)


def offerings(*names: str) -> list[Offering]:
    out = []
    for name in names:
        price = CATALOG.get(name).price_per_hour
        assert price is not None
        out.append(Offering(name, ZONE, "on-demand", price))
    return out


def node(name: str, itype: str = "g5.xlarge", pool: str = "gpu", **kw: Any) -> NodeView:
    inst = CATALOG.get(itype)
    assert inst.price_per_hour is not None
    return NodeView(
        name, pool, itype, ZONE, "on-demand", inst.price_per_hour, inst.allocatable, **kw
    )


def pod(
    name: str, on: str, *, cpu: str = "1", memory: str = "2Gi", gpu: int = 0, **kw: Any
) -> PodView:
    spec: dict[str, str | int] = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpu}
    kw.setdefault("workload", name)
    return PodView(name=name, team="t", node=on, requests=parse_resources(spec), **kw)


def category(decision: Decision, node: str) -> str | None:
    """The category of why ``node`` was kept (None: not kept)."""
    reason = decision.why_not(node)
    return None if reason is None else reason.category


def message(decision: Decision, node: str) -> str:
    """What a user is told about why ``node`` was kept ("" when not kept)."""
    return str(decision.why_not(node) or "")


def only(actions: list[Action]) -> Action:
    assert len(actions) == 1, actions
    return actions[0]


def consolidate(
    nodes: list[NodeView], pods: list[PodView], pools: list[NodePool], **kw: Any
) -> Decision:
    offered = kw.pop("offered", GPU_TYPES)
    return consolidation(nodes, pods, pools, CATALOG, offerings(*offered), NOW, **kw)


# -- emptiness -----------------------------------------------------------------------------------


def test_empty_node_is_deleted_only_after_consolidate_after() -> None:
    pools = [pool(consolidate_after_seconds=300)]
    nodes = [node("n1", empty_since=NOW - 100)]
    early = empty_nodes(nodes, [], pools, NOW)
    assert early.actions == []
    assert category(early, "n1") == "consolidate-after"
    late = empty_nodes(nodes, [], pools, NOW + 200)
    action = only(late.actions)
    assert (action.kind, action.nodes) == ("delete-empty", ("n1",))
    assert action.saving_per_hour == CATALOG.get("g5.xlarge").price_per_hour
    # a node with a pod is not empty, whatever empty_since says
    busy = empty_nodes(nodes, [pod("p", "n1")], pools, NOW + 200)
    assert busy.actions == []


def test_empty_pools_scale_to_zero_for_both_policies() -> None:
    pools = [pool(), pool("cpu", CPU_TYPES, consolidation_policy="WhenEmpty")]
    nodes = [node("g1"), node("g2", "g5.12xlarge"), node("c1", "m5.large", pool="cpu")]
    action = only(empty_nodes(nodes, [], pools, NOW).actions)
    assert sorted(action.nodes) == ["c1", "g1", "g2"]
    assert action.nodes[0] == "g2"  # most expensive first


def test_a_pools_floor_is_kept() -> None:
    nodes = [node("a"), node("b", "g5.2xlarge"), node("c")]
    decision = empty_nodes(nodes, [], [pool()], NOW, floors={"gpu": 1})
    assert only(decision.actions).nodes == ("b", "a")  # pricier first, then by name
    assert category(decision, "c") == "floor"


# -- consolidation: delete -----------------------------------------------------------------------


def test_underutilized_node_is_deleted_when_its_pods_fit_elsewhere() -> None:
    pools = [pool("cpu", CPU_TYPES)]
    nodes = [node("big", "m5.2xlarge", pool="cpu"), node("small", "m5.xlarge", pool="cpu")]
    pods = [
        pod("busy", "big", cpu="4", started_at=NOW - 5),  # big's pods just changed
        pod("web-0", "small", cpu="1"),
    ]
    decision = consolidate(nodes, pods, pools, offered=CPU_TYPES)
    action = only(decision.actions)
    assert (action.kind, action.nodes, action.evict) == ("delete", ("small",), ("web-0",))
    assert action.replacements == ()
    assert "its 1 pod fits on big" in action.reason
    assert category(decision, "big") == "consolidate-after"


def test_no_delete_when_the_pods_do_not_fit_and_no_cheaper_node_exists() -> None:
    pools = [pool("cpu", CPU_TYPES)]
    nodes = [node("full", "m5.xlarge", pool="cpu"), node("small", "m5.large", pool="cpu")]
    pods = [
        pod("hog", "full", cpu="3.5", started_at=NOW - 5),
        pod("web-0", "small", cpu="1"),
    ]
    decision = consolidate(nodes, pods, pools, offered=CPU_TYPES)
    assert decision.actions == []
    assert category(decision, "small") == "no-saving"


def test_node_selectors_are_honoured_when_moving_pods() -> None:
    pools = [pool("cpu", CPU_TYPES)]
    nodes = [
        node("big", "m5.2xlarge", pool="cpu", labels={"disk": "hdd"}, pods_changed_at=NOW),
        node("small", "m5.large", pool="cpu", labels={"disk": "ssd"}),
    ]
    pods = [pod("db-0", "small", cpu="1", node_selector={"disk": "ssd"})]
    decision = consolidate(nodes, pods, pools, offered=CPU_TYPES)
    assert decision.actions == []
    # without the selector the pod would move to big
    free = [replace(pods[0], node_selector={})]
    assert only(consolidate(nodes, free, pools, offered=CPU_TYPES).actions).nodes == ("small",)


def test_several_underutilized_nodes_are_consolidated_in_one_action() -> None:
    pools = [pool("cpu", CPU_TYPES)]
    nodes = [node(f"n{i}", "m5.xlarge", pool="cpu") for i in range(3)]
    pods = [pod(f"p{i}", f"n{i}", cpu="1") for i in range(3)]
    action = only(consolidate(nodes, pods, pools, offered=CPU_TYPES).actions)
    # deleting two nodes saves as much as replacing all three by one, with less churn
    assert action.kind == "delete"
    assert len(action.nodes) == 2
    assert action.saving_per_hour == 2 * node("x", "m5.xlarge").price_per_hour


# -- consolidation: replace ----------------------------------------------------------------------


def test_big_node_is_replaced_by_a_cheaper_smaller_one() -> None:
    nodes = [node("big", "g5.12xlarge")]
    pods = [pod("infer-0", "big", cpu="2", memory="8Gi", gpu=1)]
    action = only(consolidate(nodes, pods, [pool()]).actions)
    assert action.kind == "replace"
    assert [(r.instance_type, r.count) for r in action.replacements] == [("g5.xlarge", 1)]
    assert abs(action.saving_per_hour - (5.672 - 1.006)) < 1e-9
    assert "replace big (g5.12xlarge, $5.672/h)" in action.reason


def test_one_large_node_is_split_into_two_cheaper_ones() -> None:
    nodes = [node("big", "g5.12xlarge")]
    pods = [pod(f"infer-{i}", "big", cpu="2", memory="8Gi", gpu=1) for i in range(2)]
    action = only(consolidate(nodes, pods, [pool()]).actions)
    assert action.kind == "replace"
    assert [(r.instance_type, r.count) for r in action.replacements] == [("g5.xlarge", 2)]
    assert action.saving_per_hour > 3.0


def test_gpu_shares_are_moved_only_where_each_fits_inside_one_gpu() -> None:
    # two 4-GPU nodes hosting 2 and 3 pods of 0.6 GPU: each pod needs a GPU of its own, so
    # the five need five GPUs; counting 0.6 in node totals (2.4 of 4 used) would delete a
    # node and leave a pod with no GPU to go to
    share = parse_resources({"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "600m"})
    nodes = [node("a", "g5.12xlarge"), node("b", "g5.12xlarge")]
    pods = [
        PodView(name=f"s{i}", workload=f"s{i}", team="t", node=on, requests=share)
        for i, on in enumerate(["a", "a", "b", "b", "b"])
    ]
    for action in consolidate(nodes, pods, [pool()]).actions:
        kept = [n for n in nodes if n.name not in action.nodes]
        gpus = sum(CATALOG.get(n.instance_type).allocatable["nvidia.com/gpu"] for n in kept)
        gpus += sum(
            CATALOG.get(r.instance_type).allocatable["nvidia.com/gpu"] * r.count
            for r in action.replacements
        )
        assert gpus >= 5 * 1000, action.reason


def test_replacement_must_save_the_minimum() -> None:
    # g5.4xlarge -> g5.2xlarge saves $0.412/h (25%); a 30% minimum refuses it
    nodes = [node("n", "g5.4xlarge")]
    pods = [pod("infer-0", "n", cpu="4", memory="8Gi", gpu=1)]
    assert only(consolidate(nodes, pods, [pool()]).actions).kind == "replace"
    strict = DisruptionSettings(min_saving_fraction=0.3)
    decision = consolidate(nodes, pods, [pool()], settings=strict)
    assert decision.actions == []
    assert category(decision, "n") == "no-saving"


# -- budgets -------------------------------------------------------------------------------------


def test_budget_zero_blocks_and_one_allows_one_counting_nodes_in_flight() -> None:
    nodes = [node("a"), node("b"), node("c")]
    zero = empty_nodes(nodes, [], [pool(budgets=[Budget(nodes="0")])], NOW)
    assert zero.actions == []
    assert all(category(zero, n) == "budget" for n in "abc")
    one = empty_nodes(nodes, [], [pool(budgets=[Budget(nodes="1")])], NOW)
    assert len(only(one.actions).nodes) == 1
    assert sum(r.category == "budget" for r in one.reasons.values()) == 2
    busy = empty_nodes(nodes, [], [pool(budgets=[Budget(nodes="1")])], NOW, disrupting={"a"})
    assert busy.actions == []
    # the default budget is 10% of the pool's nodes, rounded up
    assert len(only(empty_nodes(nodes, [], [NodePool(name="gpu")], NOW).actions).nodes) == 1


def test_cron_budget_applies_only_inside_its_window() -> None:
    business_hours = Budget(nodes="0", schedule="0 9 * * 1-5", duration_seconds=8 * 3600)
    pools = [pool(budgets=[business_hours])]
    nodes = [node("a"), node("b")]
    monday = datetime(2024, 1, 1, tzinfo=UTC).timestamp()  # a Monday, 00:00 UTC
    inside = empty_nodes(nodes, [], pools, monday + 10 * 3600)
    assert inside.actions == []
    assert "window '0 9 * * 1-5'" in message(inside, "a")
    evening = empty_nodes(nodes, [], pools, monday + 17 * 3600 + 60)
    assert len(only(evening.actions).nodes) == 2
    saturday = empty_nodes(nodes, [], pools, monday + 5 * 86400 + 10 * 3600)
    assert len(only(saturday.actions).nodes) == 2


def test_budget_limits_consolidation_too() -> None:
    nodes = [node("big", "g5.12xlarge")]
    pods = [pod("infer-0", "big", cpu="2", gpu=1)]
    decision = consolidate(nodes, pods, [pool(budgets=[Budget(nodes="0")])])
    assert decision.actions == []
    assert category(decision, "big") == "budget"


# -- do-not-disrupt and PDBs ---------------------------------------------------------------------


def _movable() -> tuple[list[NodeView], list[PodView], list[NodePool]]:
    nodes = [
        node("big", "m5.2xlarge", pool="cpu", pods_changed_at=NOW),
        node("small", "m5.xlarge", pool="cpu"),
    ]
    return nodes, [pod("web-0", "small", cpu="1")], [pool("cpu", CPU_TYPES)]


def test_do_not_disrupt_on_a_pod_or_a_node_blocks_consolidation() -> None:
    nodes, pods, pools = _movable()
    assert only(consolidate(nodes, pods, pools, offered=CPU_TYPES).actions).nodes == ("small",)
    pinned = [replace(pods[0], do_not_disrupt=True)]
    decision = consolidate(nodes, pinned, pools, offered=CPU_TYPES)
    assert decision.actions == []
    assert category(decision, "small") == "do-not-disrupt" and "pod web-0" in message(
        decision, "small"
    )
    annotated = [nodes[0], replace(nodes[1], do_not_disrupt=True)]
    decision = consolidate(annotated, pods, pools, offered=CPU_TYPES)
    assert decision.actions == []
    assert category(decision, "small") == "do-not-disrupt" and "the node" in message(
        decision, "small"
    )
    # and an annotated empty node is not deleted either
    empty = empty_nodes([replace(nodes[1], do_not_disrupt=True)], [], pools, NOW)
    assert empty.actions == []


def test_pdb_that_allows_no_more_disruptions_blocks() -> None:
    nodes, pods, pools = _movable()
    covered = [replace(pods[0], pdb="web")]
    exhausted = [Pdb("web", max_unavailable=1, disrupted=1)]
    decision = consolidate(nodes, covered, pools, offered=CPU_TYPES, pdbs=exhausted)
    assert decision.actions == []
    assert category(decision, "small") == "pdb"
    fine = [Pdb("web", max_unavailable=1, disrupted=0)]
    assert consolidate(nodes, covered, pools, offered=CPU_TYPES, pdbs=fine).actions
    min_available = [Pdb("web", min_available=1)]  # its only running pod must stay
    assert not consolidate(nodes, covered, pools, offered=CPU_TYPES, pdbs=min_available).actions


# -- gangs and training --------------------------------------------------------------------------


def test_training_gang_is_protected_unless_preemptible_and_the_saving_is_large() -> None:
    # g5.4xlarge -> g5.2xlarge saves 25% of the node: fine for batch, not for training
    nodes = [node("n", "g5.4xlarge")]
    batch = [pod("b-0", "n", cpu="4", gpu=1, kind="batch")]
    assert only(consolidate(nodes, batch, [pool()]).actions).kind == "replace"
    training = [pod("t-0", "n", cpu="4", gpu=1, kind="training", gang="t")]
    decision = consolidate(nodes, training, [pool()])
    assert decision.actions == []
    assert "not preemptible" in message(decision, "n")
    preemptible = [replace(training[0], preemptible=True)]
    decision = consolidate(nodes, preemptible, [pool()])
    assert decision.actions == []
    assert category(decision, "n") == "training" and "preemptible training gang t" in message(
        decision, "n"
    )
    # g5.12xlarge -> g5.2xlarge saves 79%: a preemptible gang may be restarted for that
    big = [node("n", "g5.12xlarge")]
    action = only(consolidate(big, preemptible, [pool()]).actions)
    assert action.kind == "replace" and action.requeue == ("t",)
    assert "restarts preemptible training gang t" in action.reason
    # ...but never a non-preemptible one
    assert consolidate(big, training, [pool()]).actions == []


def test_a_gang_is_disrupted_whole() -> None:
    nodes = [node("a", "g5.12xlarge"), node("b", "g5.xlarge", pods_changed_at=NOW)]
    gang = [
        pod("t-0", "a", cpu="2", gpu=1, kind="training", gang="t", preemptible=True),
        pod("t-1", "b", cpu="2", gpu=1, kind="training", gang="t", preemptible=True),
    ]
    action = only(consolidate(nodes, gang, [pool()]).actions)
    assert action.nodes == ("a",)
    assert action.evict == ("t-0", "t-1")  # the gang member on b restarts too
    assert action.requeue == ("t",)
    assert "1 more pod evicted from other nodes" in action.reason
    # the threshold counts every node the gang touches: $4.666/h saved of $6.678/h is 70%
    strict = DisruptionSettings(training_saving_threshold=0.75)  # 82% of node a alone
    decision = consolidate(nodes, gang, [pool()], settings=strict)
    assert decision.actions == []
    assert "$6.678/h" in message(decision, "a")
    # a gang member elsewhere that may not be disrupted protects the whole gang
    pinned = [gang[0], replace(gang[1], do_not_disrupt=True)]
    decision = consolidate(nodes, pinned, [pool()])
    assert decision.actions == []
    assert category(decision, "a") == "do-not-disrupt" and "pod t-1" in message(decision, "a")


# -- revalidation --------------------------------------------------------------------------------


def test_revalidate_detects_a_node_that_got_a_new_pod() -> None:
    nodes, pods, pools = _movable()
    action = only(consolidate(nodes, pods, pools, offered=CPU_TYPES).actions)
    later = NOW + 15
    assert revalidate(action, nodes, pods, pools, later, disrupting={"small"}).valid
    arrived = [*pods, pod("new-0", "small", started_at=later - 1)]
    verdict = revalidate(action, nodes, arrived, pools, later)
    assert not verdict.valid
    assert "got new pod new-0" in verdict.reason
    # capacity taken meanwhile on the target node invalidates it too
    crowded = [*pods, pod("hog", "big", cpu="7.5", started_at=later - 1)]
    verdict = revalidate(action, nodes, crowded, pools, later)
    assert not verdict.valid and verdict.cause.category == "does-not-fit"
    gone = revalidate(action, nodes[:1], pods, pools, later)
    assert not gone.valid and "no longer exists" in gone.reason


def test_revalidate_a_replacement_and_an_emptiness_action() -> None:
    nodes = [node("big", "g5.12xlarge")]
    pods = [pod("infer-0", "big", cpu="2", gpu=1)]
    action = only(consolidate(nodes, pods, [pool()]).actions)
    assert revalidate(action, nodes, pods, [pool()], NOW + 15).valid
    budget0 = [pool(budgets=[Budget(nodes="0")])]
    assert not revalidate(action, nodes, pods, budget0, NOW + 15).valid
    empty = only(empty_nodes([node("e")], [], [pool()], NOW).actions)
    assert revalidate(empty, [node("e")], [], [pool()], NOW + 15).valid
    assert not revalidate(empty, [node("e")], [pod("p", "e")], [pool()], NOW + 15).valid


# -- expiration and drift ------------------------------------------------------------------------


def test_expired_and_drifted_nodes_are_replaced_before_removal() -> None:
    pools = [pool(expire_after_seconds=3600)]
    nodes = [
        node("old", launched_at=NOW - 4000),
        node("drifted", launched_at=NOW - 100, drifted=True),
        node("fresh", launched_at=NOW - 100),
    ]
    pods = [pod("a", "old", gpu=1), pod("b", "drifted", gpu=1), pod("c", "fresh", gpu=1)]
    decision = expiration_and_drift(nodes, pods, pools, NOW)
    kinds = {a.nodes[0]: a for a in decision.actions}
    assert sorted(kinds) == ["drifted", "old"]
    expire, drift = kinds["old"], kinds["drifted"]
    assert (expire.kind, drift.kind) == ("expire", "drift")
    for action in (expire, drift):
        assert action.replace_first
        assert [
            (r.instance_type, r.zone, r.capacity_type, r.count) for r in action.replacements
        ] == [("g5.xlarge", ZONE, "on-demand", 1)]
    assert expire.evict == ("a",)
    # an empty drifted node is simply deleted
    empty = only(expiration_and_drift(nodes[1:2], [], pools, NOW).actions)
    assert not empty.replace_first and empty.replacements == ()


def test_do_not_disrupt_blocks_drift_but_not_expiry_and_budgets_apply() -> None:
    pools = [pool(expire_after_seconds=3600)]
    nodes = [
        node("old", launched_at=NOW - 4000, do_not_disrupt=True),
        node("drifted", launched_at=NOW - 100, drifted=True, do_not_disrupt=True),
    ]
    pods = [pod("a", "old", gpu=1), pod("b", "drifted", gpu=1)]
    decision = expiration_and_drift(nodes, pods, pools, NOW)
    assert [a.nodes for a in decision.actions] == [("old",)]
    assert category(decision, "drifted") == "do-not-disrupt"
    # a grace period delays a forced expiry of a protected node
    grace = DisruptionSettings(expiry_grace_seconds=3600)
    delayed = expiration_and_drift(nodes, pods, pools, NOW, settings=grace)
    assert delayed.actions == []
    assert "forced at t=" in message(delayed, "old")
    closed = [pool(expire_after_seconds=3600, budgets=[Budget(nodes="0")])]
    blocked = expiration_and_drift(nodes, pods, closed, NOW)
    assert blocked.actions == []
    assert category(blocked, "old") == "budget"


def test_drift_to_a_type_the_pool_no_longer_allows_plans_a_new_shape() -> None:
    pools = [pool(types=["g5.2xlarge"])]
    nodes = [node("n", "g5.xlarge", drifted=True)]
    pods = [pod("a", "n", gpu=1)]
    without = expiration_and_drift(nodes, pods, pools, NOW)
    assert category(without, "n") == "no-replacement"
    action = only(
        expiration_and_drift(nodes, pods, pools, NOW, offerings=offerings(*GPU_TYPES)).actions
    )
    assert [r.instance_type for r in action.replacements] == ["g5.2xlarge"]


# -- repair --------------------------------------------------------------------------------------


def test_repair_requeues_the_whole_gang_and_leaves_replacement_to_provisioning() -> None:
    nodes = [
        node("bad", ready=False, healthy=False, unhealthy_since=NOW - 120, do_not_disrupt=True),
        node("ok"),
    ]
    pods = [
        pod("t-0", "bad", gpu=1, kind="training", gang="t"),
        pod("t-1", "ok", gpu=1, kind="training", gang="t"),
        pod("solo", "bad", cpu="1"),
    ]
    action = only(repair(nodes, pods, NOW).actions)
    assert (action.kind, action.nodes, action.replace_first) == ("repair", ("bad",), False)
    assert action.evict == ("solo", "t-0", "t-1")
    assert action.requeue == ("solo", "t")
    # the requeued work drives provisioning; nothing is bought for the node itself
    assert action.replacements == ()
    # within the grace period nothing happens yet
    early = repair(nodes, pods, NOW - 90)
    assert early.actions == []
    assert category(early, "bad") == "repair-grace"


def test_repair_halts_when_more_than_20_percent_of_a_pool_is_unhealthy() -> None:
    def fleet(sick: int) -> list[NodeView]:
        return [
            node(f"n{i}", ready=i >= sick, unhealthy_since=NOW - 600 if i < sick else None)
            for i in range(10)
        ]

    assert len(repair(fleet(2), [], NOW).actions) == 2
    halted = repair(fleet(3), [], NOW)
    assert halted.actions == []
    assert category(halted, "n0") == "repair-halted"
    # a tiny pool can always repair one node (20% rounded up)
    tiny = [node("a", ready=False, unhealthy_since=NOW - 600), node("b")]
    assert len(repair(tiny, [], NOW).actions) == 1
