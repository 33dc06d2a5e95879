"""The autoscaler's node bookkeeping (Karpenter's ``state.Cluster``): every node it launched
or adopted, from launch to termination, what it observed of each, and what it says about the
pending work its launching nodes are for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetshare.autoscaling.cloud import Instance
from fleetshare.autoscaling.nodepool import NodePool, counted, pool_usage
from fleetshare.autoscaling.provisioner import launch_labels, pool_taints
from fleetshare.control.autoscaler.setup import Setup
from fleetshare.control.autoscaler.step import Step, removal
from fleetshare.control.changes import AutoscalerNote
from fleetshare.governance.snapshot import Running
from fleetshare.model.node import Node
from fleetshare.model.reason import Keyed, Reason

SHOWN_NODES = 5
"""A pending workload's note names at most this many of the nodes launching for it."""


@dataclass
class ManagedNode:
    """A node the autoscaler launched, from launch to termination."""

    name: str
    instance: Instance
    pool: str
    reason: str
    node: Node
    joined: bool = False
    empty_since: float | None = None
    unhealthy_since: float | None = None
    terminated_at: float | None = None
    termination_reason: str | None = None
    termination_category: str | None = None
    for_workloads: tuple[str, ...] = ()
    held_until: float = 0.0
    """Pending work counts on this node's room: not removed as empty before then."""
    pods_changed_at: float | None = None
    pods_seen: frozenset[str] = frozenset()
    ready_at: float = 0.0
    """When the node is expected Ready: the provider's word, else launch + its latency."""

    def record(self) -> dict[str, Any]:
        """The JSON form (the ``"nodes"`` list of scenario output)."""
        inst = self.instance
        return {
            "node": self.name,
            "instance_id": inst.id,
            "pool": self.pool,
            "instance_type": inst.instance_type,
            "zone": inst.zone,
            "capacity_type": inst.capacity_type,
            "price_per_hour": round(inst.price_per_hour, 6),
            "launched_at": inst.launched_at,
            "ready_at": self.ready_at,
            "launch_reason": self.reason,
            "terminated_at": self.terminated_at,
            "termination_reason": self.termination_reason,
            "termination_category": self.termination_category,
        }

    def observe(self, now: float, node: Node, here: frozenset[str]) -> None:
        """The node as the cluster sees it at ``now``, with the workloads ``here``."""
        if node.ready and node.healthy:
            self.unhealthy_since = None
        elif self.unhealthy_since is None:
            self.unhealthy_since = now
        if here != self.pods_seen:
            self.pods_seen, self.pods_changed_at = here, now
        if here:
            self.empty_since = None
        elif self.empty_since is None:
            self.empty_since = now


