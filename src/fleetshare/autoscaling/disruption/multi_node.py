"""Multi-node consolidation (Karpenter's): a binary search over prefixes (2 to
``settings.max_multi_node_candidates`` nodes) of the candidates, cheapest to disrupt first and
at most each pool's budget allowance, for the nodes whose pods fit on the other nodes plus at
most *one* new node. Of the valid prefixes tried, the one that saves most (ties: fewer evicted
pods, then no launch). Voluntary."""

from __future__ import annotations

from collections.abc import Sequence

from fleetshare.autoscaling.disruption import consolidation
from fleetshare.autoscaling.disruption.method import Base, Screening
from fleetshare.autoscaling.disruption.state import State
from fleetshare.autoscaling.disruption.types import Action, Decision, NodeView, Validation


class MultiNodeConsolidation(Base):
    name = "multi-node-consolidation"
    forced = False

    def screen(self, state: State) -> Screening:
        return consolidation.screen(state)

    def compute(self, state: State, candidates: Sequence[NodeView]) -> Decision:
        left = {pool: state.budget(pool).allowed for pool in {n.pool for n in candidates}}
        prefix = []
        for node in candidates:
            allowance = left[node.pool]
            if allowance is None or allowance > 0:
                prefix.append(node)
                if allowance is not None:
                    left[node.pool] = allowance - 1
        prefix = prefix[: state.settings.max_multi_node_candidates]
        low, high = 2, len(prefix)
        found: list[Action] = []
        while low <= high:
            mid = (low + high) // 2
            result = consolidation.evaluate(
                prefix[:mid], state, allow_replace=True, max_new_nodes=1
            )
            if isinstance(result, Action):
                found.append(result)
                low = mid + 1
            else:
                high = mid - 1
        # Of the valid prefixes tried, the largest saving; on a tie the least churn (fewer
        # evicted pods, no launch): replacing 3 nodes by one like them is worse than deleting 2.
        best = min(
            found,
            key=lambda a: (-round(a.saving_per_hour, 9), len(a.evict), len(a.replacements)),
            default=None,
        )
        if best is None:
            return Decision()
        kept = [n.name for n in candidates if n.name not in best.nodes]
        return Decision([best], dict.fromkeys(kept, consolidation.NOT_EVALUATED))

    def validate(self, state: State, action: Action) -> Validation:
        return consolidation.validate(state, action)


MULTI_NODE = MultiNodeConsolidation()
