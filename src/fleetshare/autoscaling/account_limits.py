"""Cloud account limits the provisioner plans within, and node-pool limits as the same rows.

Three kinds of account limits (:class:`AccountLimits`, pydantic like the node pools):

- **vCPU service quotas** (:class:`ServiceQuota`): AWS caps the running vCPUs per group of
  instance families and per purchase option, e.g. "Running On-Demand G and VT instances" or
  "All P Spot Instance Requests". A quota has a name, the families it covers, a capacity type
  (``on-demand`` or ``spot``) and a maximum of vCPUs. :data:`AWS_QUOTA_GROUPS` documents AWS's
  letter groups and :func:`aws_quota` builds a quota for a group with AWS's name and the
  group's families from a catalog. Instances launched into a capacity reservation do not count
  against a quota here (a reservation holds its quota from the moment it is created).
- **instance-type count limits** (``instance_limits``): at most N instances of a type, any
  capacity type (a site's own cap, or a per-type limit of the account).
- **capacity reservations** (:class:`CapacityReservation`): ``count`` instances of one type in
  one zone, at ``price_per_hour`` (usually 0: already paid for). A pool uses them when its
  ``capacity_types`` include ``reserved`` (as Karpenter requires); being cheaper than the
  on-demand offering they are used first, up to the reservation's free count.

Current usage comes from the running instances (:func:`account_usage`). Every limit becomes a
*row*: per candidate node, how much of the limit one node uses, and the headroom left
(:func:`limit_rows`); node-pool limits (``cpu``, ``memory``, ``nodes``, ...) are rows too, a
node counting its type's capacity against them (as Karpenter: ``InstanceType.capacity``). The
optimiser never plans past a row's headroom (:func:`nodes_within`, the one rule it applies).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
from pydantic import ConfigDict, Field

from fleetshare.autoscaling.cloud import Instance, Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.inputs import StrictModel
from fleetshare.model.catalog import Catalog, InstanceType, ec2_name

COUNTED_STATES = ("pending", "running", "terminating")
"""Instance states that count against quotas (AWS counts an instance until it is terminated)."""

AWS_QUOTA_GROUPS: dict[str, tuple[str, ...]] = {
    "Standard (A, C, D, H, I, M, R, T, Z)": (
        "a",
        "c",
        "d",
        "h",
        "i",
        "im",
        "is",
        "m",
        "r",
        "t",
        "z",
    ),
    "G and VT": ("g", "gr", "vt"),
    "P": ("p",),
    "Inf": ("inf",),
    "Trn": ("trn",),
    "DL": ("dl",),
    "F": ("f",),
    "X": ("x",),
    "High Memory": ("u",),
    "HPC": ("hpc",),
}
"""AWS vCPU quota groups -> the letter prefixes of the instance families they cover (the
family's leading letters: ``g4dn`` -> ``g``, ``inf2`` -> ``inf``, ``u-6tb1`` -> ``u``)."""


def quota_group(family: str) -> str | None:
    """The AWS quota group of an instance family (``"g5"`` -> ``"G and VT"``), or None."""
    match = re.match(r"[a-z]+", family.lower())
    letters = match.group(0) if match else ""
    for group, prefixes in AWS_QUOTA_GROUPS.items():
        if letters in prefixes:
            return group
    return None


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=True)


class ServiceQuota(_Strict):
    """At most ``max_vcpus`` running vCPUs over ``families`` for one capacity type."""

    name: str = Field(min_length=1)
    families: list[str]
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    max_vcpus: int = Field(ge=0)

    def covers(self, instance: InstanceType, capacity_type: str) -> bool:
        return capacity_type == self.capacity_type and instance.family in self.families


class CapacityReservation(_Strict):
    """``count`` instances of ``instance_type`` reserved in ``zone``."""

    id: str = Field(min_length=1)
    instance_type: str
    zone: str
    count: int = Field(ge=0)
    price_per_hour: float = Field(default=0.0, ge=0)


class AccountLimits(_Strict):
    """What the cloud account allows: vCPU quotas, per-type counts, capacity reservations."""

    quotas: list[ServiceQuota] = Field(default_factory=list)
    instance_limits: dict[str, int] = Field(
        default_factory=dict, description="instance type -> most instances at once"
    )
    reservations: list[CapacityReservation] = Field(default_factory=list)


