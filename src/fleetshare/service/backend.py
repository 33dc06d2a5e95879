"""The embedded backend: a :class:`~fleetshare.control.cluster.Cluster` held in memory.

Nodes come from the config file (and, with node pools, from the simulated cloud); workloads
are submitted through the API and run for their declared duration (wall clock) or until
cancelled. The control loop acts on this object; every change it makes is also appended to
:attr:`EmbeddedCluster.changes`, which the control plane writes to the store in one
transaction after each reconcile (:mod:`fleetshare.service.plane`). Timers (finishes, nodes
becoming Ready, the loop's wake-ups) are a heap the control plane's thread sleeps on.

Not thread-safe: the control plane holds its lock around every use.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fleetshare.control import changes as ch
from fleetshare.governance.queues import PendingBook, PendingView, new_in_substance, same_nodes
from fleetshare.governance.snapshot import Admission, Assignment, CycleResult, Running
from fleetshare.model.node import Node, Taint
from fleetshare.model.reason import PendingReason, Reason
from fleetshare.model.workload import Workload

FINISH, JOIN, WAKE = 0, 1, 2
"""Timer kinds, in the order they apply at one instant."""


@dataclass
class NodeInfo:
    """What the service knows about a node besides the :class:`Node` itself."""

    source: str  # "config" or "autoscaler"
    pool: str | None = None
    price_per_hour: float | None = None
    instance: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a pending workload waits and its position in its team's queue."""

    reason: PendingReason
    position: int


