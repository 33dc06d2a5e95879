"""The mutable working state of one admission cycle: quota usage and node free space.

Built fresh from a :class:`Snapshot` at the start of a cycle, changed as the cycle admits and
preempts, and thrown away at the end: the engine never mutates its inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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


@dataclass(slots=True, eq=False)
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
        self.by_team: dict[str, list[Admitted]] = {}
        self._by_team_flavor: dict[tuple[str, str], list[Admitted]] = {}
        self._share: dict[str, float] = {}
        self.version: dict[str, int] = {}
        """Per team, bumped whenever its usage changes (for callers' caches)."""
        self._pending_by_team: dict[str, list[Workload]] = {}
        for wl in snapshot.pending:
            self._pending_by_team.setdefault(wl.team, []).append(wl)
        for running in snapshot.running:
            self._load(running)
        self.warnings = self._oversubscription()

    def waiting_within(
        self, team: str, resource: str, room: int, above_priority: int | None
    ) -> bool:
        """Has ``team`` work still pending that asks for some but at most ``room`` of
        ``resource`` (with ``above_priority``: only work of a higher priority than that)?"""
        for wl in self._pending_by_team.get(team, ()):
            entry = self.admitted.get(wl.name)
            if entry is not None and not entry.removed:
                continue
            if above_priority is not None and wl.priority <= above_priority:
                continue
            asked = sum(ps.count * ps.requests.get(resource, 0) for ps in wl.podsets)
            if 0 < asked <= room:
                return True
        return False

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
        self._index(entry)
        if wl.team in self.model.teams:
            self.tree.add(wl.team, entry.usage)
        self.fit.apply(wl.podsets, entry.plan, 1)

    def _changed(self, team: str) -> None:
        self._share.pop(team, None)
        self.version[team] = self.version.get(team, 0) + 1

    def _index(self, entry: Admitted) -> None:
        team = entry.workload.team
        self.by_team.setdefault(team, []).append(entry)
        for flavor in dict.fromkeys(entry.flavors):
            self._by_team_flavor.setdefault((team, flavor), []).append(entry)

    def entries(self, team: str, flavors: Iterable[str]) -> list[Admitted]:
        """A team's admitted workloads that use any of ``flavors`` (each once)."""
        out: dict[int, Admitted] = {}
        for flavor in flavors:
            for entry in self._by_team_flavor.get((team, flavor), ()):
                out[id(entry)] = entry
        return list(out.values())

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
        self._index(entry)
        self._changed(entry.workload.team)
        self.tree.add(entry.workload.team, entry.usage)
        self.fit.apply(entry.workload.podsets, entry.plan, 1)

    def remove(self, entry: Admitted) -> None:
        """Give back a workload's quota and node resources (preemption)."""
        entry.removed = True
        self._changed(entry.workload.team)
        if entry.workload.team in self.model.teams:
            self.tree.add(entry.workload.team, entry.usage, -1)
        self.fit.apply(entry.workload.podsets, entry.plan, -1)

    def restore(self, entry: Admitted) -> None:
        """Undo :meth:`remove`."""
        entry.removed = False
        self._changed(entry.workload.team)
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

    def ceiling(self, team: str, fr: FR) -> float:
        """How much more the team may take under its own borrowing limits, whatever others do."""
        tree = self.tree
        node = self.model.nodes[team]
        headroom = tree.quota(team, fr) - tree.usage(team, fr)
        out = float("inf")
        limit = node.borrowing_limit.get(fr)
        if limit is not None:
            out = headroom + limit.amount
        percent = node.idle_percent.get(fr)
        if percent is not None:
            out = min(out, headroom + int(tree.idle_for(team, fr) * percent) // 100)
        return max(out, float(headroom))

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

    def dominant_share(self, team: str, extra: Mapping[FR, int] | None = None) -> float:
        """Weighted dominant resource share: max over resources of borrowed / lendable.

        With ``extra``, the share the team would have with that much more usage.
        """
        if extra is None and team in self._share:
            return self._share[team]
        tree = self.tree
        frs = set(self.model.nodes[team].quota) | set(tree.used_frs(team))
        if extra:
            frs |= extra.keys()
        share = 0.0
        for fr in frs & self.model.governed:
            used = tree.usage(team, fr) + (extra.get(fr, 0) if extra else 0)
            borrowed = used - tree.quota(team, fr)
            if borrowed > 0:
                share = max(share, borrowed / max(tree.lendable_pool(fr), 1))
        # A weight of 0 (HyperPod's default) ranks last, yet stays comparable between teams.
        share /= max(self.model.teams[team].weight, ZERO_WEIGHT)
        if extra is None:
            self._share[team] = share
        return share
