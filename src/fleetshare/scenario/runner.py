"""Replay a scenario on a virtual clock: the simulated backend of the control loop.

The :class:`Runner` is a :class:`~fleetshare.control.cluster.Cluster`: a
:class:`~fleetshare.control.state.ClusterState` (nodes, pending and running workloads, timers)
fed by a scenario (its submissions, node events and policy changes, set as timers; a simulated
cloud), whose sink (:meth:`Runner._record`) keeps each workload's record and the event log.
At each moment it applies the due timers, then lets the
:class:`~fleetshare.control.loop.ControlLoop` observe, decide and act through it until nothing
more changes at that moment. Preempted and evicted workloads go back to their queue with
their original submit time and, when admitted again, run their whole duration again (no
checkpointing).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, assert_never

from fleetshare.autoscaling.cloud import CloudProvider
from fleetshare.autoscaling.simulated_cloud import SimulatedCloud
from fleetshare.control.autoscaler import Autoscaler
from fleetshare.control.changes import (
    Admitted,
    AutoscalerEvent,
    Change,
    Finished,
    NodeJoined,
    NodeLeft,
    PendingReasonChanged,
    Preempted,
    Warned,
)
from fleetshare.control.clock import VirtualClock
from fleetshare.control.loop import ControlLoop
from fleetshare.control.state import FINISH, NODE, SUBMIT, WAKE, ClusterState
from fleetshare.governance.admission import CycleCache, Engine
from fleetshare.governance.snapshot import Running
from fleetshare.model.node import Node
from fleetshare.model.quantity import to_number
from fleetshare.model.reason import PendingReason, Reason
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import Policy
from fleetshare.scenario.loader import Scenario, ScenarioError, build_nodes
from fleetshare.scenario.schema import NodeEvent


@dataclass
class WorkloadRecord:
    """What happened to one workload."""

    workload: Workload
    state: str = "pending"
    submitted: bool = False
    admitted_at: float | None = None
    first_admitted_at: float | None = None
    finished_at: float | None = None
    preemptions: list[dict[str, Any]] = field(default_factory=list)
    borrowed: dict[str, int] = field(default_factory=dict)
    pending_reason: PendingReason | None = None
    """Why it waits: the engine's reason, plus the autoscaler's note when there is one."""
    queue_position: int | None = None
    engine_reason: PendingReason | None = None
    """The engine's latest reason alone (what a ``pending`` event is logged from)."""
    flavors: tuple[str, ...] = ()
    placement: tuple[tuple[tuple[str, int], ...], ...] = ()
    """Where the pods of its latest admission ran: per pod set, (node, pod count) pairs."""
    counts: tuple[int, ...] = ()
    """Pods per pod set at its latest admission (fewer than asked when partially admitted)."""


@dataclass
class RunResult:
    """The outcome of a run: per-workload records, the event log, the final cluster."""

    scenario: Scenario
    records: dict[str, WorkloadRecord]
    events: list[dict[str, Any]]
    nodes: dict[str, Node]
    running: dict[str, Running]
    end_time: float
    engine: Engine
    warnings: list[str]
    autoscaler: Autoscaler | None = None
    cloud: SimulatedCloud | None = None
    """The simulated cloud (its records are the bill)."""


MAX_RESTARTS_WITHOUT_PROGRESS = 500
"""A run stops with :class:`RunLimitError` when one workload is restarted (preempted, evicted,
its node interrupted or removed) more than this many times with no progress in between: no
workload finished and no input event came (a submission, a node event of the scenario, a policy
change). Its work then cannot end (e.g. spot nodes interrupted before it finishes, for ever)."""

MIN_HORIZON_SECONDS = 30 * 86_400.0
"""Without ``until``, a run also stops when no progress was made for this long (simulated time)
or for twice the longest workload's duration, whichever is more: nothing can still finish then,
and timed wake-ups alone would go on for ever."""


MAX_INSTANTS_PER_SECOND = 10_000
"""A run also stops when simulated time hardly moves: this many instants without progress
within one simulated second (wake-ups a nanosecond apart would take for ever to reach the next
event)."""


class RunLimitError(ScenarioError):
    """A run that cannot end: it went on without progress past a bound (the message says
    which, what still waits, and what the cluster did meanwhile)."""


