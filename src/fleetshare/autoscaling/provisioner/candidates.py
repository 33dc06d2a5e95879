"""Candidate nodes: one per pool, instance type and offering (or capacity reservation),
which pod shapes may run on them, and the labels and taints a launched node carries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetshare.autoscaling.account_limits import AccountLimits, reservation_offerings
from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.topology import PodShape
from fleetshare.model.catalog import Catalog, InstanceType, ec2_name
from fleetshare.model.node import INSTANCE_TYPE_LABEL, ZONE_LABEL, Taint
from fleetshare.placement.predicate import may_run_on

FAMILY_LABEL = "karpenter.k8s.aws/instance-family"


GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"


CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"


POOL_LABEL = "karpenter.sh/nodepool"


@dataclass(frozen=True, slots=True)
class Candidate:
    """An instance type a pool may launch, at one offering (or in a capacity reservation)."""

    pool: str
    instance: InstanceType
    offering: Offering
    reservation: str | None = None

    @property
    def price(self) -> float:
        return self.offering.price_per_hour


def launch_labels(
    pool: NodePool, inst: InstanceType, zone: str, capacity_type: str
) -> dict[str, str]:
    """Labels a node the pool launches carries: the pool's own and Karpenter's well-known
    ones (instance type, family, GPU name, capacity type, zone, pool)."""
    labels = dict(pool.labels)
    labels[INSTANCE_TYPE_LABEL] = inst.name
    labels[FAMILY_LABEL] = inst.family
    labels[CAPACITY_TYPE_LABEL] = capacity_type
    labels[ZONE_LABEL] = zone
    labels[POOL_LABEL] = pool.name
    if inst.gpu_name:
        labels[GPU_NAME_LABEL] = inst.gpu_name
    return labels


def pool_taints(pool: NodePool) -> tuple[Taint, ...]:
    """Taints a node the pool launches carries."""
    return tuple(Taint(t.key, t.value, t.effect) for t in pool.taints)


def node_labels(candidate: Candidate, pool: NodePool) -> dict[str, str]:
    """Labels a node launched for this candidate would carry."""
    offering = candidate.offering
    return launch_labels(pool, candidate.instance, offering.zone, offering.capacity_type)


def fits_count(requests: Mapping[str, int], allocatable: Mapping[str, int]) -> int:
    count = math.inf
    for name, amount in requests.items():
        if amount > 0:
            count = min(count, allocatable.get(name, 0) // amount)
    return 0 if count == math.inf else int(count)


def labels_ok(shape: PodShape, candidate: Candidate, pool: NodePool) -> bool:
    return may_run_on(
        node_labels(candidate, pool),
        pool_taints(pool),
        dict(shape.node_selector),
        shape.tolerations,
        shape.affinity,
    )


def compatible(shape: PodShape, candidate: Candidate, pool: NodePool) -> bool:
    """True when a pod of ``shape`` may run on a node of ``candidate``."""
    return labels_ok(shape, candidate, pool) and (
        fits_count(shape.request(), candidate.instance.allocatable) >= 1
    )


def _pool_offerings(
    pools: Sequence[NodePool], catalog: Catalog, offerings: Sequence[Offering]
) -> list[tuple[NodePool, InstanceType, list[Offering]]]:
    by_type: dict[str, list[Offering]] = {}
    for offering in offerings:
        if offering.available:
            by_type.setdefault(ec2_name(offering.instance_type), []).append(offering)
    out = []
    for pool in pools:
        for inst in catalog:
            if not pool.allows(inst):
                continue
            options = [
                o
                for o in by_type.get(inst.name, ())
                if o.capacity_type in pool.capacity_types
                and (not pool.zones or o.zone in pool.zones)
            ]
            if options:
                out.append((pool, inst, options))
    return out


def candidates_for(
    pools: Sequence[NodePool], catalog: Catalog, offerings: Sequence[Offering]
) -> list[Candidate]:
    """Per pool and instance type, the cheapest available offering the pool allows."""
    return [
        Candidate(
            pool.name, inst, min(opts, key=lambda o: (o.price_per_hour, o.zone, o.capacity_type))
        )
        for pool, inst, opts in _pool_offerings(pools, catalog, offerings)
    ]


def offering_candidates(
    pools: Sequence[NodePool],
    catalog: Catalog,
    offerings: Sequence[Offering],
    account: AccountLimits | None = None,
) -> list[Candidate]:
    """Per pool, instance type, zone and capacity type, the cheapest available offering; plus
    one candidate per capacity reservation and pool that may use it."""
    out: list[Candidate] = []
    for pool, inst, opts in _pool_offerings(pools, catalog, offerings):
        best: dict[tuple[str, str], Offering] = {}
        for o in opts:
            key = (o.zone, o.capacity_type)
            if key not in best or o.price_per_hour < best[key].price_per_hour:
                best[key] = o
        out.extend(Candidate(pool.name, inst, best[k]) for k in sorted(best))
    if account is not None:
        for reservation, offering in reservation_offerings(account):
            if offering.instance_type not in catalog:
                continue
            inst = catalog.get(offering.instance_type)
            for pool in pools:
                if (
                    "reserved" in pool.capacity_types
                    and pool.allows(inst)
                    and (not pool.zones or offering.zone in pool.zones)
                ):
                    out.append(Candidate(pool.name, inst, offering, reservation.id))
    return out
