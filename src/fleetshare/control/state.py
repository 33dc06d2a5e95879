"""One cluster state under the backends: nodes, running work, the pending book, why each
pending workload waits, and timers, with each rule a backend follows when it acts written once.

Modelled on Karpenter's ``state.Cluster`` (``pkg/controllers/state/cluster.go``): one shared
picture of the cluster that every controller reads and updates. A backend (the scenario
runner, the service's embedded cluster) is a :class:`ClusterState` plus what its world says
(a scenario's events, the service's store and API) and a sink: every change the state makes is
handed to the sink as a typed :data:`~fleetshare.control.changes.Change`, which the sink turns
into its own words (the runner's records and event log, the service's rows and metrics).

The rules, each in one method: bind (take from the pending book, run, set the finish timer,
``Admitted``); requeue on eviction (its finish timer dropped, back in the pending book,
``Preempted`` with the preemptor's team); evict the work of a node that left or failed; a
finish timer that still holds (``Finished``); a pending reason reported when it changed in
substance (:func:`~fleetshare.governance.queues.new_in_substance` against the engine's last
reason, not the one carrying the autoscaler's note: ``PendingReasonChanged``); the autoscaler's
note added once; a node joining (``NodeJoined``) or leaving (``NodeLeft``, its work evicted);
"wake unless sooner".

Timers are one heap. At one instant they apply in this order: :data:`FINISH` (a workload's
run ends), :data:`NODE` (a node joins; a scenario's node events and policy changes),
:data:`SUBMIT` (work arrives; a service's scaler ticks), :data:`WAKE` (the loop asked to be
woken); within a kind, in the order they were set. A finish timer carries the version of the
run it ends: an eviction, a cancellation or a finish drops the version, so a timer of an
earlier run does nothing (versions come from one counter and are never reused).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

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
from fleetshare.governance.queues import PendingBook, new_in_substance, same_nodes
from fleetshare.governance.snapshot import Admission, CycleResult, Pending, Running
from fleetshare.model.node import Node
from fleetshare.model.reason import Gist, PendingReason, Reason
from fleetshare.model.workload import Workload

FINISH, NODE, SUBMIT, WAKE = 0, 1, 2, 3
"""Timer kinds, in the order they apply at one instant."""

Timer = tuple[float, int, Any]
"""A due timer: (time, kind, payload)."""


@dataclass(frozen=True, slots=True)
class FinishTimer:
    """The payload of a :data:`FINISH` timer: ``workload``'s run number ``version`` ends."""

    workload: str
    version: int


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a pending workload waits and its position in its team's queue: ``reason`` as shown
    (the engine's, with the autoscaler's note when there is one), ``engine`` the engine's
    alone (what a change in substance is judged against), ``note`` the key of the
    autoscaler's last note of this wait (:attr:`AutoscalerNote.gist`: what a new note is
    judged against)."""

    reason: PendingReason
    position: int
    engine: PendingReason
    note: Gist | None = None

    def shows(self, pending: Pending) -> bool:
        """Whether this is ``pending``'s reason and position already (with an autoscaler,
        most are, every cycle: the entry is kept)."""
        return self.reason is pending.reason and self.position == pending.position


class ClusterState:
    """Nodes, running and pending work, waiting reasons and timers; the shared half of a
    :class:`~fleetshare.control.cluster.Cluster` backend. Every change goes to ``sink``."""

    def __init__(self, sink: Callable[[Change], None]) -> None:
        self.nodes: dict[str, Node] = {}
        self.running: dict[str, Running] = {}
        self.pending = PendingBook()
        self.waiting: dict[str, Waiting] = {}
        """Why each pending workload a cycle reported waits (set by :meth:`report_pending`)."""
        self.namespaces: dict[str, dict[str, str]] = {}
        """The namespaces with their labels (what namespace selectors match)."""
        self.blocked: set[str] = set()
        """Pending workloads no cycle may admit now (the operator's: a write of theirs is
        outstanding or was refused); they stay in the pending book."""
        self.autoscaled = False
        """An autoscaler notes the pending workloads after each cycle: every cycle then sets
        each one's reason again (the earlier note goes), not only those that changed."""
        self.when: Callable[[float], str] = loop_time
        """How the backend writes a time in words (in the autoscaler's notes)."""
        self._sink = sink
        self._held: list[Change] | None = None
        """The changes since the first admission of the instant being reconciled, until
        :meth:`settle` (None: changes go to the sink at once)."""
        self._assumed: dict[str, Waiting | None] = {}
        """The workloads admitted at this instant, with why each waited before."""
        self._timers: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._versions: dict[str, int] = {}
        self._version = itertools.count(1)
        self._wakes: set[float] = set()
        self._node_view: tuple[Node, ...] = ()
        self._unsettled: CycleResult | None = None

    def _emit(self, change: Change) -> None:
        if self._held is None:
            self._sink(change)
        else:
            self._held.append(change)

    # -- timers ------------------------------------------------------------------------------

    def push(self, at: float, kind: int, payload: Any) -> None:
        """Set a timer of ``kind`` at ``at``."""
        self._seq += 1
        heapq.heappush(self._timers, (at, kind, self._seq, payload))

    def next_timer(self) -> float | None:
        """When the earliest timer is due."""
        return self._timers[0][0] if self._timers else None

    def pop_timer(self, now: float) -> Timer | None:
        """The earliest timer when it is due by ``now`` (removed), else None."""
        if not self._timers or self._timers[0][0] > now:
            return None
        at, kind, _, payload = heapq.heappop(self._timers)
        if kind == WAKE:
            self._wakes.discard(at)
        return at, kind, payload

    def due(self, now: float) -> list[Timer]:
        """Pop the timers due by ``now``, in order."""
        return list(iter(lambda: self.pop_timer(now), None))

    def expecting(self) -> bool:
        """True while a timer other than a wake-up is set."""
        return any(kind != WAKE for _, kind, _, _ in self._timers)

    def clear_timers(self) -> None:
        """Drop every timer (nothing more happens)."""
        self._timers.clear()
        self._wakes.clear()

    def _schedule_finish(self, workload: Workload, at: float | None) -> None:
        """A new run of ``workload``, ending at ``at`` (None: it runs until stopped)."""
        version = self._versions[workload.name] = next(self._version)
        if at is not None:
            self.push(at, FINISH, FinishTimer(workload.name, version))

    def finish_due(self, at: float, timer: FinishTimer) -> bool:
        """A finish timer fired: the workload finishes unless its run was stopped since (its
        version moved on). True when it finished."""
        name = timer.workload
        if self._versions.get(name) != timer.version or name not in self.running:
            return False
        del self.running[name]
        del self._versions[name]
        self._emit(Finished(at, name))
        return True

    # -- what a backend's world says ---------------------------------------------------------

    def resume(self, running: Running, finish_at: float | None) -> None:
        """Work admitted before (a restart, a what-if's start, an admission the world shows)
        runs, ending at ``finish_at`` (None: until stopped); it waits no more."""
        name = running.workload.name
        if self.pending.take(name) is not None:
            self.waiting.pop(name, None)
        self.running[name] = running
        self._schedule_finish(running.workload, finish_at)

    def read(self, running: Mapping[str, Running], pending: Iterable[Workload]) -> None:
        """The world read whole afresh (the operator's view after a policy change): these
        run and these wait, in this order; what else ran or waited is gone, with its
        waiting reason (no change is told: the world says so already)."""
        for name in [n for n in self.running if n not in running]:
            self.cancel(name)
        self.running.clear()
        self.running.update(running)
        for name in list(self.pending):
            self.pending.take(name)
        for workload in pending:
            self.pending.put(workload)
        for name in [n for n in self.waiting if n not in self.pending]:
            del self.waiting[name]

    def cancel(self, name: str) -> bool:
        """Drop a workload that was cancelled or deleted, running or pending; True when it
        held resources or waited."""
        if name in self.running:
            del self.running[name]
            self._versions.pop(name, None)
            return True
        if self.pending.take(name) is None:
            return False
        self.waiting.pop(name, None)
        return True

    def join(self, node: Node, at: float) -> None:
        """A node joins the cluster."""
        self.nodes[node.name] = node
        self._emit(NodeJoined(at, node.name))

    def cordon(self, name: str, on: bool = True) -> None:
        """Cordon (``on``) or uncordon a node: a cordoned node takes no new work (it is not
        schedulable); what runs there stays. An unknown node is ignored (it left meanwhile)."""
        node = self.nodes.get(name)
        if node is not None and node.unschedulable != on:
            self.nodes[name] = node.with_state(unschedulable=on)

    def evict_from(self, node: str, reason: str, message: str, now: float) -> bool:
        """Evict (:meth:`evict`) every workload with pods on ``node``, by the node, for
        ``reason``; True when there was one."""
        found = [r.workload for r in self.running.values() if node in r.assignment.nodes]
        for workload in found:
            self.evict(workload, node, reason, message, now)
        return bool(found)

    def settle_positions(self) -> None:
        """The queue positions of the waiting workloads the last cycle did not report (their
        reason unchanged), as of that cycle: computed on demand, when a backend shows them."""
        result, self._unsettled = self._unsettled, None
        if result is None:
            return
        pending, changed = result.pending, set(result.pending_changed or ())
        for name, waiting in self.waiting.items():
            if name in pending and name not in changed:
                position = pending[name].position
                if position != waiting.position:
                    self.waiting[name] = replace(waiting, position=position)

    # -- the Cluster protocol: observe -------------------------------------------------------

    def node_list(self) -> tuple[Node, ...]:
        """The nodes as a tuple, the same object as last time when no node changed (the
        engine's cache then knows at a glance that its node state still holds)."""
        self._node_view = same_nodes(tuple(self.nodes.values()), self._node_view)
        return self._node_view

    def running_workloads(self) -> dict[str, Running]:
        return self.running

    def pending_workloads(self) -> list[Workload]:
        """The pending workloads but the :attr:`blocked`."""
        if not self.blocked:
            return list(self.pending.values())
        return [w for n, w in self.pending.items() if n not in self.blocked]

    def pending_for_cycle(self) -> Sequence[Workload]:
        """The pending workloads but the :attr:`blocked`, with what changed since the last
        cycle (so that the engine's cache need not compare the whole lists; with some
        blocked, a plain list it compares in full)."""
        view = self.pending.view(self)
        if not self.blocked:
            return view
        return [w for w in view if w.name not in self.blocked]

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        return self.namespaces

    def busy(self, now: float) -> bool:
        return bool(self.pending or self.running)

    # -- ... and act -------------------------------------------------------------------------

    def admitting(self) -> bool:
        return True

    def bind_all(self, admissions: Sequence[Admission], now: float) -> None:
        for admission in admissions:
            self.bind(admission, now)

    def bind(self, admission: Admission, now: float) -> None:
        """Start an admitted workload on its nodes: assumed at once (running, no longer
        pending), carried out (``Admitted`` to the sink, with every change after it) at
        :meth:`settle`, unless :meth:`forget` undoes it first."""
        workload = admission.workload
        self.pending.take(workload.name)
        if self._held is None:
            self._held = []
        self._assumed[workload.name] = self.waiting.pop(workload.name, None)
        self.running[workload.name] = Running(workload, admission.assignment, now)
        self._emit(Admitted(now, workload, admission.assignment, admission.borrowed))
        duration = workload.duration
        self._schedule_finish(workload, None if duration is None else now + duration)

    def evict(self, workload: Workload, by: str, reason: str, message: str, now: float) -> None:
        self._requeue(workload, by, reason, message, now)

    def assumed(self) -> Collection[str]:
        """The workloads admitted at this instant, not carried out yet (until :meth:`settle`)."""
        return self._assumed.keys()

    def forget(self, workload: Workload, now: float) -> None:
        """Undo an admission of this instant (Kueue's cache "forget"): the workload waits
        again, with the reason it had, as if it had not been admitted; no change says it
        ran or stopped."""
        name = workload.name
        self.unbind(workload)
        waiting = self._assumed.pop(name, None)
        if waiting is not None:
            self.waiting[name] = waiting
        assert self._held is not None, "only an admission of this instant is forgotten"
        self._held = [
            c for c in self._held if not (isinstance(c, Admitted) and c.workload.name == name)
        ]

    def unbind(self, workload: Workload) -> None:
        """Undo an admission the world turned down after it was carried out (the operator's
        admission write refused): the workload waits again as if it had not been admitted
        (its finish timer dropped). No change says so: it never ran."""
        self.running.pop(workload.name, None)
        self._versions.pop(workload.name, None)
        self.pending.put(workload)

    def settle(self, now: float) -> None:
        """The instant is settled: its admissions are carried out (the held changes go to
        the sink, in the order they were made)."""
        held, self._held = self._held, None
        self._assumed.clear()
        for change in held or ():
            self._sink(change)

    def _requeue(self, workload: Workload, by: str, reason: str, message: str, now: float) -> None:
        del self.running[workload.name]
        self._versions.pop(workload.name, None)
        self.pending.put(workload)
        by_team = preemptor_team(by, self.running, self.pending)
        self._emit(Preempted(now, workload.name, workload.team, by, by_team, reason, message))

    def report_pending(self, result: CycleResult, now: float) -> None:
        """Keep why each pending workload waits and its position. Only the workloads whose
        reason changed are reported by a cycle with a cache (the others' positions wait for
        :meth:`settle_positions`); every one when :attr:`autoscaled`."""
        changed = result.pending_changed
        every = changed is None or self.autoscaled
        self._unsettled = None if every else result
        reports: Iterable[tuple[str, Pending]] = (
            result.pending.items() if every else ((n, result.pending[n]) for n in changed or ())
        )
        for name, pending in reports:
            if name not in self.pending:
                continue
            before = self.waiting.get(name)
            if new_in_substance(before.engine if before else None, pending.reason):
                # said when the reason changes, not when only its numbers do (usage moving
                # under a waiting job would say it every cycle); compared with the engine's
                # last reason, not the one with the autoscaler's note (every cycle again)
                team = pending.workload.team
                self._emit(PendingReasonChanged(now, name, team, pending.reason, pending.position))
            if before is None or not before.shows(pending):
                note = before.note if before else None  # the last note of this wait
                self.waiting[name] = Waiting(pending.reason, pending.position, pending.reason, note)

    def note_pending(self, workload: str, note: AutoscalerNote) -> None:
        """Add the autoscaler's note to a waiting workload's reason (once: :meth:`noted`)."""
        self.noted(workload, note)

    def noted(self, workload: str, note: AutoscalerNote) -> bool:
        """The autoscaler's note on a waiting workload, added once: its reason as shown is
        the engine's and this note, in :attr:`when`'s words. True when the note says
        something new in substance since the last one of this wait (their keys differ,
        :attr:`AutoscalerNote.gist`: when a backend that writes notes apart writes it)."""
        waiting = self.waiting.get(workload)
        if waiting is None:
            return False
        text = note.message(self.when)
        if text not in waiting.reason:
            reason = waiting.engine.noted(text, note.gist)
            self.waiting[workload] = Waiting(reason, waiting.position, waiting.engine, note.gist)
        return waiting.note != note.gist

    def join_node(self, node: Node, at: float) -> None:
        self.push(at, NODE, node)

    def remove_node(self, name: str, reason: Reason, now: float) -> bool:
        self.nodes.pop(name, None)
        self._emit(NodeLeft(now, name, reason))
        return self.evict_from(name, reason.category, reason.details, now)

    def wake(self, at: float, now: float, *, unless_sooner: bool = False) -> None:
        if unless_sooner and self._timers and self._timers[0][0] <= at:
            return
        if at > now and at not in self._wakes:
            self._wakes.add(at)
            self.push(at, WAKE, None)

    def warn(self, now: float, message: str) -> None:
        self._emit(Warned(now, message))

    @staticmethod
    def keep_warning(warnings: list[str], message: str) -> bool:
        """Append ``message`` to a sink's ``warnings`` unless one of the last 20 says it
        (the last 100 are kept); True when it was new."""
        if message in warnings[-20:]:
            return False
        warnings.append(message)
        del warnings[:-100]
        return True

    def log(self, now: float, event: str, **details: Any) -> None:
        self._emit(AutoscalerEvent(now, event, details))


__all__ = [
    "FINISH",
    "NODE",
    "SUBMIT",
    "WAKE",
    "ClusterState",
    "FinishTimer",
    "Timer",
    "Waiting",
]
