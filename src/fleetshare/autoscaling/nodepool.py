"""Node pools: which instances the autoscaler may launch, with what limits (pydantic)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from fleetshare.autoscaling.warm import WarmCapacity
from fleetshare.inputs import Count, Name, StrictModel
from fleetshare.model.catalog import Catalog, InstanceType, ec2_name
from fleetshare.model.quantity import check_quantities, parse_quantity
from fleetshare.model.resources import GPU

Quantity = str | int | float
CapacityTypeName = Literal["on-demand", "spot", "reserved"]
Architecture = Literal["amd64", "arm64"]


def _on_demand() -> list[CapacityTypeName]:
    return ["on-demand"]


def _amd64() -> list[Architecture]:
    return ["amd64"]


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=True)


class TaintSpec(_Strict):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class Budget(_Strict):
    """At most ``nodes`` (count or percent) disrupted at once, optionally only in a window."""

    nodes: str | int = "10%"
    schedule: str | None = Field(default=None, description="cron: when the window opens")
    duration_seconds: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> Budget:
        from fleetshare.autoscaling.budgets import budget_limit
        from fleetshare.autoscaling.cron import is_valid

        budget_limit(self, 0)  # a malformed count or percentage raises ValueError here
        if self.schedule is not None and not is_valid(self.schedule):
            raise ValueError(f"schedule {self.schedule!r} is not a valid cron expression")
        return self


class Disruption(_Strict):
    """When the autoscaler may remove or replace this pool's nodes."""

    consolidation_policy: Literal["WhenEmpty", "WhenEmptyOrUnderutilized"] = (
        "WhenEmptyOrUnderutilized"
    )
    consolidate_after_seconds: float = Field(default=30, ge=0)
    budgets: list[Budget] = Field(default_factory=lambda: [Budget()])
    expire_after_seconds: float | None = Field(default=None, gt=0)


class PoolSchedule(_Strict):
    """A daily or weekly floor/ceiling: from each cron ``schedule`` start (UTC), for
    ``duration_seconds``, the pool keeps at least ``min_nodes`` and at most ``max_nodes``.

    E.g. zero GPU nodes at night (``max_nodes: 0`` from 20:00 for 11 h), or warm headroom
    before office hours (``min_nodes: 2`` from 08:30 on weekdays for 9 h).
    """

    schedule: str
    duration_seconds: float = Field(gt=0)
    min_nodes: Count | None = Field(default=None, ge=0)
    max_nodes: Count | None = Field(default=None, ge=0)
    instance_type: str | None = Field(
        default=None, description="what floor nodes are; default: the pool's cheapest type"
    )

    @model_validator(mode="after")
    def _check(self) -> PoolSchedule:
        from fleetshare.autoscaling.cron import is_valid

        if not is_valid(self.schedule):
            raise ValueError(f"schedule {self.schedule!r} is not a valid cron expression")
        if self.min_nodes is None and self.max_nodes is None:
            raise ValueError("give min_nodes, max_nodes or both")
        if (
            self.min_nodes is not None
            and self.max_nodes is not None
            and self.min_nodes > self.max_nodes
        ):
            raise ValueError(f"min_nodes {self.min_nodes} exceeds max_nodes {self.max_nodes}")
        return self


class InstanceGroup(_Strict):
    """HyperPod-style instance group: one fixed instance type, between min and max nodes."""

    name: str
    instance_type: str
    min_count: Count = Field(default=0, ge=0)
    max_count: Count = Field(ge=0)
    zone: str | None = None

    @model_validator(mode="after")
    def _bounds(self) -> InstanceGroup:
        if self.min_count > self.max_count:
            raise ValueError(f"min_count {self.min_count} exceeds max_count {self.max_count}")
        return self


@lru_cache(maxsize=64)
def _ec2_names(names: tuple[str, ...]) -> frozenset[str]:
    """The EC2 names of ``names`` (cached: a plan asks a pool about every catalog type)."""
    return frozenset(ec2_name(n) for n in names)


class NodePool(_Strict):
    """Which instance types, zones and capacity types a pool launches, and its limits."""

    name: Name
    instance_types: list[str] = Field(default_factory=list, description="empty: any that fit")
    families: list[str] = Field(default_factory=list)
    gpu_models: list[str] = Field(default_factory=list)
    capacity_types: list[CapacityTypeName] = Field(default_factory=_on_demand)
    zones: list[str] = Field(default_factory=list, description="empty: any zone")
    architectures: list[Architecture] = Field(default_factory=_amd64)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    limits: dict[str, Quantity] = Field(
        default_factory=dict, description="cpu, memory, nvidia.com/gpu, ... and 'nodes'"
    )
    weight: int = Field(default=0, ge=0, le=100)
    allow_gpu_fallback: bool = Field(
        default=True,
        description="may a pod asking for fewer GPUs land on a larger GPU instance",
    )
    disruption: Disruption = Field(default_factory=Disruption)
    instance_groups: list[InstanceGroup] = Field(default_factory=list)
    schedules: list[PoolSchedule] = Field(default_factory=list)
    warm_capacity: WarmCapacity | None = Field(
        default=None, description="room kept ahead of forecast demand (autoscaling/warm.py)"
    )

    @field_validator("limits")
    @classmethod
    def _limits(cls, value: dict[str, Quantity]) -> dict[str, Quantity]:
        check_quantities(value)
        return value

    def allows(self, instance: InstanceType) -> bool:
        """True when this pool may launch ``instance``."""
        if self.instance_groups:
            wanted = _ec2_names(tuple(g.instance_type for g in self.instance_groups))
            return instance.name in wanted
        if self.instance_types and instance.name not in _ec2_names(tuple(self.instance_types)):
            return False
        if self.families and instance.family not in self.families:
            return False
        if self.gpu_models and (instance.gpu_name or "") not in self.gpu_models:
            return False
        return instance.arch in self.architectures and instance.price_per_hour is not None

    def limit_of(self, resource: str) -> int | None:
        """A pool limit in milli-units (``nodes`` counts nodes), or None."""
        value = self.limits.get(resource)
        return None if value is None else parse_quantity(value)


