"""The control loop: observe the cluster, decide with governance and the autoscaler, act.

One :meth:`ControlLoop.reconcile` settles a moment: admission cycles run until nothing more
changes (preempted work is retried at once), then the autoscaler takes one step; when that
step evicted work (a node removed), admission runs again. Admissions are *assumed* until the
moment is settled, as in Kueue's cache: a later cycle of the same moment that preempts one
*forgets* it instead (it waits again, never started only to be stopped); then the backend
carries the moment's admissions out (:meth:`~fleetshare.control.cluster.Cluster.settle`).
Every decision is a pure function of what was observed and ``now``; the backend
(:class:`~fleetshare.control.cluster.Cluster`) and the cloud carry the effects out. The same
loop drives the simulator (virtual clock), the service and the Kubernetes operator (wall
clock).
"""

from __future__ import annotations

from fleetshare.control.autoscaler import Autoscaler, Step
from fleetshare.control.cluster import Cluster, RemovalRefused
from fleetshare.governance.admission import Engine
from fleetshare.governance.fair_admission import UsageLedger, queue_weights
from fleetshare.governance.snapshot import CycleResult, Snapshot
from fleetshare.governance.state import CAPACITY_BELOW_QUOTA
from fleetshare.model.reason import Reason

MAX_CYCLES_PER_INSTANT = 20
"""A safety net: admission cycles (and autoscaler rounds) at one moment."""


