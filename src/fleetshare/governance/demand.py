"""Quota-aware demand: which pending workloads governance would admit if the nodes were there.

The autoscaler provisions only for these — work within its team's quota, or within the team's
borrowing limits given what the other teams leave unused — never for work that would stay
pending for quota reasons however many nodes were added, nor for pods no node can hold as
asked (1.5 GPUs: neither whole GPUs nor a share of one). Workloads are taken in the order the
admission cycle would take them (within quota first, then priority, then submit time), and
each one found admissible takes its quota on paper, so two workloads cannot both count on the
same unused quota.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from fleetshare.governance.admission import Engine, queue_key
from fleetshare.governance.quota import FR, Charging
from fleetshare.governance.snapshot import Snapshot
from fleetshare.governance.state import CycleState, StateCache, podset_usage, usage_of
from fleetshare.model.catalog import ec2_name
from fleetshare.model.node import INSTANCE_TYPE_LABEL
from fleetshare.model.reason import PendingReason, joined
from fleetshare.model.workload import PodSet, Workload
from fleetshare.placement.gpu_slots import request_problem
from fleetshare.placement.predicate import label_value
from fleetshare.policy.schema import DEFAULT_FLAVOR

NO_FLAVOR = PendingReason("no flavor matches its node selector", "no-node", ("no-flavor-matches",))
"""Why quota would not admit a workload none of whose team's flavors its pod sets match."""


@dataclass(frozen=True, slots=True)
class Demand:
    """A pending workload worth new nodes: pod set i on ``flavors[i]``, on nodes with
    ``node_selectors[i]``."""

    workload: Workload
    flavors: tuple[str, ...]
    node_selectors: tuple[Mapping[str, str], ...]
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


def _compatible(podset: PodSet, selector: Mapping[str, str]) -> bool:
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
    cache: StateCache | None = None,
) -> tuple[list[Demand], dict[str, PendingReason]]:
    """Pending workloads quota would admit now, and why each of the others would not (each
    reason keyed where it is composed: by the team's rules, the quota, or here).

    ``nominated`` workloads (already waiting for nodes being launched) take their quota on
    paper but are not returned again. ``stuck`` workloads (no node can be bought for them,
    e.g. past a pool limit) are left out entirely, so they hold no quota on paper against the
    work behind them. ``cache`` (one per sequence of snapshots) builds the state from the
    previous call's by difference instead of from scratch: the same state, so the same answer.
    """
    if cache is None:
        state = CycleState(engine.model, engine.policy.cluster, snapshot)
    else:
        state = cache.state(engine.model, engine.policy.cluster, snapshot)
    out: list[Demand] = []
    blocked: dict[str, PendingReason] = {}
    teams = engine.model.teams
    selectors: dict[str, dict[str, str]] = {}

    def order(wl: Workload) -> tuple[object, ...]:
        if wl.team not in teams:
            return (2, *queue_key(wl))
        first = teams[wl.team].flavor_order[:1]
        within = bool(first) and state.within_nominal(
            wl.team, usage_of(wl, first * len(wl.podsets), teams[wl.team].charging)
        )
        return (0 if within else 1, *queue_key(wl))

    for wl in sorted(snapshot.pending, key=order):
        if wl.name in stuck:
            continue
        rules = teams.get(wl.team)
        if rules is None or not rules.enabled:
            blocked[wl.name] = PendingReason(
                f"team {wl.team!r} has no enabled quota", "refused", ("no-quota-policy", wl.team)
            )
            continue
        refusal = rules.refusal(wl, snapshot.namespaces)
        if refusal is not None:
            blocked[wl.name] = refusal
            continue
        unavailable = rules.unavailable(wl) or _unservable(wl, engine.model.quota_only)
        if unavailable is not None:
            blocked[wl.name] = unavailable
            continue
        for flavor in rules.flavor_order:
            if flavor not in selectors:
                selectors[flavor] = flavor_selector(engine, flavor)
        per = [
            tuple(f for f in rules.flavor_order if _compatible(ps, selectors[f]))
            for ps in wl.podsets
        ]
        problems: list[PendingReason] = []
        found: tuple[str, ...] | None = None
        for flavor in per[0]:  # every pod set on one flavor, in the team's order
            if any(flavor not in other for other in per[1:]):
                continue
            flavors = (flavor,) * len(wl.podsets)
            problem = state.quota_problem(wl.team, usage_of(wl, flavors, rules.charging))
            if problem is None:
                found = flavors
                break
            problems.append(problem)
        if found is None and any(other != per[0] for other in per[1:]):
            # pod sets on different flavors: Kueue's assignment (see flavors.py)
            missing = [ps.name for ps, flavors in zip(wl.podsets, per, strict=True) if not flavors]
            if missing:
                problems.append(
                    PendingReason(
                        f"no flavor matches the node selector of pod set {missing[0]!r}",
                        "no-node",
                        ("no-flavor-matches", missing[0]),
                    )
                )
            else:
                found, short = _assign(state, wl, per, rules.charging)
                if short is not None:
                    problems.append(short)
                    found = None
        if found is None:
            # each problem once already (each names its flavor or pod set): joined keeps the words
            blocked[wl.name] = joined(problems) if problems else NO_FLAVOR
            continue
        usage = usage_of(wl, found, rules.charging)
        within = state.within_nominal(wl.team, usage)
        state.tree.add(wl.team, usage)
        if wl.name not in nominated:
            out.append(Demand(wl, found, tuple(selectors[f] for f in found), within))
    return out, blocked


def _unservable(wl: Workload, quota_only: frozenset[str]) -> PendingReason | None:
    """Why no node, bought or not, can ever hold a pod of ``wl`` as asked (a GPU request
    neither whole nor a share of one GPU; part of a MIG slice); None when nodes could."""
    for podset in wl.podsets:
        problem = request_problem(podset.requests, quota_only)
        if problem is not None:
            return PendingReason(
                f"pod set {podset.name!r} asks {problem}",
                "refused",
                ("unplaceable-request", podset.name),
            )
    return None


def _assign(
    state: CycleState,
    wl: Workload,
    per: list[tuple[str, ...]],
    charging: Charging,
) -> tuple[tuple[str, ...], PendingReason | None]:
    """Pod set by pod set, the first compatible flavor whose quota takes it on top of the pod
    sets before it; and why the workload is short of quota (None: it is not)."""
    taken: dict[FR, int] = {}
    chosen: list[str] = []
    for podset, flavors in zip(wl.podsets, per, strict=True):
        first: PendingReason | None = None
        for flavor in flavors:
            need = podset_usage(podset, flavor, charging)
            trial = {fr: taken.get(fr, 0) + v for fr, v in need.items()}
            problem = state.quota_problem(wl.team, trial)
            if problem is None:
                break
            first = first or problem
        else:
            assert first is not None  # every pod set has a compatible flavor (checked before)
            return (), first.wrapped(f"pod set {podset.name!r}: {first}", "pod-set", podset.name)
        chosen.append(flavor)
        for fr, v in need.items():
            taken[fr] = taken.get(fr, 0) + v
    return tuple(chosen), None
