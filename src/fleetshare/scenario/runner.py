"""Replay a scenario on a virtual clock: the simulated backend of the control loop.

The :class:`Runner` is a :class:`~fleetshare.control.cluster.Cluster`: it holds the simulated
world (nodes, pending and running workloads, a simulated cloud) and an event queue of what
happens to it (submissions, finishes, node events, policy changes, nodes joining, wake-ups).
At each moment it applies those events, then lets the
:class:`~fleetshare.control.loop.ControlLoop` observe, decide and act through it until nothing
more changes at that moment. Preempted and evicted workloads go back to their queue with
their original submit time and, when admitted again, run their whole duration again (no
checkpointing).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

from fleetshare.autoscaling.cloud import CloudProvider
from fleetshare.autoscaling.simulated_cloud import SimulatedCloud
from fleetshare.control.autoscaler import Autoscaler
from fleetshare.control.changes import (
    Admitted,
    AutoscalerEvent,
    AutoscalerNote,
    Change,
    Finished,
    NodeJoined,
    NodeLeft,
    PendingReasonChanged,
    Preempted,
    Warned,
    loop_time,
    preemptor_team,
)
from fleetshare.control.clock import VirtualClock
from fleetshare.control.loop import ControlLoop
from fleetshare.governance.admission import CycleCache, Engine
from fleetshare.governance.queues import PendingBook, PendingView, new_in_substance, same_nodes
from fleetshare.governance.snapshot import Admission, CycleResult, Pending, Running
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


# at one instant: finishes, then node changes, then submits, then wake-ups
_FINISH, _NODE, _SUBMIT, _WAKE = 0, 1, 2, 3


class Runner:
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
        self.scenario = scenario
        self.reference = reference
        """Run the engine as first written: nothing carried between cycles, no shortcuts in
        one (slow; the same decisions and report, for tests)."""
        self.cache = CycleCache()
        """Carried between this run's cycles (the engine's decisions do not depend on it)."""
        self.clock = VirtualClock()
        self._node_view: tuple[Node, ...] = ()
        self.nodes: dict[str, Node] = {n.name: n for n in scenario.nodes}
        self._namespaces = {n.name: dict(n.labels) for n in scenario.spec.cluster.namespaces}
        self.records = {w.name: WorkloadRecord(w) for w in scenario.workloads}
        self.pending = PendingBook()
        self.running: dict[str, Running] = {}
        self.events: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self._queue: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._finish_version: dict[str, int] = {}
        self._wakes: set[float] = set()
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
            self._push(wl.submit_time, _SUBMIT, wl)
        for event in scenario.events:
            self._push(event.at, _NODE, event)
        for at, policy in scenario.policy_changes:
            self._push(at, _NODE, policy)
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
            self._push(0.0, _WAKE, None)  # floors and headroom from the start
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

    def _push(self, at: float, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, kind, self._seq, payload))

    def _log(self, at: float, event: str, **details: Any) -> None:
        self.events.append({"at": to_number_time(at), "event": event, **details})

    def _record(self, change: Change) -> None:
        """The run's sink: a change the loop made, as an entry of the event log."""
        match change:
            case Admitted(workload=wl, assignment=assignment):
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
                self._log(
                    change.at, "preempt", workload=change.workload, by=change.by,
                    reason=change.reason, message=change.message,
                )  # fmt: skip
            case Finished():
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

    # -- the clock -------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Process every event (up to ``until``) and return the result."""
        now = 0.0
        until = self.scenario.until
        while self._queue:
            now = self._queue[0][0]
            if until is not None and now > until:
                now = until
                break
            self.clock.advance_to(now)
            self._progress = False
            while self._queue and self._queue[0][0] == now:
                _, kind, _, payload = heapq.heappop(self._queue)
                self._apply(now, kind, payload)
            self.loop.reconcile(now)
            self._count_progress(now)
            self._settled(now)
        self._final_positions()
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
            why = f"; waits: {record.pending_reason}" if record.pending_reason else ""
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
        if kind == _WAKE:
            return  # time passing alone is no change: a guard that expires is its own reason
        if kind != _FINISH:
            self.loop.world_changed()  # a submission, a node or a policy change
        if kind != _FINISH and not isinstance(payload, Node):
            self._progress = True  # an input event (a launched node joining is none)
        if kind == _SUBMIT:
            wl: Workload = payload
            self.pending.put(wl)
            self.records[wl.name].submitted = True
            self._log(now, "submit", workload=wl.name, team=wl.team, pods=wl.pod_count)
        elif kind == _FINISH:
            name, version = payload
            if self._finish_version.get(name) == version and name in self.running:
                del self.running[name]
                record = self.records[name]
                record.state, record.finished_at = "finished", now
                self._record(Finished(now, name))
                self._progress = True
                self.loop.world_changed()  # (a finish of a run that was preempted is none)
        elif isinstance(payload, Node):  # a launched node joins the cluster
            if self.loop.node_ready(payload.name):
                self.nodes[payload.name] = payload
                self._record(NodeJoined(now, payload.name))
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
                self.warnings.append(f"t={now:g}: node event {event.action} names unknown {name}")
                continue
            node = found
            self._log(now, "node", action=event.action, node=name)
            if event.action == "cordon":
                self.nodes[name] = node.with_state(unschedulable=True)
            elif event.action == "uncordon":
                self.nodes[name] = node.with_state(unschedulable=False)
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
                self._evict_from(now, name, reason)

    def _evict_from(self, now: float, node: str, reason: str, message: str = "") -> None:
        for running in list(self.running.values()):
            on_node = node in running.assignment.nodes
            if on_node:
                self._requeue(now, running.workload, by=node, reason=reason, message=message)

    def _requeue(self, now: float, wl: Workload, by: str, reason: str, message: str = "") -> None:
        del self.running[wl.name]
        self._finish_version[wl.name] = self._finish_version.get(wl.name, 0) + 1
        self.pending.put(wl)
        record = self.records[wl.name]
        record.state = "preempted"
        record.preemptions.append({"at": to_number_time(now), "by": by, "reason": reason})
        by_team = preemptor_team(by, self.running, self.pending)
        self._record(Preempted(now, wl.name, wl.team, by, by_team, reason, message))
        self._restarted(now, wl.name)

    # -- the Cluster backend: what the control loop observes -----------------------------

    def node_list(self) -> tuple[Node, ...]:
        """The nodes as a tuple, the same object as last time when no node changed (the
        engine's cache then knows at a glance that its node state still holds)."""
        self._node_view = same_nodes(tuple(self.nodes.values()), self._node_view)
        return self._node_view

    def running_workloads(self) -> dict[str, Running]:
        return self.running

    def pending_workloads(self) -> list[Workload]:
        return list(self.pending.values())

    def pending_for_cycle(self) -> PendingView:
        """The pending workloads, with what changed since the last cycle (so that the
        engine's cache need not compare the whole lists)."""
        return self.pending.view(self)

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        return self._namespaces

    def busy(self, now: float) -> bool:
        """Endless work (no duration) running alone keeps no one busy: with no ``until`` the
        run ends when nothing else is left to do (timed wake-ups, such as a pool's daily
        schedule, would otherwise go on for ever)."""
        until = self.scenario.until
        return (
            bool(self.pending)
            or any(r.workload.duration is not None for r in self.running.values())
            or (until is not None and now < until)
            or any(k != _WAKE for _, k, _, _ in self._queue)
        )

    # -- ... and how it acts -------------------------------------------------------------------

    def evict(self, workload: Workload, by: str, reason: str, message: str, now: float) -> None:
        self._requeue(now, workload, by=by, reason=reason, message=message)

    def admitting(self) -> bool:
        return True

    def bind_all(self, admissions: Sequence[Admission], now: float) -> None:
        for admission in admissions:
            self.bind(admission, now)

    def bind(self, admission: Admission, now: float) -> None:
        wl = admission.workload
        self.pending.take(wl.name)
        self.running[wl.name] = Running(wl, admission.assignment, now)
        record = self.records[wl.name]
        record.state, record.admitted_at = "admitted", now
        if record.first_admitted_at is None:
            record.first_admitted_at = now
        record.borrowed = dict(admission.borrowed)
        record.pending_reason = record.queue_position = record.engine_reason = None
        record.flavors = admission.assignment.flavors
        record.placement = admission.assignment.placement
        record.counts = admission.assignment.counts or tuple(ps.count for ps in wl.podsets)
        self._record(Admitted(now, wl, admission.assignment, admission.borrowed))
        if wl.duration is not None:
            version = self._finish_version.get(wl.name, 0) + 1
            self._finish_version[wl.name] = version
            self._push(now + wl.duration, _FINISH, (wl.name, version))

    def report_pending(self, result: CycleResult, now: float) -> None:
        changed = result.pending_changed
        if changed is not None and self.autoscaler is None:
            # the others keep the reason they had: only their queue positions may differ,
            # and those are set at the end of the run (_final_positions)
            reports: Iterable[tuple[str, Pending]] = (
                (name, result.pending[name]) for name in changed
            )
        else:
            reports = result.pending.items()
        for name, pending in reports:
            record = self.records[name]
            last = record.engine_reason
            if new_in_substance(last, pending.reason):
                # logged when the reason changes, not when only its numbers do (usage moving
                # under a waiting job would log it every cycle); the record keeps the latest.
                # Compared with the engine's last reason, not the record's (which carries the
                # autoscaler's note: comparing with it logged every waiting job every cycle)
                change = PendingReasonChanged(
                    now, name, pending.workload.team, pending.reason, pending.position
                )
                self._record(change)
            record.engine_reason = record.pending_reason = pending.reason
            record.queue_position = pending.position

    def note_pending(self, workload: str, note: AutoscalerNote) -> None:
        record = self.records[workload]
        text = note.message(loop_time)
        if record.pending_reason and text not in record.pending_reason:
            record.pending_reason = record.pending_reason.noted(text)

    def join_node(self, node: Node, at: float) -> None:
        self._push(at, _NODE, node)

    def remove_node(self, name: str, reason: Reason, now: float) -> bool:
        before = len(self.running)
        self.nodes.pop(name, None)
        message = reason.details
        self._evict_from(now, name, reason.category, message)
        return len(self.running) < before

    def wake(self, at: float, now: float, *, unless_sooner: bool = False) -> None:
        if unless_sooner and self._queue and self._queue[0][0] <= at:
            return
        if at > now and at not in self._wakes:
            self._wakes.add(at)
            self._push(at, _WAKE, None)

    def warn(self, now: float, message: str) -> None:
        self._record(Warned(now, message))

    def log(self, now: float, event: str, **details: Any) -> None:
        self._record(AutoscalerEvent(now, event, details))

    def _final_positions(self) -> None:
        """Cycles with a cache report only the pending workloads whose reason changed; the
        others' queue positions are set here, from the last cycle (as if set every cycle)."""
        last, self.loop.last_cycle = self.loop.last_cycle, None
        if last is None or last.pending_changed is None or self.autoscaler is not None:
            return
        for name, pending in last.pending.items():
            if name in self.pending:
                self.records[name].queue_position = pending.position


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