class Runner(ClusterState):
    """The simulated cluster: a scenario's world and events, driven by the control loop."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        reference: bool = False,
        cloud: CloudProvider | None = None,
        billing: SimulatedCloud | None = None,
    ) -> None:
        """``cloud`` replaces the scenario's simulated cloud (e.g. an AWS adapter over a
        stubbed client); ``billing`` is then what the bill is read from."""
        super().__init__(self._record)
        self.scenario = scenario
        self.reference = reference
        """Run the engine as first written: nothing carried between cycles, no shortcuts in
        one (slow; the same decisions and report, for tests)."""
        self.cache = CycleCache()
        """Carried between this run's cycles (the engine's decisions do not depend on it)."""
        self.clock = VirtualClock()
        self.nodes = {n.name: n for n in scenario.nodes}
        self.namespaces = {n.name: dict(n.labels) for n in scenario.spec.cluster.namespaces}
        self.records = {w.name: WorkloadRecord(w) for w in scenario.workloads}
        self.events: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self._progress = False
        self._progress_at = 0.0
        self._second_began = 0.0
        self._in_second = 0
        self._restarts: dict[str, int] = {}
        """Restarts per workload since the last progress."""
        self.max_restarts = MAX_RESTARTS_WITHOUT_PROGRESS
        longest = max((w.duration or 0.0 for w in scenario.workloads), default=0.0)
        self.horizon = max(MIN_HORIZON_SECONDS, 2 * longest)
        """Simulated seconds without progress after which a run without ``until`` stops."""
        for wl in scenario.workloads:
            self.push(wl.submit_time, SUBMIT, wl)
        for event in scenario.events:
            self.push(event.at, NODE, event)
        for at, policy in scenario.policy_changes:
            self.push(at, NODE, policy)
        spec = scenario.spec
        self.cloud: SimulatedCloud | None = billing
        self.autoscaler: Autoscaler | None = None
        if spec.node_pools:
            if cloud is None:
                self.cloud = SimulatedCloud(spec.cloud.config(scenario.catalog))
                cloud = self.cloud
            self.autoscaler = Autoscaler(
                spec.node_pools,
                cloud,
                scenario.catalog,
                spec.autoscaler,
                pdbs=spec.pdbs,
                do_not_disrupt=spec.do_not_disrupt,
            )
            if reference:
                self.autoscaler.states = None
            self.autoscaled = True
            self.push(0.0, WAKE, None)  # floors and headroom from the start
        self.loop = ControlLoop(self, self._engine(scenario.policy), self.autoscaler)

    @property
    def engine(self) -> Engine:
        """The governance engine in force (the policy's)."""
        return self.loop.engine

    def _engine(self, policy: Policy) -> Engine:
        engine = Engine(policy, self.scenario.catalog)
        if self.reference:
            engine.shortcuts = False
        else:
            engine.cache = self.cache
        return engine

    def _log(self, at: float, event: str, **details: Any) -> None:
        self.events.append({"at": to_number_time(at), "event": event, **details})

    def _record(self, change: Change) -> None:
        """The run's sink: a change the loop made, in the workload's record and as an entry
        of the event log."""
        match change:
            case Admitted(workload=wl, assignment=assignment):
                self._admitted(change)
                partial = {}
                if assignment.counts:  # partial admission: the pods admitted
                    names = (ps.name for ps in wl.podsets)
                    partial["pods"] = dict(zip(names, assignment.counts, strict=True))
                borrowed = {k: to_number(v) for k, v in sorted(change.borrowed.items())}
                flavors = list(dict.fromkeys(assignment.flavors))
                self._log(
                    change.at, "admit", workload=wl.name, flavors=flavors, borrowed=borrowed,
                    **partial,
                )  # fmt: skip
            case Preempted():
                record = self.records[change.workload]
                record.state = "preempted"
                at = to_number_time(change.at)
                record.preemptions.append({"at": at, "by": change.by, "reason": change.reason})
                self._log(
                    change.at, "preempt", workload=change.workload, by=change.by,
                    reason=change.reason, message=change.message,
                )  # fmt: skip
                self._restarted(change.at, change.workload)
            case Finished():
                record = self.records[change.workload]
                record.state, record.finished_at = "finished", change.at
                self._log(change.at, "finish", workload=change.workload)
            case PendingReasonChanged():
                self._log(
                    change.at, "pending", workload=change.workload, reason=change.reason,
                    position=change.position,
                )  # fmt: skip
            case NodeJoined():
                self._log(change.at, "node", action="join", node=change.node)
            case NodeLeft():  # the loop logs the termination; the evictions are logged
                pass
            case Warned():
                self.warnings.append(f"t={change.at:g}: {change.message}")
            case AutoscalerEvent():
                self._log(change.at, change.event, **change.details)
            case _:
                assert_never(change)

    def _admitted(self, change: Admitted) -> None:
        """An admission in the workload's record."""
        wl, assignment, now = change.workload, change.assignment, change.at
        record = self.records[wl.name]
        record.state, record.admitted_at = "admitted", now
        if record.first_admitted_at is None:
            record.first_admitted_at = now
        record.borrowed = dict(change.borrowed)
        record.flavors = assignment.flavors
        record.placement = assignment.placement
        record.counts = assignment.counts or tuple(ps.count for ps in wl.podsets)

    # -- the clock -------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Process every event (up to ``until``) and return the result."""
        now = 0.0
        until = self.scenario.until
        while (at := self.next_timer()) is not None:
            now = at
            if until is not None and now > until:
                now = until
                break
            self.clock.advance_to(now)
            self._progress = False
            while (timer := self.pop_timer(now)) is not None:
                self._apply(now, timer[1], timer[2])
            self.loop.reconcile(now)
            self._count_progress(now)
            self._settled(now)
        self._final_reasons()
        return RunResult(
            self.scenario,
            self.records,
            self.events,
            self.nodes,
            self.running,
            now,
            self.engine,
            list(dict.fromkeys(self.warnings)),
            self.autoscaler,
            self.cloud,
        )

    def _count_progress(self, now: float) -> None:
        """Stop a run that goes on without progress (see :data:`MAX_RESTARTS_WITHOUT_PROGRESS`
        and :data:`MIN_HORIZON_SECONDS`)."""
        if now - self._second_began >= 1.0:
            self._second_began, self._in_second = now, 0
        self._in_second += not self._progress  # input may come that fast, wake-ups may not
        if self._in_second > MAX_INSTANTS_PER_SECOND:
            raise RunLimitError(
                self._stopped(
                    now, f"{self._in_second:,} instants within one simulated second passed"
                )
            )
        if self._progress:
            self._progress_at = now
            self._restarts.clear()
        elif self.scenario.until is None and now - self._progress_at > self.horizon:
            raise RunLimitError(self._stopped(now, f"{_span(now - self._progress_at)} passed"))

    def _restarted(self, now: float, name: str) -> None:
        count = self._restarts[name] = self._restarts.get(name, 0) + 1
        if count > self.max_restarts:
            raise RunLimitError(
                self._stopped(now, f"{name} was restarted {count:,} times", first=name)
            )

    def _stopped(self, now: float, what: str, first: str | None = None) -> str:
        """Why a run was stopped: what happened, what still waits, what the cluster did."""
        since = self._progress_at
        parts = [
            f"{self.scenario.name}: run stopped at t={now:g} s: {what} since t={since:g} s "
            "with no workload finishing and no input event, so the work left cannot end "
            f"(limits: {self.max_restarts:,} restarts of one workload, "
            f"{_span(self.horizon)} without progress, {MAX_INSTANTS_PER_SECOND:,} instants in "
            "a simulated second)"
        ]
        stuck = [*sorted(self.pending), *sorted(self.running)]
        if first is None and stuck:
            first = stuck[0]
        if first is not None:
            record = self.records[first]
            recent = [p["reason"] for p in record.preemptions if p["at"] >= since]
            causes = ", ".join(f"{n:,} {r}" for r, n in Counter(recent).most_common(3))
            more = f" ({len(stuck) - 1:,} more waiting or running)" if len(stuck) > 1 else ""
            waiting = self.waiting.get(first)
            why = f"; waits: {waiting.reason}" if waiting else ""
            restarts = f", restarts: {causes}" if causes else ""
            parts.append(f"{first} is {record.state}{more}{restarts}{why}")
        if self.autoscaler is not None:
            launched = [
                m for m in self.autoscaler.nodes.values() if m.instance.launched_at >= since
            ]
            interrupted = sum(1 for m in launched if m.termination_category == "spot-interruption")
            if launched:
                spot = f", {interrupted:,} of them interrupted (spot)" if interrupted else ""
                nodes = "1 node was" if len(launched) == 1 else f"{len(launched):,} nodes were"
                parts.append(f"{nodes} launched meanwhile{spot}")
        return "; ".join(parts)

    def _settled(self, now: float) -> None:
        """Called after each moment is settled (a hook for progress reports)."""

    def _apply(self, now: float, kind: int, payload: Any) -> None:
        if kind == WAKE:
            return  # time passing alone is no change: a guard that expires is its own reason
        if kind != FINISH:
            self.loop.world_changed()  # a submission, a node or a policy change
        if kind != FINISH and not isinstance(payload, Node):
            self._progress = True  # an input event (a launched node joining is none)
        if kind == SUBMIT:
            wl: Workload = payload
            self.pending.put(wl)
            self.records[wl.name].submitted = True
            self._log(now, "submit", workload=wl.name, team=wl.team, pods=wl.pod_count)
        elif kind == FINISH:
            if self.finish_due(now, payload):
                self._progress = True
                self.loop.world_changed()  # (a finish of a run that was preempted is none)
        elif isinstance(payload, Node):  # a launched node joins the cluster
            if self.loop.node_ready(payload.name):
                self.join(payload, now)
        elif isinstance(payload, Policy):
            self.loop.set_engine(self._engine(payload))
            self._log(now, "policy", teams=[t.name for t in payload.teams])
        else:
            self._node_event(now, payload)

    def _node_event(self, now: float, event: NodeEvent) -> None:
        if event.action == "add":
            assert event.add is not None
            start = sum(1 for n in self.nodes if n.startswith(event.add.name or ""))
            for node in build_nodes(event.add, self.scenario.catalog, start):
                self.nodes[node.name] = node
                self._log(now, "node", action="add", node=node.name)
            return
        for name in event.nodes:
            found = self.nodes.get(name)
            if found is None:
                self.warn(now, f"node event {event.action} names unknown {name}")
                continue
            node = found
            self._log(now, "node", action=event.action, node=name)
            if event.action in ("cordon", "uncordon"):
                self.cordon(name, event.action == "cordon")
            elif event.action == "recover":
                self.nodes[name] = node.with_state(ready=True, healthy=True)
            else:  # fail or remove: the node's workloads are evicted and requeued
                if event.action == "fail":
                    self.nodes[name] = node.with_state(ready=False)
                elif event.action == "gpu-unhealthy":
                    self.nodes[name] = node.with_state(healthy=False)
                else:
                    del self.nodes[name]
                    self.loop.node_gone(name, now, Reason("removed", "removed"))
                reason = "node-removed" if event.action == "remove" else "node-failure"
                self.evict_from(name, reason, "", now)

    # -- the Cluster backend: what differs from the shared state ---------------------------

    def busy(self, now: float) -> bool:
        """Endless work (no duration) running alone keeps no one busy: with no ``until`` the
        run ends when nothing else is left to do (timed wake-ups, such as a pool's daily
        schedule, would otherwise go on for ever)."""
        until = self.scenario.until
        return (
            bool(self.pending)
            or any(r.workload.duration is not None for r in self.running.values())
            or (until is not None and now < until)
            or self.expecting()
        )

    def _final_reasons(self) -> None:
        """Each waiting workload's reason and queue position in its record, as of the last
        cycle (cycles with a cache report only the reasons that changed)."""
        self.loop.last_cycle = None
        self.settle_positions()
        for name, waiting in self.waiting.items():
            record = self.records[name]
            record.pending_reason, record.queue_position = waiting.reason, waiting.position
            record.engine_reason = waiting.engine


def _span(seconds: float) -> str:
    """``36 h`` / ``30 days`` for messages."""
    hours = seconds / 3600
    return f"{hours:,.3g} h" if hours < 48 else f"{hours / 24:,.3g} days"


def to_number_time(t: float) -> int | float:
    """Times print as ints when whole."""
    return int(t) if float(t).is_integer() else t


class ProgressRunner(Runner):
    """The scenario runner, reporting the simulated time (at most every ``every`` seconds of
    wall time) after each instant is settled."""

    def __init__(
        self, scenario: Scenario, report: Callable[[float], None] | None, every: float = 0.25
    ) -> None:
        super().__init__(scenario)
        self._report = report
        self._every = every
        self._last = time.monotonic()  # the first report after ``every`` seconds

    def _settled(self, now: float) -> None:
        if self._report is not None:
            tick = time.monotonic()  # paces the display only; no decision reads it
            if tick - self._last >= self._every:
                self._last = tick
                self._report(now)


def run_scenario(scenario: Scenario) -> RunResult:
    """Run a loaded scenario to the end (one with services runs through
    :mod:`fleetshare.simulate.services`, which follows their traffic)."""
    if scenario.spec.services:
        raise ScenarioError(
            f"{scenario.name}: has services; `fleetshare scenario run` and `fleetshare "
            "simulate` run them (replicas follow their traffic)"
        )
    return Runner(scenario).run()


__all__ = [
    "MAX_INSTANTS_PER_SECOND",
    "MAX_RESTARTS_WITHOUT_PROGRESS",
    "MIN_HORIZON_SECONDS",
    "ProgressRunner",
    "RunLimitError",
    "RunResult",
    "Runner",
    "WorkloadRecord",
    "run_scenario",
    "to_number",
    "to_number_time",
]
