"""The mutable working state of one admission cycle: quota usage and node free space.

Built fresh from a :class:`Snapshot` at the start of a cycle, changed as the cycle admits and
preempts, and thrown away at the end: the engine never mutates its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fleetshare.governance.quota import FR, QuotaModel
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.governance.tree import QuotaTree
from fleetshare.model.quantity import format_quantity
from fleetshare.model.workload import Workload
from fleetshare.placement.fit import NodeFit, PlacementPlan
from fleetshare.policy.schema import ClusterPolicy

ZERO_WEIGHT = 1e-6
"""Fair-share weight used in place of 0, so zero-weight teams still compare with each other."""


def usage_of(workload: Workload, flavors: Sequence[str]) -> dict[FR, int]:
    """What a workload requests, per (flavor, resource), with pod set i on ``flavors[i]``."""
    out: dict[FR, int] = {}
    for flavor, podset in zip(flavors, workload.podsets, strict=True):
        for resource, amount in podset.requests.items():
            key = (flavor, resource)
            out[key] = out.get(key, 0) + amount * podset.count
    return out


@dataclass(slots=True)
class Admitted:
    """A workload holding resources during the cycle (running before, or admitted in it)."""

    workload: Workload
    flavors: tuple[str, ...]
    usage: dict[FR, int]
    plan: PlacementPlan
    admitted_at: float
    this_cycle: bool = False
    removed: bool = field(default=False)


def amount(fr: FR, value: int) -> str:
    """``2 nvidia.com/gpu`` for messages."""
    return f"{format_quantity(value, fr[1])} {fr[1]}"


class CycleState:
    """Quota tree + node fit + the admitted workloads, kept consistent with each other."""

    def __init__(self, model: QuotaModel, cluster: ClusterPolicy, snapshot: Snapshot) -> None:
        self.model = model
        self.cluster = cluster
        self.now = snapshot.now
        self.flavor_of = {n.name: model.flavor_of(n) for n in snapshot.nodes}
        capacity: dict[FR, int] = {}
        flavors_with_nodes: set[str] = set()
        for node in snapshot.nodes:
            flavor = self.flavor_of[node.name]
            if not node.schedulable or flavor is None:
                continue
            flavors_with_nodes.add(flavor)
            for resource, value in node.allocatable.items():
                key = (flavor, resource)
                capacity[key] = capacity.get(key, 0) + value
        self.capacity = capacity
        self.flavors_with_nodes = flavors_with_nodes
        self.tree = QuotaTree(model, capacity, cluster.idle_resource_sharing)
        self.fit = NodeFit(snapshot.nodes, self.flavor_of)
        self.admitted: dict[str, Admitted] = {}
        for running in snapshot.running:
            self._load(running)
        self.warnings = self._oversubscription()

    def _load(self, running: Running) -> None:
        wl = running.workload
        flavors = running.assignment.flavors
        entry = Admitted(
            wl,
            flavors,
            usage_of(wl, flavors),
            self.fit.plan_of(running.assignment.placement),
            running.admitted_at,
        )
        self.admitted[wl.name] = entry
        if wl.team in self.model.teams:
            self.tree.add(wl.team, entry.usage)
        self.fit.apply(wl.podsets, entry.plan, 1)

    def _oversubscription(self) -> list[str]:
        out = []
        for fr in sorted(self.model.governed):
            allocated = self.tree.allocated.get(fr, 0)
            cap = self.capacity.get(fr, 0)
            if allocated > cap:
                out.append(
                    f"quotas for {fr[1]} on {fr[0]} add up to {format_quantity(allocated, fr[1])} "
                    f"but Ready, schedulable nodes offer {format_quantity(cap, fr[1])}: "
                    "guaranteed work may wait for capacity"
                )
        return out

    # -- changes ---------------------------------------------------------------------------

    def admit(self, entry: Admitted) -> None:
        """Take a workload's quota and node resources."""
        self.admitted[entry.workload.name] = entry
        self.tree.add(entry.workload.team, entry.usage)
        self.fit.apply(entry.workload.podsets, entry.plan, 1)

    def remove(self, entry: Admitted) -> None:
        """Give back a workload's quota and node resources (preemption)."""
        entry.removed = True
        if entry.workload.team in self.model.teams:
            self.tree.add(entry.workload.team, entry.usage, -1)
        self.fit.apply(entry.workload.podsets, entry.plan, -1)

    def restore(self, entry: Admitted) -> None:
        """Undo :meth:`remove`."""
        entry.removed = False
        if entry.workload.team in self.model.teams:
            self.tree.add(entry.workload.team, entry.usage)
        self.fit.apply(entry.workload.podsets, entry.plan, 1)

    # -- quota questions -------------------------------------------------------------------

    def within_nominal(self, team: str, usage: Mapping[FR, int]) -> bool:
        """True when the request stays inside the team's own guaranteed quota."""
        tree = self.tree
        return all(
            tree.usage(team, fr) + value <= tree.quota(team, fr)
            for fr, value in usage.items()
            if value > 0 and fr in self.model.governed
        )

    def quota_problem(self, team: str, usage: Mapping[FR, int]) -> str | None:
        """None when quota and borrowing rules allow the request, else why not."""
        tree = self.tree
        node = self.model.nodes[team]
        for fr, value in usage.items():
            if value <= 0 or fr not in self.model.governed:
                continue
            used = tree.usage(team, fr)
            quota = tree.quota(team, fr)
            available = tree.available(team, fr)
            borrow_after = max(0, used + value - quota)
            if available < value:
                return self._explain_short(team, fr, value, used, quota, available, borrow_after)
            percent = node.idle_percent.get(fr)
            if borrow_after > 0 and percent is not None:
                idle = tree.idle_for(team, fr)
                limit = int(idle * percent) // 100
                if borrow_after > limit:
                    return (
                        f"borrow limit for {fr[1]} on {fr[0]}: would borrow "
                        f"{format_quantity(borrow_after, fr[1])}, limit "
                        f"{format_quantity(limit, fr[1])} ({percent:g}% of "
                        f"{format_quantity(idle, fr[1])} idle)"
                    )
        return None

    def _explain_short(
        self, team: str, fr: FR, value: int, used: int, quota: int, available: int, borrow: int
    ) -> str:
        q = format_quantity
        res, flavor = fr[1], fr[0]
        if used + value <= quota:
            return (
                f"{team}'s quota of {amount(fr, quota)} on {flavor} is lent out: "
                f"{q(available, res)} available now, needs {q(value, res)}"
            )
        limit = self.model.nodes[team].borrowing_limit.get(fr)
        if limit is not None and borrow > limit.amount:
            if limit.amount == 0 and not self.model.nodes[team].can_borrow:
                return (
                    f"needs {amount(fr, value)} on {flavor} but only "
                    f"{q(max(0, quota - used), res)} of quota {q(quota, res)} is unused, and "
                    f"{limit.why}"
                )
            return (
                f"borrow limit for {res} on {flavor}: would borrow {q(borrow, res)}, limit "
                f"{q(limit.amount, res)} ({limit.why})"
            )
        pool = self.tree.pool_available(fr)
        return (
            f"not enough idle {res} on {flavor}: needs {q(value, res)}, {team} may take "
            f"{q(available, res)} (quota {q(quota, res)}, {q(used, res)} in use, "
            f"{q(max(0, pool), res)} idle in the cluster)"
        )

    def dominant_share(self, team: str) -> float:
        """Weighted dominant resource share: max over resources of borrowed / lendable."""
        weight = self.model.teams[team].weight
        share = 0.0
        for fr in self.model.nodes[team].quota.keys() | self._borrowed_frs(team):
            borrowed = self.tree.borrowed(team, fr)
            if borrowed <= 0:
                continue
            lendable = self.tree.lendable_pool(fr)
            ratio = borrowed / max(lendable, 1)
            share = max(share, ratio)
        # A weight of 0 (HyperPod's default) ranks last, yet stays comparable between teams.
        return share / max(weight, ZERO_WEIGHT)

    def _borrowed_frs(self, team: str) -> set[FR]:
        return set(self.tree.used_frs(team))
