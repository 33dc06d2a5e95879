"""Emptiness: delete nodes without pods once empty for the pool's ``consolidate_after_seconds``
(both consolidation policies), down to zero or the pool's floor, within budgets; one
``delete-empty`` action for all of them, most expensive first. Voluntary: an annotated node is
kept."""

from __future__ import annotations

from collections.abc import Sequence

from fleetshare.autoscaling.disruption.method import Base, Screening
from fleetshare.autoscaling.disruption.state import (
    State,
    budget_block,
    budget_reason,
    floor_block,
    missing_nodes,
    new_pod_block,
    node_block,
    node_nominated,
    stable_since,
    why,
)
from fleetshare.autoscaling.disruption.types import (
    Action,
    Decision,
    NodeView,
    Validation,
    money,
)
from fleetshare.model.reason import Reason


def _order(node: NodeView) -> tuple[float, float, str]:
    return (-node.price_per_hour, stable_since(node, ()), node.name)


class Emptiness(Base):
    name = "emptiness"
    forced = False

    def screen(self, state: State) -> Screening:
        out = Screening()
        for name in sorted(state.nodes):
            node = state.nodes[name]
            if state.pods_on[name]:
                continue
            block = node_block(node, state, nominated=False)
            if block is None:
                # kept both for consolidate-after and for pending work: the reason that lapses
                # later is the one given, so the node is looked at again once, when both have
                after = state.pools[node.pool].disruption.consolidate_after_seconds
                empty_for = state.now - stable_since(node, ())
                nominated = node_nominated(node, state)
                if empty_for < after:
                    block = why(
                        "consolidate-after",
                        f"empty for {empty_for:.0f}s; pool waits {after:g}s",
                        waited=empty_for,
                        after=after,
                    )
                    if nominated is not None and nominated.numbers["left"] > after - empty_for:
                        block = nominated
                else:
                    block = nominated
            if block:
                out.kept[name] = block
            else:
                out.candidates.append(node)
        out.candidates.sort(key=_order)
        return out

    def compute(self, state: State, candidates: Sequence[NodeView]) -> Decision:
        decision = Decision()
        ready: dict[str, list[NodeView]] = {}
        for node in candidates:
            ready.setdefault(node.pool, []).append(node)
        chosen: list[NodeView] = []
        for pool, members in sorted(ready.items()):
            members.sort(key=_order)
            status = state.budget(pool)
            live = sum(1 for n in state.pool_nodes(pool) if n.name not in state.disrupting)
            floor = state.floors.get(pool, 0)
            room = max(0, live - floor)
            for index, node in enumerate(members):
                if index >= room:
                    decision.reasons[node.name] = why(
                        "floor", f"pool {pool} must keep {floor} node(s) (it has {live})"
                    )
                elif status.allowed is not None and index >= status.allowed:
                    decision.reasons[node.name] = budget_reason(pool, status)
                else:
                    chosen.append(node)
        if chosen:
            chosen.sort(key=_order)
            saving = sum(n.price_per_hour for n in chosen)
            text = ", ".join(
                f"{n.describe()} empty for {state.now - stable_since(n, ()):.0f}s" for n in chosen
            )
            decision.actions.append(
                Action(
                    kind="delete-empty",
                    nodes=tuple(n.name for n in chosen),
                    reason=f"emptiness: delete {text}, saving {money(saving)}",
                    saving_per_hour=saving,
                    decided_at=state.now,
                )
            )
        return decision

    def validate(self, state: State, action: Action) -> Validation:
        gone = missing_nodes(state, action.nodes)
        if gone:
            return Validation(False, gone)
        removed = [state.nodes[n] for n in action.nodes]
        arrived = new_pod_block(state, removed, ())
        if arrived:
            return Validation(False, arrived)
        for node in removed:
            block = node_block(node, state)
            if block:
                return Validation(False, block)
        block = budget_block(state, removed, action.nodes) or floor_block(state, removed, {})
        if block:
            return Validation(False, block)
        return Validation(True, Reason("valid", "nodes are still empty"))


EMPTINESS = Emptiness()
