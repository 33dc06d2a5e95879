"""What expiration and drift share: a graceful roll that launches a replacement first.

The replacement has the node's shape (instance type, zone, capacity type); when the pool no
longer allows it, the cheapest set from ``plan_nodes`` for the node's pods. A node without pods
is just deleted. Budgets apply to both (one action per allowed node, cheapest to disrupt
first)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from fleetshare.autoscaling.disruption.method import Base, Screening
from fleetshare.autoscaling.disruption.state import (
    State,
    budget_block,
    budget_reason,
    disruption_cost,
    missing_nodes,
    pool_usage,
    requeue_gangs,
    shapes,
    why,
)
from fleetshare.autoscaling.disruption.types import (
    Action,
    Decision,
    NodeView,
    PodView,
    Replacement,
    Validation,
    plural,
)
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import plan_nodes
from fleetshare.model.catalog import InstanceType, UnknownInstanceTypeError, ec2_name
from fleetshare.model.reason import Reason

RollKind = Literal["expire", "drift"]


def expired(node: NodeView, pool: NodePool, now: float) -> bool:
    """Older than the pool's ``expire_after_seconds``."""
    after = pool.disruption.expire_after_seconds
    return after is not None and now - node.launched_at >= after


def _same_shape_price(node: NodeView, pool: NodePool, state: State) -> float | None:
    """The price of a same-shape replacement when the pool still allows it, else None."""
    try:
        inst: InstanceType | None = state.catalog.get(node.instance_type)
    except UnknownInstanceTypeError:
        inst = None
    if inst is not None and not pool.allows(inst):
        return None
    if node.capacity_type not in pool.capacity_types:
        return None
    if pool.zones and node.zone not in pool.zones:
        return None
    price = node.price_per_hour
    for offering in state.offerings:
        if (
            ec2_name(offering.instance_type) == ec2_name(node.instance_type)
            and offering.zone == node.zone
            and offering.capacity_type == node.capacity_type
        ):
            if not offering.available:
                return None
            price = offering.price_per_hour
    return price


def replacement_for(node: NodeView, state: State) -> tuple[Replacement, ...] | Reason:
    """What to launch before ``node`` goes (or why nothing can be)."""
    pool = state.pools[node.pool]
    price = _same_shape_price(node, pool, state)
    if price is not None:
        return (Replacement.same_shape(node, price),)
    if not state.offerings:
        return why(
            "no-replacement",
            f"pool {pool.name} no longer offers {node.instance_type} "
            f"({node.capacity_type}, {node.zone}) and no offerings were given to plan another",
        )
    plan = plan_nodes(
        shapes(state.pods_on[node.name]),
        [pool],
        state.catalog,
        state.offerings,
        pool_usage=pool_usage(state, [pool.name], {node.name}),
        time_limit=state.settings.plan_time_limit,
    )
    if plan.unplaceable or not plan.launches:
        return why(
            "no-replacement", f"pool {pool.name} can launch no node for the pods of {node.name}"
        )
    return tuple(Replacement.from_launch(la) for la in plan.launches)


class Roll(Base):
    """Expiration or drift: ``due`` says which nodes, ``block`` what keeps a due node."""

    name: str
    forced: bool
    kind: RollKind

    def due(self, node: NodeView, pool: NodePool, state: State) -> bool:
        raise NotImplementedError

    def block(self, node: NodeView, state: State) -> Reason | None:
        raise NotImplementedError

    def describe(self, node: NodeView, state: State) -> str:
        raise NotImplementedError

    def screen(self, state: State) -> Screening:
        out = Screening()
        for name in sorted(state.nodes):
            node = state.nodes[name]
            pool = state.pools.get(node.pool)
            if pool is None or not self.due(node, pool, state):
                continue
            block = self.block(node, state)
            if block:
                out.kept[name] = block
            else:
                out.candidates.append(node)
        out.candidates.sort(key=lambda n: disruption_cost(n, state))
        return out

    def compute(self, state: State, candidates: Sequence[NodeView]) -> Decision:
        decision = Decision()
        left: dict[str, int | None] = {}
        for node in candidates:
            if node.pool not in left:
                left[node.pool] = state.budget(node.pool).allowed
            allowance = left[node.pool]
            if allowance is not None and allowance <= 0:
                decision.reasons[node.name] = budget_reason(node.pool, state.budget(node.pool))
                continue
            own = state.pods_on[node.name]
            replacements: tuple[Replacement, ...] = ()
            if own:
                found = replacement_for(node, state)
                if isinstance(found, Reason):
                    decision.reasons[node.name] = found
                    continue
                replacements = found
            if allowance is not None:
                left[node.pool] = allowance - 1
            decision.actions.append(self._action(node, state.expand(own), replacements, state))
        return decision

    def validate(self, state: State, action: Action) -> Validation:
        gone = missing_nodes(state, action.nodes)
        if gone:
            return Validation(False, gone)
        node = state.nodes[action.nodes[0]]
        pool = state.pools.get(node.pool)
        if pool is None:
            return Validation(
                False, Reason("unknown-pool", f"node pool {node.pool} no longer exists")
            )
        if not self.due(node, pool, state):
            text = "is not expired" if self.kind == "expire" else "no longer drifted"
            return Validation(False, Reason("not-due", f"node {node.name} {text}"))
        block = self.block(node, state) or budget_block(state, [node], action.nodes)
        if block:
            return Validation(False, block)
        return Validation(True, Reason("valid", f"node {node.name} still due for {self.kind}"))

    def _action(
        self,
        node: NodeView,
        evicted: Sequence[PodView],
        replacements: tuple[Replacement, ...],
        state: State,
    ) -> Action:
        text = self.describe(node, state)
        if replacements:
            reps = ", ".join(r.describe() for r in replacements)
            text += f"; launch {reps} first, then drain {plural(len(evicted), 'pod')}"
        else:
            text += "; it has no pods: delete it"
        gangs = requeue_gangs(evicted)
        if gangs:
            text += f"; gang {', '.join(gangs)} restarts whole"
        return Action(
            kind=self.kind,
            nodes=(node.name,),
            reason=text,
            replacements=replacements,
            evict=tuple(p.name for p in evicted),
            requeue=gangs,
            saving_per_hour=node.price_per_hour - sum(r.hourly_cost for r in replacements),
            replace_first=bool(replacements),
            decided_at=state.now,
        )
