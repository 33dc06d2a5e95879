"""Drift: replace nodes whose pool's spec changed since they were launched (voluntary).

Do-not-disrupt, PDBs and (``settings.drift_waits_for_training``, default on) running
non-preemptible training make a drifted node wait. An expired node is expiration's."""

from __future__ import annotations

from fleetshare.autoscaling.disruption.rolling import Roll, expired
from fleetshare.autoscaling.disruption.state import (
    State,
    busy_block,
    eviction_block,
    node_pinned,
    suffixed,
)
from fleetshare.autoscaling.disruption.types import NodeView
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.model.reason import Reason


class Drift(Roll):
    name = "drift"
    forced = False
    kind = "drift"

    def due(self, node: NodeView, pool: NodePool, state: State) -> bool:
        return node.drifted and not expired(node, pool, state.now)

    def block(self, node: NodeView, state: State) -> Reason | None:
        pinned = busy_block(node, state) or node_pinned(node, state)
        if pinned:
            return pinned
        block = eviction_block(
            state.expand(state.pods_on[node.name]),
            state,
            training=state.settings.drift_waits_for_training,
        )
        return suffixed(block, " (drifted; waits)") if block else None

    def describe(self, node: NodeView, state: State) -> str:
        return f"drift: {node.describe()} no longer matches pool {node.pool}'s spec"


DRIFT = Drift()
