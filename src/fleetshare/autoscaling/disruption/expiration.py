"""Expiration: replace nodes older than their pool's ``expire_after_seconds`` (forced).

As in Karpenter v1 (``expireAfter`` then ``terminationGracePeriod``), do-not-disrupt, PDBs and
training protection only delay an expired node by ``settings.expiry_grace_seconds`` (default 0:
forced at once). Unlike Karpenter v1, budgets do apply (a graceful roll)."""

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


class Expiration(Roll):
    name = "expiration"
    forced = True
    kind = "expire"

    def due(self, node: NodeView, pool: NodePool, state: State) -> bool:
        return expired(node, pool, state.now)

    def block(self, node: NodeView, state: State) -> Reason | None:
        busy = busy_block(node, state)
        if busy:
            return busy
        after = state.pools[node.pool].disruption.expire_after_seconds or 0.0
        forced_at = node.launched_at + after + state.settings.expiry_grace_seconds
        if state.now >= forced_at:
            return None
        protection = node_pinned(node, state) or eviction_block(
            state.expand(state.pods_on[node.name]), state, training=True
        )
        return (
            suffixed(protection, f" (expired; forced at t={forced_at:.0f})") if protection else None
        )

    def describe(self, node: NodeView, state: State) -> str:
        pool = state.pools[node.pool]
        return (
            f"expiration: {node.describe()} is {state.now - node.launched_at:.0f}s old "
            f"(pool {pool.name} expires nodes after {pool.disruption.expire_after_seconds:g}s)"
        )


EXPIRATION = Expiration()
