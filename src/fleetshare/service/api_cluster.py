"""The REST endpoints for the cluster's nodes and its idle pool (part of the API of
:mod:`fleetshare.service.api`).

``GET /api/v1/nodes`` (any token; a team token sees only its own workloads on them) and ``GET
/api/v1/cluster`` (any token; totals only).
"""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from fleetshare.model.quantity import to_number
from fleetshare.service.auth import Principal
from fleetshare.service.plane import ControlPlane, View


class NodeOut(BaseModel):
    name: str
    instance_type: str | None
    zone: str | None
    capacity_type: str
    source: str
    pool: str | None
    allocatable: dict[str, float]
    ready: bool
    schedulable: bool
    cordoned: bool = Field(description="an admin cordoned it: it takes no new work")
    price_per_hour: float | None
    workloads: list[str]


class ResourceOut(BaseModel):
    capacity: float = Field(description="allocatable of Ready, schedulable nodes")
    used: float = Field(description="requests of admitted work on those nodes")
    idle: float = Field(description="capacity − used")


class NodeGroupOut(BaseModel):
    instance_type: str | None
    capacity_type: str
    nodes: int
    price_per_hour: float | None = Field(description="USD/hour of the group (priced nodes)")


class ClusterOut(BaseModel):
    resources: dict[str, ResourceOut]
    nodes: int
    schedulable_nodes: int
    price_per_hour: float = Field(description="USD/hour of all priced nodes")
    groups: list[NodeGroupOut] = Field(description="nodes by instance and capacity type")


def router(plane: ControlPlane, principal: Callable[..., Awaitable[Principal]]) -> APIRouter:
    """The endpoints over ``plane``; ``principal`` authenticates a request."""
    routes = APIRouter()
    Who = Annotated[Principal, Depends(principal)]

    @routes.get("/api/v1/nodes", response_model=list[NodeOut], tags=["nodes"])
    def list_nodes(who: Who) -> list[NodeOut]:
        """The cluster's nodes (a team token sees only its own workloads on them)."""
        return nodes_out(plane.current_view(), who)

    @routes.get("/api/v1/cluster", response_model=ClusterOut, tags=["nodes"])
    def cluster(who: Who) -> ClusterOut:
        """The idle pool: per resource, the capacity of Ready and schedulable nodes, what
        admitted work uses of it and what is idle; nodes by instance and capacity type with
        their hourly cost. Totals only (a team token sees no other team's work in them)."""
        view = plane.current_view()
        up = {n.name for n in view.nodes if n.ready and n.schedulable}
        groups = _groups(view)
        return ClusterOut(
            resources=_resources(view, up),
            nodes=len(view.nodes),
            schedulable_nodes=len(up),
            price_per_hour=round(sum(g.price_per_hour or 0.0 for g in groups), 4),
            groups=groups,
        )

    return routes


def nodes_out(view: View, who: Principal) -> list[NodeOut]:
    """The nodes of ``view``, each with the workloads of ``who``'s teams on it."""
    on: dict[str, list[str]] = {}
    for entry in view.running.values():
        if not who.sees_team(entry.workload.team):
            continue
        for name in sorted(entry.assignment.nodes):
            on.setdefault(name, []).append(entry.workload.name)
    out = []
    for node in view.nodes:
        info = view.node_info.get(node.name)
        out.append(
            NodeOut(
                name=node.name,
                instance_type=node.instance_type,
                zone=node.zone,
                capacity_type=node.capacity_type,
                source=info.source if info else "config",
                pool=info.pool if info else None,
                allocatable={k: to_number(v) for k, v in sorted(node.allocatable.items())},
                ready=node.ready,
                schedulable=node.schedulable,
                cordoned=node.unschedulable,
                price_per_hour=info.price_per_hour if info else None,
                workloads=sorted(on.get(node.name, [])),
            )
        )
    return out


def _resources(view: View, up: set[str]) -> dict[str, ResourceOut]:
    """Per resource, the capacity of the nodes ``up``, what admitted work uses of it there and
    what is idle."""
    capacity: dict[str, int] = {}
    for node in view.nodes:
        if node.name in up:
            for resource, amount in node.allocatable.items():
                capacity[resource] = capacity.get(resource, 0) + amount
    used: dict[str, int] = {}
    for entry in view.running.values():
        pods = zip(entry.workload.podsets, entry.assignment.placement, strict=False)
        for podset, placement in pods:
            for node_name, count in placement:
                if node_name not in up:
                    continue
                for resource, amount in podset.requests.items():
                    used[resource] = used.get(resource, 0) + amount * count
    return {
        r: ResourceOut(
            capacity=to_number(c),
            used=to_number(used.get(r, 0)),
            idle=to_number(max(0, c - used.get(r, 0))),
        )
        for r, c in sorted(capacity.items())
    }


def _groups(view: View) -> list[NodeGroupOut]:
    """The nodes by instance and capacity type, with their hourly cost (None: none priced)."""
    groups: dict[tuple[str | None, str], list[float | None]] = {}
    for node in view.nodes:
        info = view.node_info.get(node.name)
        price = info.price_per_hour if info else None
        groups.setdefault((node.instance_type, node.capacity_type), []).append(price)
    return [
        NodeGroupOut(
            instance_type=kind,
            capacity_type=capacity_type,
            nodes=len(prices),
            price_per_hour=(
                round(sum(p for p in prices if p is not None), 4)
                if any(p is not None for p in prices)
                else None
            ),
        )
        for (kind, capacity_type), prices in sorted(
            groups.items(), key=lambda g: (g[0][0] or "", g[0][1])
        )
    ]
