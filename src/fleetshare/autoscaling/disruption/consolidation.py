"""What multi-node and single-node consolidation share: which nodes are candidates, what
removing a set of them would take (:func:`evaluate`) and the re-check before acting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fleetshare.autoscaling.disruption.method import Screening
from fleetshare.autoscaling.disruption.state import (
    State,
    budget_block,
    budget_reason,
    disruption_cost,
    eviction_block,
    existing_targets,
    floor_block,
    missing_nodes,
    new_pod_block,
    new_targets,
    node_block,
    place,
    pool_usage,
    requeue_gangs,
    shapes,
    stable_since,
    training_units,
    why,
)
from fleetshare.autoscaling.disruption.types import (
    Action,
    ActionKind,
    NodeView,
    PodView,
    Replacement,
    Validation,
    money,
    plural,
)
from fleetshare.autoscaling.provisioner import plan_nodes
from fleetshare.model.reason import Reason
from fleetshare.placement.first_fit import Room

NOT_EVALUATED = why(
    "not-evaluated", "one consolidation action per pass; re-evaluated on the next pass"
)


def consolidation_block(node: NodeView, state: State) -> Reason | None:
    """Why ``node`` is not a consolidation candidate (policy, consolidate-after, protections)."""
    block = node_block(node, state)
    if block:
        return block
    pool = state.pools[node.pool]
    pods = state.pods_on[node.name]
    if not pods:
        return why("policy", "empty nodes are handled by empty_nodes")
    if pool.disruption.consolidation_policy == "WhenEmpty":
        return why("policy", f"pool {pool.name} consolidates only empty nodes (WhenEmpty)")
    after = pool.disruption.consolidate_after_seconds
    since = stable_since(node, pods)
    if state.now - since < after:
        return why(
            "consolidate-after",
            f"its pods changed {state.now - since:.0f}s ago; pool {pool.name} waits {after:g}s",
            waited=state.now - since,
            after=after,
        )
    return eviction_block(state.expand(pods), state, training=True)


def screen(state: State) -> Screening:
    """Consolidation candidates, cheapest to disrupt first, in pools whose budget allows one."""
    out = Screening()
    ok = []
    for name in sorted(state.nodes):
        node = state.nodes[name]
        block = consolidation_block(node, state)
        if block:
            out.kept[name] = block
        else:
            ok.append(node)
    ok.sort(key=lambda n: disruption_cost(n, state))
    budgets = {pool: state.budget(pool) for pool in {n.pool for n in ok}}
    for node in ok:
        status = budgets[node.pool]
        if status.allowed is not None and status.allowed <= 0:
            out.kept[node.name] = budget_reason(node.pool, status)
        else:
            out.candidates.append(node)
    return out


def evaluate(
    removed: Sequence[NodeView],
    state: State,
    *,
    allow_replace: bool,
    max_new_nodes: int | None,
    fixed: tuple[Replacement, ...] | None = None,
) -> Action | Reason:
    """The consolidation action removing exactly ``removed`` (or why there is none). With
    ``fixed`` the replacements are given (revalidation) instead of planned."""
    names = {n.name for n in removed}
    seed = [p for n in removed for p in state.pods_on[n.name]]
    evicted = state.expand(seed)
    block = eviction_block(evicted, state, training=True) or budget_block(state, removed, names)
    if block:
        return block
    targets = existing_targets(state, names, evicted)
    placed, left = place(evicted, targets)
    replacements: tuple[Replacement, ...] = ()
    added_rooms: list[Room] = []
    if fixed is not None and fixed and not left:
        return why(
            "does-not-fit", "state changed: the pods now fit without the planned replacement"
        )
    if left:
        if not allow_replace:
            return why(
                "does-not-fit",
                f"{plural(len(left), 'pod')} ({', '.join(p.name for p in left[:3])}"
                f"{'...' if len(left) > 3 else ''}) would not fit on the other nodes",
            )
        if fixed is not None:
            replacements = fixed
        else:
            pool_names = sorted({n.pool for n in removed})
            plan = plan_nodes(
                shapes(left),
                [state.pools[p] for p in pool_names],
                state.catalog,
                state.offerings,
                pool_usage=pool_usage(state, pool_names, names),
                time_limit=state.settings.plan_time_limit,
            )
            if plan.unplaceable or not plan.launches:
                return why(
                    "does-not-fit",
                    "the pods fit neither on the other nodes nor on new nodes the pool may launch",
                )
            replacements = tuple(Replacement.from_launch(la) for la in plan.launches)
        new_count = sum(r.count for r in replacements)
        if max_new_nodes is not None and new_count > max_new_nodes:
            return why(
                "does-not-fit",
                f"the pods would need {plural(new_count, 'new node')}; "
                f"at most {max_new_nodes} allowed here",
            )
        new = new_targets(replacements, state)
        if isinstance(new, Reason):
            return new
        added_rooms = new
        more, still_left = place(left, added_rooms)
        if still_left:
            return why("does-not-fit", "the pods do not fit on the planned replacement")
        placed.update(more)
    removed_cost = sum(n.price_per_hour for n in removed)
    new_cost = sum(r.hourly_cost for r in replacements)
    saving = removed_cost - new_cost
    settings = state.settings
    if replacements:
        minimum = max(settings.min_saving_per_hour, settings.min_saving_fraction * removed_cost)
        if saving < minimum - 1e-9:
            return why(
                "no-saving",
                f"the cheapest replacement costs {money(new_cost)} vs "
                f"{money(removed_cost)}; a replacement must save at least {money(minimum)}",
                saving=saving,
                minimum=minimum,
            )
    added: dict[str, int] = {}
    for rep in replacements:
        added[rep.pool] = added.get(rep.pool, 0) + rep.count
    block = floor_block(state, removed, added)
    if block:
        return block
    units = training_units(evicted)
    training_note = ""
    if units:
        touched = names | {p.node for p in evicted}
        basis = sum(state.nodes[n].price_per_hour for n in touched)
        needed = settings.training_saving_threshold * basis
        if saving < needed - 1e-9:
            return why(
                "training",
                f"preemptible training gang {', '.join(sorted(units))} is protected: "
                f"saving {money(saving)} < {settings.training_saving_threshold:.0%} of "
                f"{money(basis)} (the nodes it touches)",
                saving=saving,
                needed=needed,
            )
        training_note = (
            f"; restarts preemptible training gang {', '.join(sorted(units))} "
            f"(saving {saving / basis:.0%} ≥ {settings.training_saving_threshold:.0%} of the "
            "nodes it touches)"
        )
    return _action(
        removed, evicted, placed, added_rooms, replacements, saving, state, training_note
    )


def _action(
    removed: Sequence[NodeView],
    evicted: Sequence[PodView],
    placed: Mapping[str, str],
    added_rooms: Sequence[Room],
    replacements: tuple[Replacement, ...],
    saving: float,
    state: State,
    training_note: str,
) -> Action:
    node_text = ", ".join(n.describe() for n in removed)
    own = sum(len(state.pods_on[n.name]) for n in removed)
    pods_text = plural(own, "pod")
    owner = "its" if len(removed) == 1 else "their"
    new_names = {t.name for t in added_rooms}
    existing = sorted({t for t in placed.values() if t not in new_names})
    moved_new = sum(1 for t in placed.values() if t in new_names)
    gangs = requeue_gangs(evicted)
    gang_text = ""
    extra = len(evicted) - own
    if gangs:
        gang_text = f"; gang {', '.join(gangs)} restarts whole"
        if extra:
            gang_text += f" ({plural(extra, 'more pod')} evicted from other nodes)"
    if replacements:
        kind: ActionKind = "replace"
        reps = ", ".join(r.describe() for r in replacements)
        where = []
        if moved_new:
            suffix = "s" if len(new_names) > 1 else ""
            where.append(f"{plural(moved_new, 'pod')} to the new node{suffix}")
        if existing:
            moved_old = len(placed) - moved_new
            where.append(f"{plural(moved_old, 'pod')} to {', '.join(existing)}")
        text = (
            f"consolidation: replace {node_text} with {reps}, saving {money(saving)}: "
            f"moves {' and '.join(where)}"
        )
    else:
        kind = "delete"
        text = (
            f"consolidation: delete {node_text}: {owner} {pods_text} "
            f"{'fits' if own == 1 else 'fit'} on "
            f"{', '.join(existing)}, saving {money(saving)}"
        )
    return Action(
        kind=kind,
        nodes=tuple(n.name for n in removed),
        reason=text + gang_text + training_note,
        replacements=replacements,
        evict=tuple(p.name for p in evicted),
        requeue=gangs,
        saving_per_hour=saving,
        decided_at=state.now,
    )


def validate(state: State, action: Action) -> Validation:
    """Still valid: no new pods on the nodes, still candidates, and the pods still fit (on the
    planned replacements, if any) with the same protections, budgets and floors."""
    gone = missing_nodes(state, action.nodes)
    if gone:
        return Validation(False, gone)
    removed = [state.nodes[n] for n in action.nodes]
    arrived = new_pod_block(state, removed, action.evict)
    if arrived:
        return Validation(False, arrived)
    for node in removed:
        block = consolidation_block(node, state)
        if block:
            return Validation(False, block)
    result = evaluate(
        removed,
        state,
        allow_replace=bool(action.replacements),
        max_new_nodes=None,
        fixed=action.replacements,
    )
    if isinstance(result, Reason):
        return Validation(False, result)
    return Validation(True, Reason("valid", "still valid: " + result.reason))