def _unknown(kind: str, name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"unknown {kind} {name!r}{hint}"


def pool_problems(pool: NodePool, catalog: Catalog) -> list[tuple[str, str]]:
    """``(.field, why)`` for every name in ``pool`` the catalog does not know (instance
    types, families, GPU models, instance groups' and schedules' types; ``ml.`` names map to
    their EC2 names), an empty ``capacity_types``, and, when the names are all known,
    ``("", why)`` for rules that together allow no instance type. A pool naming a typo would
    otherwise launch nothing, its work waiting."""
    out: list[tuple[str, str]] = []
    names = [i.name for i in catalog]
    for j, name in enumerate(pool.instance_types):
        if name not in catalog:
            out.append((f".instance_types[{j}]", _unknown("instance type", name, names)))
    families = [i.family for i in catalog]
    for j, family in enumerate(pool.families):
        if family not in families:
            out.append((f".families[{j}]", _unknown("instance family", family, families)))
    models = [i.gpu_name for i in catalog if i.gpu_name]
    for j, model in enumerate(pool.gpu_models):
        if model not in models:
            out.append((f".gpu_models[{j}]", _unknown("GPU model", model, models)))
    for j, group in enumerate(pool.instance_groups):
        if group.instance_type not in catalog:
            why = _unknown("instance type", group.instance_type, names)
            out.append((f".instance_groups[{j}]({group.name}).instance_type", why))
    for j, schedule in enumerate(pool.schedules):
        if schedule.instance_type is not None and schedule.instance_type not in catalog:
            why = _unknown("instance type", schedule.instance_type, names)
            out.append((f".schedules[{j}].instance_type", why))
    if not pool.capacity_types:
        out.append(
            (
                ".capacity_types",
                "empty: the pool could launch nothing (give on-demand, "
                "spot or reserved, or leave it out for on-demand)",
            )
        )
    if not out and not any(pool.allows(i) for i in catalog):
        rules = [
            f"{key} {value}"
            for key, value in (
                ("instance_types", pool.instance_types),
                ("families", pool.families),
                ("gpu_models", pool.gpu_models),
                ("architectures", pool.architectures),
                ("instance_groups", [g.instance_type for g in pool.instance_groups]),
            )
            if value
        ]
        out.append(
            (
                "",
                f"no priced instance type of the catalog matches {' and '.join(rules)}: "
                "the pool could launch nothing",
            )
        )
    return out


def unknown_zones(pool: NodePool, zones: Iterable[str]) -> list[str]:
    """The zones ``pool`` names that the cloud does not have (sorted)."""
    return sorted(set(pool.zones) - set(zones))


class PoolSet(_Strict):
    """All node pools of a cluster (the ``--pools`` file)."""

    pools: list[NodePool]

    @model_validator(mode="after")
    def _unique(self) -> PoolSet:
        names = [p.name for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"node pool names must be unique; repeated: {', '.join(dupes)}")
        return self


ACCELERATOR_LIMIT_KEYS = (GPU, "aws.amazon.com/neuron")


NODES = "nodes"
"""The pool limit on its number of nodes (a count, not milli-units, in usage)."""


def counted(
    catalog: Catalog, instance_type: str | None, allocatable: Mapping[str, int]
) -> Mapping[str, int]:
    """What a node counts against its pool's limits: its instance type's capacity
    (:attr:`InstanceType.capacity`), as Karpenter counts a NodePool's nodes and filters the
    types it may launch by their capacity; its ``allocatable`` when the catalog does not know
    its type."""
    if instance_type is not None and instance_type in catalog:
        return catalog.get(instance_type).capacity
    return allocatable


def pool_usage(
    members: Iterable[tuple[str, Mapping[str, int]]],
) -> dict[str, dict[str, int]]:
    """What each pool's nodes use of its limits, from (pool, :func:`counted`) pairs: ``nodes``
    as a count, resources in milli-units. The one usage every limit check reads."""
    usage: dict[str, dict[str, int]] = {}
    for pool, capacity in members:
        add_node(usage.setdefault(pool, {NODES: 0}), capacity)
    return usage


def limit_passed(
    pool: NodePool, used: Mapping[str, int], capacity: Mapping[str, int]
) -> str | None:
    """The pool limit one more node of ``capacity`` would pass, or None."""
    for resource in pool.limits:
        limit = pool.limit_of(resource)
        assert limit is not None
        if resource == NODES:
            if used.get(NODES, 0) + 1 > limit // 1000:
                return resource
        elif used.get(resource, 0) + capacity.get(resource, 0) > limit:
            return resource
    return None


def add_node(used: dict[str, int], capacity: Mapping[str, int]) -> None:
    """Count one more node of ``capacity`` in a pool's ``used`` (as :func:`pool_usage`)."""
    used[NODES] = used.get(NODES, 0) + 1
    for resource, amount in capacity.items():
        used[resource] = used.get(resource, 0) + amount