def aws_quota(
    group: str,
    max_vcpus: int,
    catalog: Catalog,
    capacity_type: Literal["on-demand", "spot"] = "on-demand",
) -> ServiceQuota:
    """A quota named as AWS names it, covering the catalog's families of ``group``.

    ``group`` is a key of :data:`AWS_QUOTA_GROUPS` or its short form (``"G"``, ``"Standard"``).
    """
    full = next((g for g in AWS_QUOTA_GROUPS if g == group or g.split(" ")[0] == group), None)
    if full is None:
        raise ValueError(f"unknown quota group {group!r}; known: {', '.join(AWS_QUOTA_GROUPS)}")
    families = sorted({i.family for i in catalog if quota_group(i.family) == full})
    name = (
        f"Running On-Demand {full} instances"
        if capacity_type == "on-demand"
        else f"All {full} Spot Instance Requests"
    )
    return ServiceQuota(
        name=name, families=families, capacity_type=capacity_type, max_vcpus=max_vcpus
    )


def _ec2(name: str) -> str:
    return ec2_name(name)


def account_usage(
    limits: AccountLimits, instances: Iterable[Instance], catalog: Catalog
) -> dict[str, int]:
    """Usage of every account limit by the instances that exist now (row key -> amount).

    Keys: ``quota:<name>`` (vCPUs), ``type:<instance type>`` (instances) and
    ``reservation:<id>`` (instances). A ``reserved`` instance fills the first reservation of its
    type and zone that has room.
    """
    usage: dict[str, int] = {}
    free = {r.id: r.count for r in limits.reservations}
    for inst in instances:
        if inst.state not in COUNTED_STATES:
            continue
        itype = _ec2(inst.instance_type)
        key = f"type:{itype}"
        usage[key] = usage.get(key, 0) + 1
        if inst.capacity_type == "reserved":
            for r in limits.reservations:
                if _ec2(r.instance_type) == itype and r.zone == inst.zone and free[r.id] > 0:
                    free[r.id] -= 1
                    usage[f"reservation:{r.id}"] = usage.get(f"reservation:{r.id}", 0) + 1
                    break
            continue
        if itype not in catalog:
            continue
        spec = catalog.get(itype)
        for q in limits.quotas:
            if q.covers(spec, inst.capacity_type):
                usage[f"quota:{q.name}"] = usage.get(f"quota:{q.name}", 0) + spec.vcpu
    return usage


def reservation_offerings(limits: AccountLimits) -> list[tuple[CapacityReservation, Offering]]:
    """Each reservation as a ``reserved`` offering."""
    return [
        (r, Offering(_ec2(r.instance_type), r.zone, "reserved", r.price_per_hour))
        for r in limits.reservations
    ]


class CandidateLike(Protocol):
    """What a limit row needs to know about a candidate node."""

    @property
    def pool(self) -> str: ...
    @property
    def instance(self) -> InstanceType: ...
    @property
    def offering(self) -> Offering: ...
    @property
    def reservation(self) -> str | None: ...


@dataclass
class LimitRows:
    """Limits as linear rows over candidates: ``matrix[k, j]`` is what one node of candidate
    ``j`` uses of limit ``k``; at most ``headroom[k]`` may be added."""

    matrix: np.ndarray
    headroom: np.ndarray
    labels: list[str] = field(default_factory=list)
    """Human description of each row for reasons."""
    keys: list[tuple[str, ...]] = field(default_factory=list)
    """What each row limits, without its amounts (a reason's key): ``("pool", pool,
    resource)``, ``("quota", name)``, ``("type", instance type)``, ``("reservation", id)``."""
    limit: list[float] = field(default_factory=list)
    used: list[float] = field(default_factory=list)
    unit: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)


LIMIT_SLACK = 1e-9
"""Rounding slack of the limit rule (headroom and use are floats)."""

UNLIMITED = 2**62
""":func:`nodes_within` for a candidate a row does not count (and its most for one it does)."""