class ControlLoop:
    """Governance and, when configured, the autoscaler over one cluster backend."""

    def __init__(
        self, cluster: Cluster, engine: Engine, autoscaler: Autoscaler | None = None
    ) -> None:
        self.cluster = cluster
        self.engine = engine
        self.autoscaler = autoscaler
        self.last_cycle: CycleResult | None = None
        self.preempted_by: dict[str, set[str]] = {}
        """Per workload preempted since the world last changed, by whom (``Snapshot``)."""
        self.preempted_at: dict[str, float] = {}
        """When each of those was last preempted."""
        self.assumed: set[str] = set()
        """The workloads admitted at the moment being settled (not carried out yet)."""
        self.fair_usage: UsageLedger | None = None
        """Local queues' usage, for teams with admission fair sharing (``fair_admission``)."""
        self._fair_teams: set[str] = set()
        self._follow_fair_usage()

    def set_engine(self, engine: Engine) -> None:
        """A new policy: the next cycle decides with it."""
        self.engine = engine
        self._follow_fair_usage()
        self.world_changed()

    def _follow_fair_usage(self) -> None:
        """Keep a usage ledger while some team orders its work by it (the usage measured so
        far is kept across policy changes)."""
        settings = self.engine.policy.cluster.admission_fair_sharing
        self._fair_teams = {n for n, r in self.engine.model.teams.items() if r.fair_admission}
        if settings is None or not self._fair_teams:
            self.fair_usage = None
        elif self.fair_usage is None:
            self.fair_usage = UsageLedger(settings)
        else:
            self.fair_usage.settings = settings

    def world_changed(self) -> None:
        """Something changed besides the loop's own decisions (a submission, a finish, a node
        or policy change): work preempted before may preempt, and be preempted, again."""
        self.preempted_by.clear()
        self.preempted_at.clear()

    def node_ready(self, name: str) -> bool:
        """A launched node finished booting: True when it may join (it was not terminated
        meanwhile). Nodes the autoscaler does not manage always may."""
        return self.autoscaler is None or self.autoscaler.joined(name)

    def node_gone(self, name: str, now: float, reason: Reason) -> None:
        """A node left the cluster outside the loop (removed by an admin, lost)."""
        self.world_changed()
        if self.autoscaler is not None:
            self.autoscaler.terminated(name, now, reason)

    # -- the loop ------------------------------------------------------------------------------

    def reconcile(self, now: float) -> None:
        """Settle the moment ``now``: admit until stable, then autoscale, and again while the
        autoscaler evicts work."""
        try:
            for _ in range(MAX_CYCLES_PER_INSTANT):
                self.admit(now)
                if self.autoscaler is None or not self.autoscale(now):
                    break
        finally:
            self.assumed.clear()
            self.cluster.settle(now)

    def admit(self, now: float) -> None:
        """Admission cycles until one changes nothing; ask to be woken when a time-based
        guard expires."""
        cluster = self.cluster
        result: CycleResult | None = None
        ledger = self.fair_usage
        weights: dict[str, float] = {}
        if ledger is not None:
            ledger.advance(now)
            weights = queue_weights(self.engine.policy)
        for _ in range(MAX_CYCLES_PER_INSTANT):
            if not cluster.admitting():
                break  # the backend takes no more admissions now (it wakes the loop)
            result = self.engine.cycle(
                Snapshot(
                    now,
                    cluster.node_list(),
                    list(cluster.running_workloads().values()),
                    cluster.pending_for_cycle(),
                    {name: frozenset(by) for name, by in self.preempted_by.items()},
                    frozenset(self.preempted_at),
                    ledger.scores(weights) if ledger is not None else {},
                    cluster.namespace_labels(),
                )
            )
            for warning in result.warnings:
                # quotas above the nodes are expected while an autoscaler adds nodes
                if self.autoscaler is None or warning.category != CAPACITY_BELOW_QUOTA:
                    cluster.warn(now, warning.message)
            self.apply(now, result)
            if ledger is not None:
                for admission in result.admissions:
                    if admission.workload.team in self._fair_teams:
                        ledger.admitted(admission.workload)
            if not result.admissions and not result.preemptions:
                break
        if ledger is not None:
            running = (r.workload for r in cluster.running_workloads().values())
            ledger.observe(running, self._fair_teams)
        if result is not None and result.wake_at is not None and result.wake_at > now:
            cluster.wake(result.wake_at, now, unless_sooner=True)

    def apply(self, now: float, result: CycleResult) -> None:
        """Carry out one cycle's decisions: evictions first (forgetting the admissions of
        this moment), then bindings (assumed until the moment is settled)."""
        cluster = self.cluster
        for preemption in result.preemptions:
            name = preemption.workload.name
            self.preempted_by.setdefault(name, set()).add(preemption.by)
            self.preempted_at[name] = now
            if name in self.assumed:
                self.assumed.discard(name)
                cluster.forget(preemption.workload, now)
            else:
                cluster.evict(
                    preemption.workload, preemption.by, preemption.reason, preemption.message,
                    now,
                )  # fmt: skip
        cluster.bind_all(result.admissions, now)
        if result.admissions:
            running = cluster.running_workloads()
            names = (a.workload.name for a in result.admissions)
            self.assumed.update(name for name in names if name in running)
        self.last_cycle = result
        cluster.report_pending(result, now)

    def autoscale(self, now: float) -> bool:
        """One autoscaler step; True when it evicted work (admission must run again) or asked
        to step again at once."""
        autoscaler, cluster = self.autoscaler, self.cluster
        assert autoscaler is not None
        step: Step = autoscaler.step(
            now,
            self.engine,
            {n.name: n for n in cluster.node_list()},
            cluster.running_workloads(),
            list(cluster.pending_workloads()),
        )
        for entry in step.log:
            details = dict(entry)
            cluster.log(now, details.pop("event"), **details)
        for ready_at, node in step.joins:
            cluster.join_node(node, max(ready_at, now))
        evicted = False
        removed = False
        for name, reason in step.removals:
            if not autoscaler.manages(name) and name not in {n.name for n in cluster.node_list()}:
                continue
            cluster.log(now, "node", action="terminate", node=name, reason=reason.message)
            try:
                evicted = cluster.remove_node(name, reason, now) or evicted
            except RemovalRefused as exc:
                cluster.log(now, "node", action="kept", node=name, reason=str(exc))
                autoscaler.kept(name, Reason("drain-refused", str(exc)))
                continue
            autoscaler.terminated(name, now, reason)
            removed = True
        if removed:
            self.world_changed()  # a node went away
        notes = autoscaler.notes(w.name for w in cluster.pending_workloads())
        for name, note in notes.items():
            cluster.note_pending(name, note)
        busy = cluster.busy(now)
        for at in {*step.wake, *(step.wake_if_busy if busy else ())}:
            cluster.wake(at, now)
        return evicted or step.again or (removed and autoscaler.retry_due())
