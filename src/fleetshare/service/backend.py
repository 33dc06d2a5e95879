"""The embedded backend: a :class:`~fleetshare.control.cluster.Cluster` held in memory.

Nodes come from the config file (and, with node pools, from the simulated cloud); workloads
are submitted through the API and run for their declared duration (wall clock) or until
cancelled. :class:`EmbeddedCluster` is the shared :class:`~fleetshare.control.state.ClusterState`
(nodes, pending and running work, why work waits, timers: finishes, nodes becoming Ready, the
loop's wake-ups, a heap the control plane's thread sleeps on) plus what only the service knows
(each node's source and price, when each pending workload last began to wait); its sink
appends every change to :attr:`EmbeddedCluster.changes`, which the control plane writes to the
store in one transaction after each reconcile (:mod:`fleetshare.service.rows`), and feeds the
metrics' callbacks.

Not thread-safe: the control plane holds its lock around every use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetshare.control import changes as ch
from fleetshare.control.state import ClusterState
from fleetshare.governance.snapshot import Assignment, Running
from fleetshare.model.node import Node, Taint
from fleetshare.model.workload import Workload


@dataclass
class NodeInfo:
    """What the service knows about a node besides the :class:`Node` itself."""

    source: str  # "config" or "autoscaler"
    pool: str | None = None
    price_per_hour: float | None = None
    instance: dict[str, Any] | None = None


class EmbeddedCluster(ClusterState):
    """The shared cluster state with the service's node information and its sink."""

    def __init__(self) -> None:
        super().__init__(self._sink)
        self.node_info: dict[str, NodeInfo] = {}
        self.pending_since: dict[str, float] = {}
        self.changes: list[ch.Change] = []
        self.warnings: list[str] = []
        self.on_preempt: Callable[[str, str | None, str], None] | None = None
        """Called with (the evicted workload's team, the preemptor's team, reason) on every
        eviction (metrics)."""
        self.on_admit: Callable[[Workload, float], None] | None = None
        """Called with (workload, seconds it waited) on every admission (metrics)."""

    def _sink(self, change: ch.Change) -> None:
        """The service's sink: the change kept for the store's next write, the metrics told."""
        match change:
            case ch.Admitted(workload=workload):
                since = self.pending_since.pop(workload.name, workload.submit_time)
                if self.on_admit is not None:
                    self.on_admit(workload, change.at - since)
            case ch.Preempted():
                self.pending_since[change.workload] = change.at
                if self.on_preempt is not None:
                    self.on_preempt(change.team, change.by_team, change.reason)
            case ch.NodeLeft():
                self.node_info.pop(change.node, None)
            case ch.Warned():
                if not self.keep_warning(self.warnings, change.message):
                    return
        self.changes.append(change)

    # -- changes from outside the loop ----------------------------------------------------------

    def add_pending(self, workload: Workload, since: float) -> None:
        """A submitted (or restored) workload joins its queue."""
        self.pending.put(workload)
        self.pending_since[workload.name] = since

    def restore_running(self, running: Running) -> None:
        """A workload admitted before a restart: running again on its nodes, its finish at
        the time it had."""
        duration = running.workload.duration
        self.resume(running, None if duration is None else running.admitted_at + duration)

    def cancel(self, name: str) -> bool:
        """Drop a cancelled workload (its row was updated by the API); True when it held
        resources or waited."""
        self.pending_since.pop(name, None)
        return super().cancel(name)

    def add_node(self, node: Node, info: NodeInfo, now: float, *, log: bool = True) -> None:
        self.node_info[node.name] = info
        if log:
            self.join(node, now)
        else:
            self.nodes[node.name] = node


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
