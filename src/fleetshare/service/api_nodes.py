"""The REST endpoints for node pools and an admin's node operations (part of the API of
:mod:`fleetshare.service.api`).

``GET /api/v1/nodepools`` (any token): the pools in force, each with its live nodes and what
they hold against its limits. ``PUT /api/v1/nodepools`` (admin): every pool, in fleetshare's
NodePool format; stored as a new version (audited) and applied by the loop; from then on the
stored pools win over the config file's. ``POST /api/v1/nodes/{name}/cordon|uncordon|drain``
(admin): no new work on the node / again / cordon and requeue its work.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, get_args

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from fleetshare.autoscaling.nodepool import PoolSet, counted
from fleetshare.service import nodepools
from fleetshare.service.auth import Principal
from fleetshare.service.plane import NODE_ACTIONS, ControlPlane, PoolProblems


class NodePoolOut(BaseModel):
    name: str
    spec: dict[str, Any] = Field(description="the pool in fleetshare's NodePool format")
    nodes: int = Field(description="its nodes in the cluster (joined; booting ones not counted)")
    used: dict[str, float] = Field(
        description="what its nodes hold: allocatable per resource, and `nodes`"
    )
    limits: dict[str, float] = Field(description="its limits (`nodes` a count)")


class NodePoolsOut(BaseModel):
    source: Literal["config", "api"] = Field(
        description="config: the config file's pools (none were set through the API yet)"
    )
    version: int | None
    created_at: str | None
    author: str | None
    pools: list[NodePoolOut]


NodeAction = Literal["cordon", "uncordon", "drain"]


class NodeActionOut(BaseModel):
    node: str
    action: NodeAction
    cordoned: bool = Field(description="it takes no new work (the loop applies it at once)")


def router(plane: ControlPlane, principal: Callable[..., Awaitable[Principal]]) -> APIRouter:
    """The endpoints over ``plane``; ``principal`` authenticates a request."""
    routes = APIRouter()
    Who = Annotated[Principal, Depends(principal)]

    def pools_out() -> NodePoolsOut:
        row, pools = plane.pools_in_force()
        view = plane.current_view()
        members = [
            (info.pool, counted(plane.catalog, node.instance_type, node.allocatable))
            for node in view.nodes
            if (info := view.node_info.get(node.name)) is not None and info.pool is not None
        ]
        return NodePoolsOut(
            source="config" if row is None else "api",
            version=None if row is None else row.id,
            created_at=None if row is None else plane.datetime(row.created_at),
            author=None if row is None else row.author,
            pools=[
                NodePoolOut(
                    name=s.pool.name,
                    spec=s.pool.model_dump(mode="json", exclude_defaults=True),
                    nodes=s.nodes,
                    used=s.used,
                    limits=s.limits,
                )
                for s in nodepools.status(pools, members)
            ],
        )

    @routes.get("/api/v1/nodepools", response_model=NodePoolsOut, tags=["nodes"])
    def list_pools(who: Who) -> NodePoolsOut:
        """The node pools in force (the latest set through the API, else the config's), each
        with its nodes and what they hold against its limits."""
        return pools_out()

    @routes.put("/api/v1/nodepools", response_model=NodePoolsOut, tags=["nodes"])
    def put_pools(body: PoolSet, who: Who) -> NodePoolsOut:
        """Replace every node pool (admin only; audited). The loop decides with them at its
        next step; a pool left out keeps its nodes, launching no more, until they are
        consolidated. 422 names each field the catalog or the cloud does not know."""
        plane.set_pools(list(body.pools), who)
        return pools_out()

    def node_action(action: NodeAction) -> Callable[[str, Principal], NodeActionOut]:
        def act(name: str, who: Who) -> NodeActionOut:
            cordoned = plane.node_action(name, action, who)
            return NodeActionOut(node=name, action=action, cordoned=cordoned)

        return act

    docs = {
        "cordon": "Cordon a node (admin only; audited): it takes no new work; what runs "
        "there stays. Kept across restarts.",
        "uncordon": "Uncordon a node (admin only; audited): it takes work again.",
        "drain": "Drain a node (admin only; audited): cordon it and requeue its work (reason "
        "`node-drained`), as a preemption does.",
    }
    assert get_args(NodeAction) == NODE_ACTIONS
    for action in get_args(NodeAction):
        routes.add_api_route(
            f"/api/v1/nodes/{{name}}/{action}",
            node_action(action),
            methods=["POST"],
            response_model=NodeActionOut,
            tags=["nodes"],
            description=docs[action],
            responses={404: {"description": "no such node in the cluster"}},
        )
    return routes


async def pool_problems(_: Request, exc: Exception) -> JSONResponse:
    """A refused set of node pools: 422 naming each field, as FastAPI's own."""
    assert isinstance(exc, PoolProblems)
    detail = [{"loc": loc, "msg": why, "type": "nodepool"} for loc, why in exc.problems]
    return JSONResponse({"detail": detail}, status_code=422)
