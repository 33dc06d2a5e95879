"""Single-node consolidation: the first candidate (cheapest to disrupt first) that can be
deleted, its pods fitting on the other nodes; else the first that can be replaced by the
cheapest set of new nodes from the provisioner's ``plan_nodes`` (this may split one large node
into several smaller ones, which Karpenter never does; at most
``settings.max_replacement_candidates`` nodes are planned per call). A replacement must save
``max(min_saving_per_hour, min_saving_fraction × the node's price)`` per hour. Voluntary."""

from __future__ import annotations

from collections.abc import Sequence

from fleetshare.autoscaling.disruption import consolidation
from fleetshare.autoscaling.disruption.method import Base, Screening
from fleetshare.autoscaling.disruption.state import State, why
from fleetshare.autoscaling.disruption.types import Action, Decision, NodeView, Validation
from fleetshare.model.reason import Reason


class SingleNodeConsolidation(Base):
    name = "single-node-consolidation"
    forced = False

    def screen(self, state: State) -> Screening:
        return consolidation.screen(state)

    def compute(self, state: State, candidates: Sequence[NodeView]) -> Decision:
        settings = state.settings
        action: Action | None = None
        reasons: dict[str, Reason] = {}
        for node in candidates:
            result = consolidation.evaluate([node], state, allow_replace=False, max_new_nodes=0)
            if isinstance(result, Action):
                action = result
                break
            reasons[node.name] = result
        if action is None:
            tried = 0
            for node in candidates:
                if reasons[node.name].category != "does-not-fit":
                    continue
                if tried >= settings.max_replacement_candidates:
                    reasons[node.name] = why(
                        "not-evaluated",
                        "replacement search limit reached this pass "
                        f"({settings.max_replacement_candidates} nodes)",
                    )
                    continue
                tried += 1
                result = consolidation.evaluate(
                    [node], state, allow_replace=True, max_new_nodes=None
                )
                if isinstance(result, Action):
                    action = result
                    break
                reasons[node.name] = result
        decision = Decision([action] if action else [])
        chosen = set(action.nodes) if action else set()
        for node in candidates:
            if node.name not in chosen:
                decision.reasons[node.name] = reasons.get(node.name, consolidation.NOT_EVALUATED)
        return decision

    def validate(self, state: State, action: Action) -> Validation:
        return consolidation.validate(state, action)


SINGLE_NODE = SingleNodeConsolidation()