def nodes_within(use: np.ndarray, head: np.ndarray) -> np.ndarray:
    """The limit rule: how many nodes of each candidate fit each row's headroom ``head``
    (rows x candidates; ``use``: what one node of each candidate uses of each row, as
    :attr:`LimitRows.matrix`). A node fits while its use of every row is within the row's
    headroom: the pool's limits on resources (milli-units of each node's capacity, as
    Karpenter counts them) or nodes, the vCPU quotas, type counts and reservations less what
    running instances already use."""
    pos = use > 0
    most = np.floor((head[:, None] + LIMIT_SLACK) / np.where(pos, use, 1))
    within: np.ndarray = np.where(pos, np.clip(most, 0, UNLIMITED), UNLIMITED).astype(np.int64)
    return within


def limit_rows(
    candidates: Sequence[CandidateLike],
    pools: Sequence[NodePool],
    pool_usage: Mapping[str, Mapping[str, int]],
    account: AccountLimits | None,
    usage: Mapping[str, int],
) -> LimitRows:
    """Pool limits, account quotas, per-type counts and reservations as rows (see module doc).

    Rows no candidate touches are left out. Headroom is clipped at zero (a limit already
    exceeded allows nothing more).
    """
    rows: list[np.ndarray] = []
    out = LimitRows(np.zeros((0, len(candidates))), np.zeros(0))
    heads: list[float] = []

    def add(
        row: list[float], limit: float, used: float, label: str, unit: str, key: tuple[str, ...]
    ) -> None:
        if any(v > 0 for v in row):
            rows.append(np.array(row, float))
            heads.append(max(0.0, limit - used))
            out.labels.append(label)
            out.keys.append(key)
            out.limit.append(limit)
            out.used.append(used)
            out.unit.append(unit)

    for pool in pools:
        for resource in pool.limits:
            limit = pool.limit_of(resource)
            assert limit is not None
            used = pool_usage.get(pool.name, {}).get(resource, 0)
            mine = [c.pool == pool.name for c in candidates]
            if resource == "nodes":
                row = [1.0 if m else 0.0 for m in mine]
                limit, used, unit = limit // 1000, used, "nodes"  # usage counts nodes
            else:
                row = [
                    float(c.instance.capacity.get(resource, 0)) if m else 0.0
                    for c, m in zip(candidates, mine, strict=True)
                ]
                unit = resource
            label = f"node pool '{pool.name}' limit {resource}"
            add(row, limit, used, label, unit, ("pool", pool.name, resource))
    if account is not None:
        for q in account.quotas:
            row = [
                float(c.instance.vcpu)
                if c.reservation is None and q.covers(c.instance, c.offering.capacity_type)
                else 0.0
                for c in candidates
            ]
            add(
                row,
                q.max_vcpus,
                usage.get(f"quota:{q.name}", 0),
                f"account quota '{q.name}'",
                "vCPU",
                ("quota", q.name),
            )
        for itype, most in sorted(account.instance_limits.items()):
            row = [1.0 if c.instance.name == _ec2(itype) else 0.0 for c in candidates]
            add(
                row,
                most,
                usage.get(f"type:{_ec2(itype)}", 0),
                f"instance limit {itype}",
                "instances",
                ("type", _ec2(itype)),
            )
        for r in account.reservations:
            row = [1.0 if c.reservation == r.id else 0.0 for c in candidates]
            add(
                row,
                r.count,
                usage.get(f"reservation:{r.id}", 0),
                f"capacity reservation '{r.id}'",
                "instances",
                ("reservation", r.id),
            )
    if rows:
        out.matrix = np.vstack(rows)
        out.headroom = np.array(heads)
    return out


def describe_row(rows: LimitRows, k: int, planned: float) -> str:
    """``account quota 'X' (64 vCPU, 64 in use, 0 planned)`` for reasons."""

    def num(x: float) -> str:
        return f"{x:g}" if rows.unit[k] in ("vCPU", "nodes", "instances") else f"{x / 1000:g}"

    unit = rows.unit[k]
    return f"{rows.labels[k]} ({num(rows.limit[k])} {unit}, {num(rows.used[k])} in use" + (
        f", {num(planned)} planned)" if planned else ")"
    )
