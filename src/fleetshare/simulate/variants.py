"""The policies the simulator compares, as transformations of one base policy.

Every variant starts from the same input (a trace or a scenario): the same teams, quotas,
workloads and seed. A variant changes only how teams share and whether the cluster is fixed:

- ``static`` -- no sharing: every team ``DontLend`` (neither lends nor borrows) and idle
  resource sharing off; each team runs on its own quota only.
- ``idle50`` -- lend and borrow, each team borrowing at most 50% of the capacity idle at that
  moment (``percent_of_idle: 50``); fair share on.
- ``borrow-quota`` -- lend and borrow, each team borrowing at most its own quota (an
  ``absolute`` borrow limit equal to the team's quota, per flavor and resource); fair share on.
- ``fair-share`` -- lend and borrow without borrow limits, fair share on (fleetshare's
  default): the team furthest over its weighted share gives work back first.
- ``no-fair-share`` -- lend and borrow without borrow limits, fair share off: borrowed capacity
  is reclaimed only by its owners, whoever borrowed it.

``--placement P`` (repeatable) runs each variant once per placement policy
(``cluster.placement``: default, first_fit, best_fit, fgd), named ``<variant>+<P>``.

Each also exists with ``-autoscale``: the cluster starts with no nodes and a node pool launches
the input's node shape on demand (scale to zero; consolidation ``WhenEmptyOrUnderutilized``),
with a GPU ceiling equal to the fixed cluster's capacity.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from fleetshare.model.catalog import (
    GPU_PRODUCT_LABEL,
    Catalog,
    GpuNodePrice,
    InstanceType,
    price_gpu_node,
)
from fleetshare.model.node import Node
from fleetshare.model.placement import PLACEMENTS
from fleetshare.model.quantity import MILLI, format_quantity
from fleetshare.model.resources import CPU, GPU, MEMORY

if TYPE_CHECKING:  # the engine is imported where it runs: ``fleetshare --help`` lists the
    # variants without loading it
    from fleetshare.autoscaling.nodepool import NodePool
    from fleetshare.autoscaling.settings import AutoscalerSpec, CloudSpec

Sharing = Literal["static", "idle-percent", "quota-absolute", "unlimited"]

IDLE_PERCENT = 50.0
"""The percent-of-idle borrow limit of the ``idle50`` variants."""

PREFERRED_GPU_TYPES: dict[int, tuple[str, ...]] = {
    8: ("p4d.24xlarge", "p5.48xlarge", "p3.16xlarge"),
    4: ("p3.8xlarge", "g5.12xlarge"),
    1: ("p3.2xlarge", "g5.xlarge"),
}
"""Instance types for GPU nodes of a trace that names none: datacenter training GPUs first
(the catalog's cheapest type with the same GPU count would often be a T4 or A10G inference
node, which would make the cost comparison flattering)."""

CONSOLIDATE_AFTER_SECONDS = 600.0
DISRUPTION_INTERVAL_SECONDS = 600.0
"""Autoscaler settings of ``-autoscale`` variants built from a trace (a scenario's own
``node_pools`` / ``autoscaler`` sections are used as written). Karpenter evaluates
consolidation continuously; every 10 minutes keeps month-long simulations affordable."""


@dataclass(frozen=True)
class Variant:
    """One policy to simulate."""

    name: str
    description: str
    sharing: Sharing
    fair_share: bool
    autoscale: bool = False
    placement: str | None = None
    """``cluster.placement`` to run with (None: the input's own)."""

    def placed(self, placement: str) -> Variant:
        """This variant with pods placed by ``placement`` (named ``<variant>+<placement>``)."""
        if placement not in PLACEMENTS:
            raise ValueError(
                f"--placement: unknown {placement!r}; choose from {', '.join(PLACEMENTS)}"
            )
        return replace(
            self,
            name=f"{self.name}+{placement}",
            description=f"{self.description}; placement {placement}",
            placement=placement,
        )

    def policy(self, base: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
        """The base policy (a dict in fleetshare's format) changed for this variant."""
        data = copy.deepcopy(base)
        cluster = dict(data.get("cluster") or {})
        cluster["fair_share"] = self.fair_share
        cluster["idle_resource_sharing"] = self.sharing != "static"
        if self.placement is not None:
            cluster["placement"] = self.placement
        data["cluster"] = cluster
        quotas: dict[str, dict[tuple[str, str], int]] = {}
        if self.sharing == "quota-absolute":
            from fleetshare.governance.quota import compile_policy
            from fleetshare.policy.schema import load_policy

            model = compile_policy(load_policy(data, "base policy"), catalog)
            quotas = {name: dict(node.quota) for name, node in model.nodes.items()}
        teams = []
        for team in data.get("teams", []):
            team = dict(team)
            if self.sharing == "static":
                team["sharing"] = "DontLend"
                team["borrow_limits"] = []
            else:
                team["sharing"] = "LendAndBorrow"
                if self.sharing == "unlimited":
                    team["borrow_limits"] = []
                elif self.sharing == "idle-percent":
                    team["borrow_limits"] = [{"percent_of_idle": IDLE_PERCENT}]
                else:
                    own = quotas.get(str(team["name"]), {})
                    team["borrow_limits"] = [
                        {
                            "flavor": flavor,
                            "resource": resource,
                            "absolute": _exact(amount),
                        }
                        for (flavor, resource), amount in sorted(own.items())
                    ] or [{"absolute": 0}]
            teams.append(team)
        data["teams"] = teams
        for group in data.get("groups", []):
            if self.sharing == "static":
                group["borrow_limits"] = []
        data.setdefault("notes", [])
        data["notes"] = [*data["notes"], f"simulate variant {self.name}: {self.description}"]
        return data


def _exact(milli: int) -> str:
    """A quantity string that parses back to exactly ``milli`` (bytes for memory, not Gi)."""
    return str(milli // MILLI) if milli % MILLI == 0 else f"{milli}m"


def _variants() -> dict[str, Variant]:
    base = [
        Variant(
            "static",
            "static quotas: every team DontLend (no lending, no borrowing), idle sharing off",
            "static",
            fair_share=False,
        ),
        Variant(
            "idle50",
            f"idle sharing; each team may borrow up to {IDLE_PERCENT:g}% of the idle capacity; "
            "fair share on",
            "idle-percent",
            fair_share=True,
        ),
        Variant(
            "borrow-quota",
            "idle sharing; each team may borrow up to its own quota (absolute limit); "
            "fair share on",
            "quota-absolute",
            fair_share=True,
        ),
        Variant(
            "fair-share",
            "idle sharing without borrow limits; fair share on (fleetshare's default)",
            "unlimited",
            fair_share=True,
        ),
        Variant(
            "no-fair-share",
            "idle sharing without borrow limits; fair share off",
            "unlimited",
            fair_share=False,
        ),
    ]
    out: dict[str, Variant] = {}
    for v in base:
        out[v.name] = v
    for v in base:
        name = f"{v.name}-autoscale"
        out[name] = Variant(
            name,
            v.description + "; autoscaled from zero nodes (consolidation when empty or "
            "underutilized)",
            v.sharing,
            v.fair_share,
            autoscale=True,
        )
    return out


VARIANTS: dict[str, Variant] = _variants()
"""Every variant by name (fixed cluster first, then the ``-autoscale`` ones)."""


def select(names: Sequence[str], placements: Sequence[str] = ()) -> list[Variant]:
    """The variants named (in the order given), each once per placement policy given (none:
    the input's own); unknown names raise ValueError."""
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown policy {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    chosen = [VARIANTS[n] for n in dict.fromkeys(names)]
    if not placements:
        return chosen
    return [v.placed(p) for v in chosen for p in dict.fromkeys(placements)]


# -- node shape, prices and the autoscaled pool ---------------------------------------------------


def _covers(instance: InstanceType, node: Node) -> bool:
    return all(instance.allocatable.get(r, 0) >= v for r, v in node.allocatable.items() if v)


def node_class(node: Node) -> str:
    """``gpu`` for a node with GPUs, else ``cpu``: each class gets its own stand-in instance
    type and, autoscaled, its own node pool (a CPU type never stands for GPU nodes)."""
    return "gpu" if node.allocatable.get(GPU, 0) > 0 else "cpu"


def stand_in_types(
    nodes: Sequence[Node], catalog: Catalog, override: str | None = None
) -> dict[str, str]:
    """Per node class present (:func:`node_class`), the instance type that stands for its
    nodes (:func:`node_instance_type`); ``override`` stands for every class. With no nodes:
    ``{class of override: override}``."""
    classes: dict[str, list[Node]] = {}
    for node in nodes:
        classes.setdefault(node_class(node), []).append(node)
    if override:
        catalog.get(override)
        name = Catalog.ec2_name(override)
        kind = "gpu" if catalog.get(name).gpu_count else "cpu"
        return {k: name for k in classes} or {kind: name}
    if not classes:
        raise ValueError("no nodes to take a node shape from; give --instance-type")
    return {k: node_instance_type(members, catalog) for k, members in classes.items()}


def node_instance_type(nodes: Sequence[Node], catalog: Catalog, override: str | None = None) -> str:
    """The instance type that stands for the input's nodes (for prices and autoscaling).

    ``override`` if given; else the most common ``instance_type`` of the nodes; else, for the
    most common node shape: the type it is priced as when it carries its GPU model
    (:func:`gpu_model_price`); for other GPU nodes the first of :data:`PREFERRED_GPU_TYPES` for
    their GPU count whose allocatable covers the node, else the first of them at all (a trace's
    invented node may exceed every real type: the Alibaba DLRM GPU node's 3.2 TiB of memory);
    for CPU nodes the cheapest priced catalog type without GPUs that covers the node.
    """
    if override:
        catalog.get(override)
        return Catalog.ec2_name(override)
    named = Counter(n.instance_type for n in nodes if n.instance_type)
    if named:
        return Catalog.ec2_name(named.most_common(1)[0][0])
    if not nodes:
        raise ValueError("no nodes to take a node shape from; give --instance-type")
    shapes = Counter(tuple(sorted(n.allocatable.items())) for n in nodes)
    node = next(
        n for n in nodes if tuple(sorted(n.allocatable.items())) == shapes.most_common(1)[0][0]
    )
    gpus = node.allocatable.get(GPU, 0) // MILLI
    by_model = gpu_model_price(node, catalog)
    if by_model is not None:
        return by_model.instance_type
    preferred = [n for n in PREFERRED_GPU_TYPES.get(gpus, ()) if n in catalog]
    for name in preferred:
        if _covers(catalog.get(name), node):
            return name
    fits = [
        i
        for i in catalog
        if i.price_per_hour is not None
        and _covers(i, node)
        and (gpus > 0 or i.gpu_count == 0)
        and i.arch == "amd64"
    ]
    if not fits and preferred:
        return preferred[0]
    if not fits:
        raise ValueError(f"no catalog instance type covers node {node.name}'s {node.allocatable}")
    return min(fits, key=lambda i: (i.price_per_hour or 0.0, i.name)).name


def gpu_model_price(node: Node, catalog: Catalog) -> GpuNodePrice | None:
    """How a GPU node that names no instance type but carries the GPU-model label
    (``nvidia.com/gpu.product``) is priced (:func:`fleetshare.model.catalog.price_gpu_node`);
    None for other nodes."""
    model = node.labels.get(GPU_PRODUCT_LABEL)
    gpus = node.allocatable.get(GPU, 0) // MILLI
    if node.instance_type or not model or gpus < 1:
        return None
    return price_gpu_node(
        catalog,
        model,
        gpus,
        node.allocatable.get(CPU, 0) / MILLI,
        node.allocatable.get(MEMORY, 0) / MILLI / 2**20,
    )


def node_price(node: Node, catalog: Catalog, stand_in: Mapping[str, str]) -> tuple[str, float]:
    """(what it is priced as, on-demand USD/hour) of a fixed node: its own type when it names
    one; else, for a GPU node labelled with its GPU model, the share of the nearest type of
    that GPU (:func:`gpu_model_price`, e.g. ``1/8 x p3dn.24xlarge``); else the stand-in type
    of its class (:func:`stand_in_types`)."""
    by_model = gpu_model_price(node, catalog)
    if by_model is not None:
        return by_model.name, by_model.price_per_hour
    if node.instance_type:
        name = Catalog.ec2_name(node.instance_type)
    else:
        name = stand_in.get(node_class(node)) or next(iter(stand_in.values()))
    price = catalog.get(name).price_per_hour
    if price is None:
        raise ValueError(f"instance type {name} has no on-demand price in the catalog")
    return name, price


def autoscale_pools(
    nodes: Sequence[Node], stand_in: Mapping[str, str], catalog: Catalog
) -> list[NodePool]:
    """The node pools of ``-autoscale`` variants: one per node class of the input
    (:func:`stand_in_types`), GPU nodes first, each launching its class's stand-in type from
    zero, consolidating when empty or underutilized, with a ceiling of that class's fixed
    capacity (GPUs, or CPUs for CPU nodes) rounded up to whole instances. A class's pool
    never launches a type of another class: CPU-only work may still land on GPU nodes when
    they have room, GPU work never waits on a CPU pool."""
    by_type: dict[str, list[Node]] = {}
    for kind in sorted(stand_in, key=lambda k: k != "gpu"):
        members = [n for n in nodes if node_class(n) == kind]
        by_type.setdefault(stand_in[kind], []).extend(members)
    return [_autoscale_pool(members, name, catalog) for name, members in by_type.items()]


def _autoscale_pool(nodes: Sequence[Node], instance_type: str, catalog: Catalog) -> NodePool:
    stand_in = catalog.get(instance_type)
    resource = GPU if stand_in.gpu_count else CPU
    capacity = sum(n.allocatable.get(resource, 0) for n in nodes)
    per_node = stand_in.allocatable.get(resource, 0)
    limits: dict[str, str | int | float] = {}
    if capacity and per_node:
        count = -(-capacity // per_node)  # stand-in nodes that offer as much
        # a pool's limits count each node's capacity (nodepool.counted): ``count`` of them
        limits[resource] = format_quantity(count * stand_in.capacity[resource], resource)
    from fleetshare.autoscaling.nodepool import NodePool

    return NodePool.model_validate(
        {
            "name": "gpu" if resource == GPU else "cpu",
            "instance_types": [instance_type],
            "capacity_types": ["on-demand"],
            "limits": limits,
            "disruption": {
                "consolidation_policy": "WhenEmptyOrUnderutilized",
                "consolidate_after_seconds": CONSOLIDATE_AFTER_SECONDS,
            },
        }
    )


def autoscaler_settings() -> AutoscalerSpec:
    """The autoscaler settings of trace-built ``-autoscale`` variants."""
    from fleetshare.autoscaling.settings import AutoscalerSpec

    return AutoscalerSpec(disruption_interval_seconds=DISRUPTION_INTERVAL_SECONDS)


def cloud_settings(seed: int) -> CloudSpec:
    """The simulated cloud of trace-built ``-autoscale`` variants (on-demand, 90 s launch)."""
    from fleetshare.autoscaling.settings import CloudSpec

    return CloudSpec(seed=seed)
