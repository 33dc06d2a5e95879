"""Quota-aware demand: which pending workloads governance would admit if the nodes were there.

The autoscaler provisions only for these — work within its team's quota, or within the team's
borrowing limits given what the other teams leave unused — never for work that would stay
pending for quota reasons however many nodes were added. Workloads are taken in the order the
admission cycle would take them (within quota first, then priority, then submit time), and
each one found admissible takes its quota on paper, so two workloads cannot both count on the
same unused quota.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from fleetshare.governance.admission import Engine, queue_key
from fleetshare.governance.snapshot import Snapshot
from fleetshare.governance.state import CycleState, usage_of
from fleetshare.model.catalog import ec2_name
from fleetshare.model.node import INSTANCE_TYPE_LABEL
from fleetshare.model.workload import Workload
from fleetshare.placement.predicate import label_value
from fleetshare.policy.schema import DEFAULT_FLAVOR


@dataclass(frozen=True, slots=True)
class Demand:
    """A pending workload worth new nodes, on ``flavor`` (nodes with ``node_selector``)."""

    workload: Workload
    flavor: str
    node_selector: Mapping[str, str]
    within_quota: bool


def flavor_selector(engine: Engine, flavor: str) -> dict[str, str]:
    """The labels a new node needs to count in ``flavor``."""
    model = engine.model
    if model.implicit_flavors:
        if flavor == DEFAULT_FLAVOR:
            return {}
        return {INSTANCE_TYPE_LABEL: ec2_name(flavor)}
    for candidate in model.flavors:
        if candidate.name == flavor:
            return dict(candidate.node_labels)
    return {}


def _compatible(wl: Workload, selector: Mapping[str, str]) -> bool:
    for podset in wl.podsets:
        for key, value in selector.items():
            wanted = podset.node_selector.get(key)
            if wanted is not None and label_value(key, wanted) != label_value(key, value):
                return False
    return True


def admissible_demand(
    engine: Engine,
    snapshot: Snapshot,
    nominated: Collection[str] = (),
    stuck: Collection[str] = (),
) -> tuple[list[Demand], dict[str, str]]:
    """Pending workloads quota would admit now, and why each of the others would not.

    ``nominated`` workloads (already waiting for nodes being launched) take their quota on
    paper but are not returned again. ``stuck`` workloads (no node can be bought for them,
    e.g. past a pool limit) are left out entirely, so they hold no quota on paper against the
    work behind them.
    """
    state = CycleState(engine.model, engine.policy.cluster, snapshot)
    out: list[Demand] = []
    blocked: dict[str, str] = {}
    teams = engine.model.teams

    def order(wl: Workload) -> tuple[object, ...]:
        if wl.team not in teams:
            return (2, *queue_key(wl))
        first = teams[wl.team].flavor_order[:1]
        within = bool(first) and state.within_nominal(
            wl.team, usage_of(wl, first * len(wl.podsets), teams[wl.team].charged)
        )
        return (0 if within else 1, *queue_key(wl))

    for wl in sorted(snapshot.pending, key=order):
        if wl.name in stuck:
            continue
        rules = teams.get(wl.team)
        if rules is None or not rules.enabled:
            blocked[wl.name] = f"team {wl.team!r} has no enabled quota"
            continue
        unavailable = rules.unavailable(wl)
        if unavailable is not None:
            blocked[wl.name] = unavailable
            continue
        problems = []
        for flavor in rules.flavor_order:
            selector = flavor_selector(engine, flavor)
            if not _compatible(wl, selector):
                continue
            usage = usage_of(wl, (flavor,) * len(wl.podsets), rules.charged)
            problem = state.quota_problem(wl.team, usage)
            if problem is not None:
                problems.append(problem)
                continue
            within = state.within_nominal(wl.team, usage)
            state.tree.add(wl.team, usage)
            if wl.name not in nominated:
                out.append(Demand(wl, flavor, selector, within))
            break
        else:
            blocked[wl.name] = "; ".join(problems) or "no flavor matches its node selector"
    return out, blocked
