"""The :class:`Autoscaler` facade: the parts of the autoscaler wired together, the methods the
control loop and the backends call, and :meth:`Autoscaler.step`, which runs the step's
decision and carries out the launches it decides on (:mod:`.cloud_calls`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fleetshare.autoscaling.cloud import CloudProvider, Instance
from fleetshare.autoscaling.disruption import DisruptionSettings, DoNotDisrupt
from fleetshare.autoscaling.nodepool import NODES, NodePool
from fleetshare.autoscaling.provisioner import Plan
from fleetshare.autoscaling.settings import AutoscalerSpec, DoNotDisruptSpec, PdbSpec
from fleetshare.control.autoscaler import cloud_calls
from fleetshare.control.autoscaler.bounds import Bounds
from fleetshare.control.autoscaler.disruption import Disruptor
from fleetshare.control.autoscaler.disruption_views import DisruptionViews
from fleetshare.control.autoscaler.headroom import Headroom, WarmPool
from fleetshare.control.autoscaler.launching import Decision, Launcher
from fleetshare.control.autoscaler.nodes import ManagedNode, NodeBook
from fleetshare.control.autoscaler.provisioning import Provisioner
from fleetshare.control.autoscaler.room import pods_on
from fleetshare.control.autoscaler.setup import Setup, launchable
from fleetshare.control.autoscaler.step import Moment, Step
from fleetshare.control.changes import AutoscalerNote
from fleetshare.governance.admission import Engine
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.governance.state import StateCache
from fleetshare.model.catalog import Catalog
from fleetshare.model.node import Node
from fleetshare.model.reason import Keyed, PendingReason, Reason
from fleetshare.model.workload import Workload


class Autoscaler:
    """Karpenter-style provisioning and disruption against a (simulated) cloud."""

    def __init__(
        self,
        pools: Sequence[NodePool],
        cloud: CloudProvider,
        catalog: Catalog,
        settings: AutoscalerSpec | None = None,
        *,
        pdbs: Sequence[PdbSpec] = (),
        do_not_disrupt: DoNotDisruptSpec | None = None,
    ) -> None:
        self.cloud = cloud
        self.catalog = catalog
        pinned = (do_not_disrupt or DoNotDisruptSpec()).do_not_disrupt()
        self.setup = Setup.of(pools, catalog, settings or AutoscalerSpec(), cloud, pinned)
        self.book = NodeBook(self.setup)
        self.launcher = Launcher(self.book)
        self.headroom = Headroom(self.book, pools)
        self.provisioner = Provisioner(self.launcher, self.headroom)
        self.bounds = Bounds(self.launcher)
        self.ran: set[str] = set()
        """Workloads that have run (for the PDBs they lost and the under-provision metric)."""
        self.views = DisruptionViews(self.book, self.ran, pdbs)
        self.disruptor = Disruptor(self.views, self.headroom, self.launcher)
        # fixed at the start, and the parts' records changed in place only: read here as they are
        self.disruption_settings: DisruptionSettings = self.setup.disruption
        self.do_not_disrupt: DoNotDisrupt = self.setup.do_not_disrupt
        self.nodes: dict[str, ManagedNode] = self.book.nodes
        """Every node launched or adopted, by name (terminated ones too)."""
        self.warm: dict[str, WarmPool] = self.headroom.warm
        """Pools with warm capacity, by name."""
        self.waited_for_nodes: set[str] = self.launcher.waited_for_nodes
        """Workloads that nodes were launched for (for the time-to-capacity metric)."""
        self.short_since: dict[str, float] = self.provisioner.short_since
        """Workload -> the first step, before its first admission, at which quota would have
        admitted it but no node had room: under-provisioning."""
        self.plans: list[Plan] = self.provisioner.plans
        """Every plan made."""

    # -- what the backends read and set ---------------------------------------------------------

    @property
    def pools(self) -> dict[str, NodePool]:
        """The node pools by name."""
        return self.setup.pools

    @property
    def settings(self) -> AutoscalerSpec:
        """The autoscaler's settings."""
        return self.setup.settings

    @settings.setter
    def settings(self, value: AutoscalerSpec) -> None:
        self.setup.settings = value

    @property
    def pdbs(self) -> list[PdbSpec]:
        """The pod disruption budgets."""
        return self.views.pdbs

    @pdbs.setter
    def pdbs(self, value: list[PdbSpec]) -> None:
        self.views.pdbs = value

    @property
    def states(self) -> StateCache | None:
        """Builds each step's governance state from the last one's (None: from scratch)."""
        return self.provisioner.states

    @states.setter
    def states(self, value: StateCache | None) -> None:
        self.provisioner.states = value

    @property
    def blocked(self) -> dict[str, Reason]:
        """Node -> why the latest voluntary disruption pass kept it."""
        return self.disruptor.blocked

    @property
    def unplaceable(self) -> dict[str, Keyed]:
        """Workload -> why no pool can run it (latest planning)."""
        return self.provisioner.unplaceable

    @property
    def quota_blocked(self) -> dict[str, PendingReason]:
        """Pending workload -> the quota reason no node is launched for it."""
        return self.provisioner.quota_blocked

    # -- bookkeeping ---------------------------------------------------------------------------

    def live(self) -> list[ManagedNode]:
        """Nodes launched and not terminated."""
        return self.book.live()

    def manages(self, name: str) -> bool:
        """The node was launched by this autoscaler (it may be terminated by now)."""
        return name in self.book.nodes

    def joined(self, name: str) -> bool:
        """The node's launch latency passed: True when it joins the cluster (it was not
        terminated meanwhile)."""
        return self.book.joined(name)

    def terminated(self, name: str, now: float, reason: Reason) -> None:
        """The node is gone: terminate its instance (if not already) and record why."""
        managed = self.book.terminated(name, now, reason)
        if managed is not None:
            cloud_calls.terminate(self.cloud, managed.instance.id, now)
            self.provisioner.node_gone()

    def set_pools(self, pools: Sequence[NodePool]) -> None:
        """The pools changed (the operator's NodePool objects): decide with these from now
        on. A pool that is gone but still has nodes is kept with a limit of zero nodes (it
        launches nothing) until emptiness or consolidation has removed them."""
        new = {p.name: p for p in pools}
        for name in dict.fromkeys(m.pool for m in self.live()):
            old = self.setup.pools.get(name)
            if name not in new and old is not None:
                new[name] = old.model_copy(update={"limits": {**old.limits, NODES: "0"}})
        self.setup.pools = new
        self.setup.launchable = launchable(self.setup.catalog, pools)
        self.disruptor.last_signature = None
        self.provisioner.seen.clear()  # pending work is planned again under the new pools

    def adopt(self, name: str, instance: Instance, reason: str, *, joined: bool) -> bool:
        """Take over a node launched before a restart (the operator's NodeClaims and the
        service's store remember it): managed again, consolidated, expired or interrupted
        like any other; later launches do not reuse its name. False when its pool is
        unknown or the name is taken (the caller removes it)."""
        pool = self.setup.pools.get(instance.pool)
        if pool is None or name in self.book.nodes:
            return False
        managed = self.book.add(instance, pool, reason, (), name)
        managed.joined = joined
        return True

    def number_after(self, number: int) -> None:
        """Name later launches past ``POOL-TYPE-number`` (nodes so named exist elsewhere)."""
        self.book.seq = number

    def kept(self, name: str, reason: Reason) -> None:
        """The backend could not remove ``name`` (its drain was refused): it stays, and the
        next disruption pass looks at it again."""
        self.disruptor.kept(name, reason)

    def retry_due(self) -> bool:
        """Work no node could be bought for waits, and a node went away since: planning it
        again now may succeed (room under a pool or account limit)."""
        return self.provisioner.retry_stuck and bool(self.provisioner.unplaceable)

    def note(self, workload: str) -> AutoscalerNote | None:
        """What the autoscaler is doing about a pending workload, for "why pending"."""
        return self.notes([workload]).get(workload)

    def notes(self, workloads: Iterable[str]) -> dict[str, AutoscalerNote]:
        """:meth:`note` of each workload that has one, in one pass over the launching nodes."""
        provisioner = self.provisioner
        return self.book.notes(workloads, provisioner.unplaceable, provisioner.quota_blocked)

    # -- the step ------------------------------------------------------------------------------

    def step(
        self,
        now: float,
        engine: Engine,
        nodes: Mapping[str, Node],
        running: Mapping[str, Running],
        pending: Sequence[Workload],
    ) -> Step:
        """One pass of the control loop at ``now`` (see :mod:`fleetshare.control.autoscaler`):
        the decision runs, the launches it asks for are carried out as it asks."""
        out = Step()
        decision = self.decide(Moment(now, running, pending), engine, nodes, out)
        cloud_calls.drive(decision, self.cloud, now)
        return out

    def decide(
        self, at: Moment, engine: Engine, nodes: Mapping[str, Node], out: Step
    ) -> Decision[None]:
        """The step's decision, into ``out``: observe, repair, provision, floors and ceilings,
        finished replacements, emptiness, voluntary disruption. It changes nothing in the
        cloud: it yields each launch it decides on and is sent back what came of it."""
        now, running, pending = at.now, at.running, at.pending
        self.views.forget()
        self.ran.update(running)
        pods = pods_on(running)
        self.book.observe(now, nodes, pods, out)
        self.disruptor.repair(at, out)
        snapshot = Snapshot(now, list(nodes.values()), list(running.values()), list(pending))
        yield from self.provisioner.provision(now, engine, snapshot, self.ran, out)
        yield from self.bounds.keep(now, pods, out)
        self.disruptor.finish_replacements(now, out)
        self.views.forget()  # provisioning and replacements nominated nodes' room
        self.disruptor.emptiness(at, out)
        yield from self.disruptor.disrupt(at, out)