class NodeBook:
    """The managed nodes by name, and how new ones are named (``POOL-TYPE-N``)."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.nodes: dict[str, ManagedNode] = {}
        self.by_instance: dict[str, str] = {}
        self.seq = 0
        """The number of the latest node named."""

    def live(self) -> list[ManagedNode]:
        """Nodes launched and not terminated."""
        return [m for m in self.nodes.values() if m.terminated_at is None]

    def joined(self, name: str) -> bool:
        """The node's launch latency passed: True when it joins the cluster (it was not
        terminated meanwhile)."""
        managed = self.nodes.get(name)
        if managed is None:
            return True
        if managed.terminated_at is not None:
            return False
        managed.joined = True
        return True

    def terminated(self, name: str, now: float, reason: Reason) -> ManagedNode | None:
        """The node is gone: record when and why; the node, unless unknown or already gone."""
        managed = self.nodes.get(name)
        if managed is None or managed.terminated_at is not None:
            return None
        managed.terminated_at = now
        managed.termination_reason, managed.termination_category = reason.message, reason.category
        return managed

    def add(
        self,
        instance: Instance,
        pool: NodePool,
        reason: str,
        workloads: tuple[str, ...],
        name: str | None = None,
    ) -> ManagedNode:
        """Manage a launched instance as a node of ``pool`` (named ``name``, else the next
        free ``POOL-TYPE-N``)."""
        inst = self.setup.catalog.get(instance.instance_type)
        if name is None:
            self.seq += 1
            name = f"{pool.name}-{inst.name}-{self.seq}"
            while name in self.nodes:  # taken by a node adopted after a restart
                self.seq += 1
                name = f"{pool.name}-{inst.name}-{self.seq}"
        node = Node(
            name=name,
            allocatable=dict(inst.allocatable),
            instance_type=inst.name,
            zone=instance.zone,
            labels=launch_labels(pool, inst, instance.zone, instance.capacity_type),
            taints=pool_taints(pool),
            capacity_type=instance.capacity_type,
        )
        ready_at = instance.ready_at
        if ready_at is None:  # the provider cannot tell: expect its usual latency
            ready_at = instance.launched_at + self.setup.latency
        managed = ManagedNode(
            name, instance, pool.name, reason, node, for_workloads=workloads, ready_at=ready_at
        )
        self.nodes[name] = managed
        self.by_instance[instance.id] = name
        return managed

    def observe(
        self, now: float, nodes: Mapping[str, Node], pods: Mapping[str, list[Running]], out: Step
    ) -> None:
        """Note spot interruptions (a node whose notice is due goes), and per Ready node its
        health, its pods and since when it is empty."""
        for managed in self.live():
            interrupt = self.setup.cloud.interruption_at(managed.instance.id)
            if interrupt is not None:
                if interrupt <= now:
                    out.removals.append((managed.name, removal("spot-interruption")))
                    continue
                out.wake_if_busy.append(interrupt)
            node = nodes.get(managed.name) if managed.joined else None
            if node is not None:
                here = frozenset(r.workload.name for r in pods.get(managed.name, ()))
                managed.observe(now, node, here)

    def launching_groups(self) -> list[tuple[tuple[str, ...], list[ManagedNode]]]:
        """Launching nodes grouped by the workloads they were launched for. The nodes of one
        plan share one tuple of (often thousands of) workloads: walking it once per plan, not
        once per node, keeps notes, nominations and free room linear (per node, a burst of
        7,000 DLRM jobs on 1,000 new nodes took minutes per step)."""
        groups: dict[int, tuple[tuple[str, ...], list[ManagedNode]]] = {}
        for managed in self.live():
            if not managed.joined:
                key = id(managed.for_workloads)
                groups.setdefault(key, (managed.for_workloads, []))[1].append(managed)
        return list(groups.values())

    def nominated(self) -> set[str]:
        """Workloads that launching nodes are for."""
        return {w for names, _ in self.launching_groups() for w in names}

    def usage(self) -> dict[str, dict[str, int]]:
        """Each pool's nodes and what they count against its limits (:func:`pool_usage`)."""
        catalog = self.setup.catalog
        return pool_usage(
            (m.pool, counted(catalog, m.instance.instance_type, m.node.allocatable))
            for m in self.live()
        )

    def notes(
        self,
        workloads: Iterable[str],
        unplaceable: Mapping[str, Keyed],
        quota_blocked: Mapping[str, Keyed],
    ) -> dict[str, AutoscalerNote]:
        """What the autoscaler does about each pending workload that it does something about,
        in one pass over the launching nodes: nodes launch for it, none can be added
        (``unplaceable``), or quota would not admit it (``quota_blocked``)."""
        launching: dict[str, list[tuple[list[ManagedNode], float]]] = {}
        for names, nodes in self.launching_groups():
            group = (nodes, max(m.ready_at for m in nodes))
            for name in names:
                launching.setdefault(name, []).append(group)
        out = {}
        for workload in workloads:
            note = _note(workload, launching.get(workload, ()), unplaceable, quota_blocked)
            if note is not None:
                out[workload] = note
        return out


def _note(
    workload: str,
    launching: Sequence[tuple[list[ManagedNode], float]],
    unplaceable: Mapping[str, Keyed],
    quota_blocked: Mapping[str, Keyed],
) -> AutoscalerNote | None:
    if launching:
        ready = max(at for _, at in launching)
        count = sum(len(nodes) for nodes, _ in launching)
        shown = [m.name for nodes, _ in launching for m in nodes[:SHOWN_NODES]][:SHOWN_NODES]
        return AutoscalerNote("launching", tuple(shown), count, ready)
    reason = unplaceable.get(workload)
    if reason is not None:
        return AutoscalerNote("cannot-add", reason=reason)
    reason = quota_blocked.get(workload)
    if reason is not None:
        return AutoscalerNote("quota-blocked", reason=reason)
    return None