class EmbeddedCluster:
    """Nodes, pending and running workloads, and timers; the control loop's backend."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.node_info: dict[str, NodeInfo] = {}
        self.pending = PendingBook()
        self.running: dict[str, Running] = {}
        self.waiting: dict[str, Waiting] = {}
        self.pending_since: dict[str, float] = {}
        self.changes: list[ch.Change] = []
        self.warnings: list[str] = []
        self.on_preempt: Callable[[Workload, str | None, str], None] | None = None
        """Called with (workload, the preemptor's team, reason) on every eviction (metrics)."""
        self.on_admit: Callable[[Workload, float], None] | None = None
        """Called with (workload, seconds it waited) on every admission (metrics)."""
        self._timers: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._versions: dict[str, int] = {}
        self._wakes: set[float] = set()
        self._node_view: tuple[Node, ...] = ()
        self.namespaces: dict[str, dict[str, str]] = {}
        """The config's namespaces with their labels (what namespace selectors match)."""

    # -- timers ------------------------------------------------------------------------------

    def _push(self, at: float, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (at, kind, self._seq, payload))

    def next_timer(self) -> float | None:
        """When the earliest timer is due."""
        return self._timers[0][0] if self._timers else None

    def due(self, now: float) -> list[tuple[float, int, Any]]:
        """Pop the timers due by ``now``, in order (time, then kind)."""
        out = []
        while self._timers and self._timers[0][0] <= now:
            at, kind, _, payload = heapq.heappop(self._timers)
            if kind == WAKE:
                self._wakes.discard(at)
            out.append((at, kind, payload))
        return out

    def finish_due(self, at: float, payload: tuple[str, int]) -> bool:
        """A finish timer fired: the workload finishes unless it was preempted or cancelled
        since (its version moved on). True when it finished."""
        name, version = payload
        if self._versions.get(name) != version or name not in self.running:
            return False
        del self.running[name]
        self._versions.pop(name, None)
        self.changes.append(ch.Finished(at, name))
        return True

    def schedule_finish(self, workload: Workload, admitted_at: float) -> None:
        version = self._versions.get(workload.name, 0) + 1
        self._versions[workload.name] = version
        if workload.duration is not None:
            self._push(admitted_at + workload.duration, FINISH, (workload.name, version))

    # -- changes from outside the loop ----------------------------------------------------------

    def add_pending(self, workload: Workload, since: float) -> None:
        """A submitted (or restored) workload joins its queue."""
        self.pending.put(workload)
        self.pending_since[workload.name] = since

    def restore_running(self, running: Running) -> None:
        """A workload admitted before a restart: running again on its nodes, its finish at
        the time it had."""
        self.running[running.workload.name] = running
        self.schedule_finish(running.workload, running.admitted_at)

    def cancel(self, name: str) -> bool:
        """Drop a cancelled workload (its row was updated by the API); True when it held
        resources or waited."""
        if name in self.running:
            del self.running[name]
            self._versions.pop(name, None)
            return True
        workload = self.pending.take(name)
        if workload is None:
            return False
        self.waiting.pop(name, None)
        self.pending_since.pop(name, None)
        return True

    def add_node(self, node: Node, info: NodeInfo, now: float, *, log: bool = True) -> None:
        self.nodes[node.name] = node
        self.node_info[node.name] = info
        if log:
            self.changes.append(ch.NodeJoined(now, node.name))

    def cordon(self, name: str, on: bool = True) -> None:
        """An admin cordoned (``on``) or uncordoned a node: a cordoned node takes no new work
        (it is not schedulable); what runs there stays. An unknown node is ignored (it left
        meanwhile)."""
        node = self.nodes.get(name)
        if node is not None and node.unschedulable != on:
            self.nodes[name] = node.with_state(unschedulable=on)

    # -- the Cluster protocol: observe -----------------------------------------------------------

    def node_list(self) -> tuple[Node, ...]:
        self._node_view = same_nodes(tuple(self.nodes.values()), self._node_view)
        return self._node_view

    def running_workloads(self) -> dict[str, Running]:
        return self.running

    def pending_workloads(self) -> list[Workload]:
        return list(self.pending.values())

    def pending_for_cycle(self) -> PendingView:
        return self.pending.view(self)

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        return self.namespaces

    def busy(self, now: float) -> bool:
        return bool(self.pending or self.running)

    # -- ... and act ----------------------------------------------------------------------------

    def admitting(self) -> bool:
        return True

    def bind_all(self, admissions: Sequence[Admission], now: float) -> None:
        for admission in admissions:
            self.bind(admission, now)

    def bind(self, admission: Admission, now: float) -> None:
        workload = admission.workload
        self.pending.take(workload.name)
        self.waiting.pop(workload.name, None)
        since = self.pending_since.pop(workload.name, workload.submit_time)
        self.running[workload.name] = Running(workload, admission.assignment, now)
        self.schedule_finish(workload, now)
        self.changes.append(ch.Admitted(now, workload, admission.assignment, admission.borrowed))
        if self.on_admit is not None:
            self.on_admit(workload, now - since)

    def evict(self, workload: Workload, by: str, reason: str, message: str, now: float) -> None:
        self._requeue(workload, by, reason, message, now)

    def _requeue(self, workload: Workload, by: str, reason: str, message: str, now: float) -> None:
        del self.running[workload.name]
        self._versions[workload.name] = self._versions.get(workload.name, 0) + 1
        self.add_pending(workload, now)
        by_team = ch.preemptor_team(by, self.running, self.pending)
        self.changes.append(
            ch.Preempted(now, workload.name, workload.team, by, by_team, reason, message)
        )
        if self.on_preempt is not None:
            self.on_preempt(workload, by_team, reason)

    def report_pending(self, result: CycleResult, now: float) -> None:
        changed = result.pending_changed
        names = changed if changed is not None else list(result.pending)
        for name in names:
            if name not in self.pending:
                continue
            pending = result.pending[name]
            before = self.waiting.get(name)
            if new_in_substance(before.reason if before else None, pending.reason):
                self.changes.append(
                    ch.PendingReasonChanged(
                        now, name, pending.workload.team, pending.reason, pending.position
                    )
                )
            self.waiting[name] = Waiting(pending.reason, pending.position)
        if changed is not None:
            # the others keep their reason; their queue positions may have moved
            for name, waiting in list(self.waiting.items()):
                if name in result.pending and name not in changed:
                    position = result.pending[name].position
                    if position != waiting.position:
                        self.waiting[name] = Waiting(waiting.reason, position)

    def note_pending(self, workload: str, note: ch.AutoscalerNote) -> None:
        waiting = self.waiting.get(workload)
        text = note.message(ch.loop_time)
        if waiting is not None and text not in waiting.reason:
            self.waiting[workload] = Waiting(waiting.reason.noted(text), waiting.position)

    def join_node(self, node: Node, at: float) -> None:
        self._push(at, JOIN, node)

    def remove_node(self, name: str, reason: Reason, now: float) -> bool:
        before = len(self.running)
        self.nodes.pop(name, None)
        self.node_info.pop(name, None)
        self.changes.append(ch.NodeLeft(now, name, reason))
        message = reason.details
        self.evict_from(name, reason.category, message, now)
        return len(self.running) < before

    def evict_from(self, node: str, reason: str, message: str, now: float) -> None:
        """Requeue every workload with pods on ``node``."""
        for running in list(self.running.values()):
            if node in running.assignment.nodes:
                self._requeue(running.workload, node, reason, message, now)

    def wake(self, at: float, now: float, *, unless_sooner: bool = False) -> None:
        if unless_sooner and self._timers and self._timers[0][0] <= at:
            return
        if at > now and at not in self._wakes:
            self._wakes.add(at)
            self._push(at, WAKE, None)

    def warn(self, now: float, message: str) -> None:
        if message not in self.warnings[-20:]:
            self.warnings.append(message)
            del self.warnings[:-100]
            self.changes.append(ch.Warned(now, message))

    def log(self, now: float, event: str, **details: Any) -> None:
        self.changes.append(ch.AutoscalerEvent(now, event, details))


# -- JSON forms ------------------------------------------------------------------------------


def assignment_json(assignment: Assignment) -> dict[str, Any]:
    out: dict[str, Any] = {
        "flavors": list(assignment.flavors),
        "placement": [[[node, pods] for node, pods in ps] for ps in assignment.placement],
    }
    if assignment.gpus:  # the GPU of each pod's GPU share
        out["gpus"] = [[list(on) for on in ps] for ps in assignment.gpus]
    if assignment.counts:  # partial admission: the pods admitted per pod set
        out["counts"] = list(assignment.counts)
    return out


def assignment_from_json(data: dict[str, Any]) -> Assignment:
    return Assignment(
        tuple(str(f) for f in data["flavors"]),
        tuple(tuple((str(n), int(p)) for n, p in ps) for ps in data["placement"]),
        tuple(tuple(tuple(int(g) for g in on) for on in ps) for ps in data.get("gpus", ())),
        tuple(int(n) for n in data.get("counts", ())),
    )


def node_row(node: Node, info: NodeInfo) -> dict[str, Any]:
    """The ``nodes`` table row of a node."""
    return {
        "name": node.name,
        "source": info.source,
        "pool": info.pool,
        "instance_type": node.instance_type,
        "zone": node.zone,
        "capacity_type": node.capacity_type,
        "allocatable": dict(node.allocatable),
        "labels": dict(node.labels),
        "taints": [[t.key, t.value, t.effect] for t in node.taints],
        "ready": node.ready,
        "unschedulable": node.unschedulable,
        "healthy": node.healthy,
        "price_per_hour": info.price_per_hour,
        "instance": info.instance,
    }


def node_from_row(row: dict[str, Any]) -> Node:
    return Node(
        name=row["name"],
        allocatable={str(k): int(v) for k, v in row["allocatable"].items()},
        instance_type=row["instance_type"],
        zone=row["zone"],
        labels=dict(row["labels"]),
        taints=tuple(Taint(k, v, e) for k, v, e in row["taints"]),
        ready=bool(row["ready"]),
        unschedulable=bool(row["unschedulable"]),
        healthy=bool(row["healthy"]),
        capacity_type=row["capacity_type"],
    )
