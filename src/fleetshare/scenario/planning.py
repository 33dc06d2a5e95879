"""`fleetshare plan`: pending pods + node pools (+ existing nodes) -> what to launch now."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool, PoolSet, pool_problems
from fleetshare.autoscaling.provisioner import Plan, PodShape, plan_nodes
from fleetshare.inputs import MAX_TOTAL_NODES, MAX_TOTAL_PODS, InputError, load_yaml
from fleetshare.model.catalog import Catalog
from fleetshare.model.node import Node
from fleetshare.model.quantity import to_number
from fleetshare.model.reason import Keyed
from fleetshare.model.resources import render
from fleetshare.model.workload import Workload
from fleetshare.placement.fit import NodeFit, NoFit, PlacementPlan
from fleetshare.placement.gpu_slots import request_problem
from fleetshare.placement.topology import constraint
from fleetshare.policy.schema import validation_problems
from fleetshare.scenario.loader import ScenarioError, build_nodes
from fleetshare.scenario.schema import NodeSpec, WorkloadSpec

DEFAULT_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


class PendingFile(BaseModel):
    """The ``--pending`` file: workloads as in scenario files (names unique)."""

    model_config = ConfigDict(extra="forbid")
    workloads: list[WorkloadSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> PendingFile:
        names = [w.name for w in self.workloads]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"workload names must be unique; repeated: {', '.join(dupes)}")
        pods = sum(w.pod_count() for w in self.workloads)
        if pods > MAX_TOTAL_PODS:
            raise ValueError(f"{pods:,} pods in all; at most {MAX_TOTAL_PODS:,} are planned")
        return self


class NodesFile(BaseModel):
    """The ``--nodes`` file: existing nodes as in scenario files."""

    model_config = ConfigDict(extra="forbid")
    nodes: list[NodeSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _total(self) -> NodesFile:
        nodes = sum(n.count for n in self.nodes)
        if nodes > MAX_TOTAL_NODES:
            raise ValueError(f"{nodes:,} nodes in all; at most {MAX_TOTAL_NODES:,} are read")
        return self


def _load(path: Path, model: type[BaseModel]) -> Any:
    try:
        data = load_yaml(path) or {}
    except InputError as exc:
        raise ScenarioError(str(exc)) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = "\n".join(f"  {p}: {r}" for p, r in validation_problems(exc, data))
        raise ScenarioError(f"invalid {path}:\n{lines}") from None


def simulated_offerings(
    catalog: Catalog, pools: Sequence[NodePool], seed: int = 0
) -> list[Offering]:
    """Offerings of the simulated cloud (catalog on-demand prices, modelled spot prices) in
    the pools' zones, or the default zones."""
    from fleetshare.autoscaling.simulated_cloud import SimulatedCloud, SimulatedCloudConfig

    zones = tuple(sorted({z for p in pools for z in p.zones})) or DEFAULT_ZONES
    cloud = SimulatedCloud(SimulatedCloudConfig(seed=seed, zones=zones, catalog=catalog))
    wanted = [inst.name for inst in catalog if any(p.allows(inst) for p in pools)]
    return cloud.offerings(wanted)


def shapes_after_existing(
    workloads: Sequence[Workload], nodes: Sequence[Node]
) -> tuple[list[PodShape], list[str]]:
    """Place whole workloads on existing nodes first; the rest become pod shapes to provision.

    Returns the shapes and the names of workloads that already fit on existing nodes.
    """
    fit = NodeFit(nodes, {n.name: n.instance_type or "default" for n in nodes})
    flavors = sorted({n.instance_type or "default" for n in nodes if n.schedulable})
    fits_now: list[str] = []
    grouped: dict[tuple[object, ...], PodShape] = {}
    for wl in workloads:
        plan = _place(fit, flavors, wl)
        if plan is not None:
            fit.apply(wl.podsets, plan, 1)
            fits_now.append(wl.name)
            continue
        # a workload is admitted whole: a multi-pod one is a gang, planned in full or not at
        # all, never merged with another workload's pods; its pod sets keep their domains
        gang = wl.name if wl.pod_count > 1 else None
        for ps in wl.podsets:
            level, required = constraint(ps.required_topology, ps.preferred_topology)
            key = (
                tuple(sorted(ps.requests.items())),
                tuple(sorted(ps.node_selector.items())),
                ps.tolerations,
                ps.affinity,
                gang,
                (ps.name, level, required) if gang and level else None,
            )
            old = grouped.get(key)
            grouped[key] = PodShape(
                requests=key[0],
                count=(old.count if old else 0) + ps.count,
                node_selector=key[1],
                tolerations=ps.tolerations,
                affinity=ps.affinity,
                workloads=(*(old.workloads if old else ()), wl.name),
                gang=gang,
                domain=level if gang else None,
                domain_required=required,
            )
    return list(grouped.values()), fits_now


