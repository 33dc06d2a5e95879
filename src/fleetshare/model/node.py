"""Cluster nodes: what they offer and whether they count as capacity."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from fleetshare.model.resources import Resources

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint; pods without a matching toleration may not run there."""

    key: str
    value: str = ""
    effect: TaintEffect = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (``operator`` Equal or Exists; empty effect matches all effects)."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' toleration matching rule."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One ``matchExpressions`` entry of a required node affinity term."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Node:
    """A node of the cluster.

    Only *schedulable* nodes (Ready, not cordoned, passing health checks) count as capacity.
    ``allocatable`` already reflects MIG partitioning: a partitioned GPU appears as its
    partitions (e.g. ``nvidia.com/mig-1g.10gb: 7``), not as a whole ``nvidia.com/gpu``.
    """

    name: str
    allocatable: Resources
    instance_type: str | None = None
    zone: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    healthy: bool = True
    capacity_type: str = "on-demand"

    @property
    def schedulable(self) -> bool:
        """Counts as capacity: Ready, not cordoned and healthy."""
        return self.ready and not self.unschedulable and self.healthy

    def all_labels(self) -> dict[str, str]:
        """Labels including the well-known instance-type, zone and hostname labels (the
        hostname is the node's name unless it carries its own)."""
        out = dict(self.labels)
        out.setdefault(HOSTNAME_LABEL, self.name)
        if self.instance_type:
            out.setdefault(INSTANCE_TYPE_LABEL, self.instance_type)
        if self.zone:
            out.setdefault(ZONE_LABEL, self.zone)
        return out

    def with_state(
        self,
        *,
        ready: bool | None = None,
        unschedulable: bool | None = None,
        healthy: bool | None = None,
    ) -> Node:
        """A copy with ``ready``/``unschedulable``/``healthy`` changed where given."""
        return replace(
            self,
            ready=self.ready if ready is None else ready,
            unschedulable=self.unschedulable if unschedulable is None else unschedulable,
            healthy=self.healthy if healthy is None else healthy,
        )
