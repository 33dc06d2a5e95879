"""What the disruption methods see (:class:`~fleetshare.autoscaling.disruption.State`): the
managed Ready nodes and their pods on the wall clock (cron budgets), the PDBs with the pods
they lost, floors, do-not-disrupt and offerings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fleetshare.autoscaling.disruption import NodeView, Pdb, PodView, State
from fleetshare.autoscaling.settings import PdbSpec
from fleetshare.control.autoscaler.bounds import floors
from fleetshare.control.autoscaler.nodes import ManagedNode, NodeBook
from fleetshare.control.autoscaler.step import Moment
from fleetshare.governance.snapshot import Running
from fleetshare.model.workload import Workload
from fleetshare.placement.topology import constraint


def pod_views(entry: Running, offset: float) -> list[PodView]:
    """The disruption logic's view of a running workload's pods (times on the wall clock)."""
    wl = entry.workload
    kind = wl.labels.get("fleetshare.io/kind") or ("training" if wl.pod_count > 1 else "batch")
    preemptible = wl.labels.get("fleetshare.io/preemptible", "") == "true"
    out = []
    for podset, placement in zip(wl.podsets, entry.assignment.placement, strict=True):
        level, required = constraint(podset.required_topology, podset.preferred_topology)
        for node, count in placement:
            for i in range(count):
                out.append(
                    PodView(
                        name=f"{wl.name}/{podset.name}/{node}/{i}",
                        workload=wl.name,
                        team=wl.team,
                        node=node,
                        requests=podset.requests,
                        priority=wl.priority,
                        kind=kind,  # type: ignore[arg-type]
                        preemptible=preemptible,
                        gang=wl.name if wl.pod_count > 1 else None,
                        started_at=offset + entry.admitted_at,
                        node_selector=podset.node_selector,
                        tolerations=podset.tolerations,
                        affinity=podset.affinity,
                        labels=wl.labels,
                        podset=podset.name,
                        domain=level if podset.count > 1 else None,
                        domain_required=required,
                    )
                )
    return out


def _later(t: float, at: float | None) -> float | None:
    """``at`` on the wall clock (``t``: the wall-clock time of t = 0)."""
    return None if at is None else t + at


def node_view(m: ManagedNode, t: float) -> NodeView:
    """The disruption logic's view of a managed node (times on the wall clock)."""
    return NodeView(
        name=m.name,
        pool=m.pool,
        instance_type=m.instance.instance_type,
        zone=m.instance.zone,
        capacity_type=m.instance.capacity_type,
        price_per_hour=m.instance.price_per_hour,
        allocatable=m.node.allocatable,
        launched_at=t + m.instance.launched_at,
        ready=m.node.ready,
        healthy=m.unhealthy_since is None,
        unhealthy_since=_later(t, m.unhealthy_since),
        empty_since=_later(t, m.empty_since),
        labels=m.node.labels,
        taints=m.node.taints,
        pods_changed_at=_later(t, m.pods_changed_at),
        nominated_until=t + m.held_until if m.held_until > 0 else None,
    )


class DisruptionViews:
    """Builds the disruption state; a running workload's pod views are kept while it runs
    (they do not change), the step's node and pod views once per step."""

    def __init__(self, book: NodeBook, ran: set[str], pdbs: Sequence[PdbSpec]) -> None:
        self.book = book
        self.setup = book.setup
        self.ran = ran
        """Workloads that have run: pending again, they count as disrupted for their PDBs."""
        self.pdbs = list(pdbs)
        self._pod_views: dict[str, tuple[Running, list[PodView]]] = {}
        self._step: tuple[list[NodeView], list[PodView]] | None = None

    def forget(self) -> None:
        """The nodes changed (a new step; nominated room): build the views again."""
        self._step = None

    def state(
        self, at: Moment, exclude: set[str], disrupting: set[str], *, offerings: bool = True
    ) -> State:
        """What the disruption methods see at ``now`` (on the wall clock, for cron budgets):
        the Ready nodes but ``exclude``, their pods, the settings, PDBs with the pods they have
        lost, do-not-disrupt, floors and (for methods that buy replacements) offerings."""
        now = at.now
        if self._step is None:
            self._step = self._views(at.running)
        nodes, pods = self._step
        if exclude:
            nodes = [n for n in nodes if n.name not in exclude]
        setup = self.setup
        return State(
            nodes,
            pods,
            list(setup.pools.values()),
            now + setup.offset,
            disrupting=disrupting,
            pdbs=self._pdbs(at.pending) if self.pdbs else (),
            settings=setup.disruption,
            floors=floors(setup.pools, now, setup.settings.clock_start),
            do_not_disrupt=setup.do_not_disrupt,
            catalog=setup.catalog,
            offerings=setup.offerings(now) if offerings and nodes else (),
        )

    def _pdbs(self, pending: Sequence[Workload]) -> list[Pdb]:
        """The PDBs, each with the pods it covers that ran and now wait (disrupted)."""
        out = []
        for spec in self.pdbs:
            disrupted = sum(
                wl.pod_count
                for wl in pending
                if wl.name in self.ran
                and (
                    wl.name in spec.workloads
                    or (
                        bool(spec.selector)
                        and all(wl.labels.get(k) == v for k, v in spec.selector.items())
                    )
                )
            )
            out.append(spec.pdb(disrupted))
        return out

    def _views(self, running: Mapping[str, Running]) -> tuple[list[NodeView], list[PodView]]:
        """The disruption logic's view of the autoscaler's Ready nodes and their pods, on the
        wall clock (cron budgets)."""
        t = self.setup.offset
        nodes = [node_view(m, t) for m in self.book.live() if m.joined]
        names = {n.name for n in nodes}
        cache: dict[str, tuple[Running, list[PodView]]] = {}
        pods: list[PodView] = []
        for name, entry in running.items():
            found = self._pod_views.get(name)
            if found is None or found[0] is not entry:
                found = (entry, pod_views(entry, t))
            cache[name] = found
            pods.extend(p for p in found[1] if p.node in names)
        self._pod_views = cache
        return nodes, pods