def _place(fit: NodeFit, flavors: Sequence[str], wl: Workload) -> PlacementPlan | None:
    """A placement of the whole workload on existing nodes: every pod set on one instance
    type, the first that holds them all; else pod set by pod set, each on the first instance
    type with room after the pod sets before it (a CPU driver beside GPU workers)."""
    for flavor in flavors:
        plan = fit.place((flavor,) * len(wl.podsets), wl.podsets, explain=False)
        if not isinstance(plan, NoFit):
            return plan
    if len(wl.podsets) == 1:
        return None
    chosen: tuple[str, ...] = ()
    found = PlacementPlan()
    for i in range(len(wl.podsets)):
        for flavor in flavors:
            trial = fit.place((*chosen, flavor), wl.podsets[: i + 1], explain=False)
            if not isinstance(trial, NoFit):
                chosen, found = (*chosen, flavor), trial
                break
        else:
            return None
    return found


def plan_to_json(plan: Plan, shapes: Sequence[PodShape], fits_now: Sequence[str]) -> dict[str, Any]:
    """The plan command's JSON."""
    return {
        "launches": [
            {
                "pool": launch.pool,
                "instance_type": launch.instance_type,
                "zone": launch.zone,
                "capacity_type": launch.capacity_type,
                "count": launch.count,
                "price_per_hour": launch.price_per_hour,
            }
            for launch in plan.launches
        ],
        "hourly_cost": round(plan.hourly_cost, 6),
        "lower_bound": round(plan.lower_bound, 6),
        "bound_is_proven": plan.bound_is_proven,
        "gap": round(plan.gap, 6),
        "method": plan.method,
        "seconds": round(plan.seconds, 3),
        "fit_on_existing_nodes": list(fits_now),
        "unplaceable": [
            {
                "workloads": list(shapes[i].workloads),
                "pods": shapes[i].count,
                "requests": {k: to_number(v) for k, v in shapes[i].requests},
                "reason": reason,
            }
            for i, reason in sorted(plan.unplaceable.items())
        ],
    }


def run_plan(
    pools_path: Path, pending_path: Path, nodes_path: Path | None, catalog: Catalog
) -> tuple[Plan, list[PodShape], list[str]]:
    """Load the three files and plan."""
    from fleetshare.policy.schema import Policy
    from fleetshare.scenario.loader import build_workloads
    from fleetshare.scenario.schema import ScenarioSpec

    pools = _load(pools_path, PoolSet).pools
    for i, pool in enumerate(pools):
        for where, why in pool_problems(pool, catalog):
            raise ScenarioError(f"{pools_path}: pools[{i}]({pool.name}){where}: {why}")
    pending = _load(pending_path, PendingFile)
    data = {
        "cluster": {"nodes": []},
        "policy": {},
        "workloads": [w.model_dump() for w in pending.workloads],
    }
    try:
        spec = ScenarioSpec.model_validate(data)
    except ValidationError as exc:
        lines = "; ".join(f"{p}: {r}" for p, r in validation_problems(exc, data))
        raise ScenarioError(f"invalid {pending_path}: {lines}") from None
    workloads = build_workloads(spec, Policy(), resolve_teams=False)
    nodes: list[Node] = []
    if nodes_path is not None:
        for i, node_spec in enumerate(_load(nodes_path, NodesFile).nodes):
            try:
                nodes.extend(build_nodes(node_spec, catalog, len(nodes)))
            except (KeyError, ScenarioError) as exc:
                raise ScenarioError(
                    f"{nodes_path}: nodes[{i}]: {exc.args[0] if exc.args else exc}"
                ) from None
    shapes, fits_now = shapes_after_existing(workloads, nodes)
    # pods no node can hold as asked (1.5 GPUs) are not planned: governance never places them
    asks = {i: request_problem(dict(s.requests)) for i, s in enumerate(shapes)}
    kept = [s for i, s in enumerate(shapes) if asks[i] is None]
    refused = [s for i, s in enumerate(shapes) if asks[i] is not None]
    plan = plan_nodes(kept, pools, catalog, simulated_offerings(catalog, pools))
    if refused:
        reasons = [
            Keyed(f"asks {asks[i]}", ("unplaceable-request",)) for i in asks if asks[i] is not None
        ]
        unplaceable = {**plan.unplaceable, **{len(kept) + j: r for j, r in enumerate(reasons)}}
        plan = replace(plan, unplaceable=unplaceable)
    return plan, kept + refused, fits_now


def describe(shape: PodShape) -> str:
    """``3 pods of cpu=2, memory=4Gi`` for messages."""
    return f"{shape.count} pods of {render(dict(shape.requests))}"
