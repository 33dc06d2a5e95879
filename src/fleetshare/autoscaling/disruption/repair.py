"""Repair: remove nodes that stay NotReady or fail their GPU health check (forced).

A node unhealthy for ``settings.repair_grace_seconds`` is cordoned and terminated at once and
its workloads requeued (whole gangs). As in Karpenter's node repair, no replacement is bought
for the node itself: the requeued work drives provisioning, so a node whose work already moved
elsewhere is not replaced for nothing. Budgets, PDBs and do-not-disrupt do not apply. A pool
pauses repair while more of its nodes are unhealthy than ``settings.max_unhealthy_fraction`` of
them rounded *up* (:func:`repair_paused`, the one rule for every caller)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from fleetshare.autoscaling.disruption.method import Base, Screening
from fleetshare.autoscaling.disruption.state import State, missing_nodes, why
from fleetshare.autoscaling.disruption.types import (
    Action,
    Decision,
    NodeView,
    Validation,
    plural,
)
from fleetshare.model.reason import Reason


def repair_paused(total: int, unhealthy: int, max_fraction: float = 0.2) -> bool:
    """True when a pool of ``total`` nodes with ``unhealthy`` of them unhealthy stops repairing.

    Karpenter's rule (kubernetes-sigs/karpenter, pkg/controllers/node/health/controller.go,
    ``areNodesHealthy``): ``threshold = GetScaledValueFromIntOrPercent("20%", nodes, roundUp)``
    and repair proceeds while ``unhealthy <= threshold``. So 1 of 5, 2 of 6 and 2 of 10 are
    repaired; 3 of 10 pause; a pool of up to 5 nodes can always repair one.
    """
    return unhealthy > math.ceil(max_fraction * total - 1e-9)


def _halted(state: State, pool: str, total: int, sick: int) -> Reason:
    fraction = state.settings.max_unhealthy_fraction
    return why(
        "repair-halted",
        f"{sick} of {total} nodes in pool {pool} are unhealthy (more than {fraction:.0%}); a "
        "systemic failure is not fixed by replacing nodes",
        unhealthy=sick,
        nodes=total,
    )


def _pool_health(state: State, pool: str) -> tuple[int, int]:
    members = state.pool_nodes(pool)
    return len(members), sum(1 for n in members if n.unhealthy)


class Repair(Base):
    name = "repair"
    forced = True

    def screen(self, state: State) -> Screening:
        out = Screening()
        settings = state.settings
        by_pool: dict[str, list[NodeView]] = {}
        for node in state.nodes.values():
            by_pool.setdefault(node.pool, []).append(node)
        for pool, members in sorted(by_pool.items()):
            sick = sorted((n for n in members if n.unhealthy), key=lambda n: n.name)
            if not sick:
                continue
            if repair_paused(len(members), len(sick), settings.max_unhealthy_fraction):
                reason = _halted(state, pool, len(members), len(sick))
                out.kept.update(dict.fromkeys((n.name for n in sick), reason))
                continue
            for node in sick:
                since = state.now if node.unhealthy_since is None else node.unhealthy_since
                grace = settings.repair_grace_seconds
                if node.name in state.disrupting:
                    out.kept[node.name] = why("disrupting", "the node is already being disrupted")
                elif state.now - since < grace:
                    out.kept[node.name] = why(
                        "repair-grace",
                        f"unhealthy for {state.now - since:.0f}s; repaired after {grace:g}s",
                        waited=state.now - since,
                        grace=grace,
                    )
                else:
                    out.candidates.append(node)
        return out

    def compute(self, state: State, candidates: Sequence[NodeView]) -> Decision:
        return Decision(actions=[_repair_action(node, state) for node in candidates])

    def validate(self, state: State, action: Action) -> Validation:
        gone = missing_nodes(state, action.nodes)
        if gone:
            return Validation(False, gone)
        node = state.nodes[action.nodes[0]]
        if not node.unhealthy:
            return Validation(False, Reason("recovered", f"node {node.name} recovered"))
        since = state.now if node.unhealthy_since is None else node.unhealthy_since
        if state.now - since < state.settings.repair_grace_seconds:
            return Validation(
                False,
                Reason("repair-grace", f"node {node.name} has not been unhealthy for the grace"),
            )
        total, sick = _pool_health(state, node.pool)
        if repair_paused(total, sick, state.settings.max_unhealthy_fraction):
            return Validation(False, _halted(state, node.pool, total, sick))
        return Validation(True, Reason("valid", "node is still unhealthy"))


def _repair_action(node: NodeView, state: State) -> Action:
    since = state.now if node.unhealthy_since is None else node.unhealthy_since
    grace = state.settings.repair_grace_seconds
    evicted = state.expand(state.pods_on[node.name])
    requeue = tuple(sorted({p.unit for p in evicted}))
    status = "NotReady" if not node.ready else "failing its health check"
    text = (
        f"repair: {node.describe()} {status} for {state.now - since:.0f}s (grace {grace:g}s): "
        "cordon and terminate"
    )
    if requeue:
        elsewhere = sum(1 for p in evicted if p.node != node.name)
        text += f"; requeue {', '.join(requeue)}"
        if elsewhere:
            text += f" ({plural(elsewhere, 'gang pod')} on other nodes evicted too)"
    return Action(
        kind="repair",
        nodes=(node.name,),
        reason=text,
        evict=tuple(p.name for p in evicted),
        requeue=requeue,
        saving_per_hour=0.0,
        replace_first=False,
        decided_at=state.now,
    )


REPAIR = Repair()
