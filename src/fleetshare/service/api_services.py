"""The REST endpoints for live services (part of the API of :mod:`fleetshare.service.api`;
see :mod:`fleetshare.service.live_services`).

``POST /api/v1/services`` (a token that may submit workloads of the team): register a service
whose replicas follow its triggers' Prometheus queries. ``GET /api/v1/services`` (any token):
the services the token's team may see, with their live replicas and the scaler's last
decision or error.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from fleetshare.service.auth import Principal
from fleetshare.service.live_services import LiveServices, LiveServiceSpec


class ServiceOut(BaseModel):
    name: str
    team: str
    replicas: list[str] = Field(description="its replica workloads pending or admitted")
    wanted: int | None = Field(default=None, description="the scaler's last decision")
    why: str | None = None
    at: float | None = Field(default=None, description="loop time of the last decision")
    error: str | None = Field(default=None, description="the last failed read, if the latest")


def router(services: LiveServices, principal: Callable[..., Awaitable[Principal]]) -> APIRouter:
    """The endpoints over ``services``; ``principal`` authenticates a request."""
    routes = APIRouter()
    Who = Annotated[Principal, Depends(principal)]

    def out(data: dict[str, Any]) -> ServiceOut:
        return ServiceOut.model_validate(
            {k: data.get(k) for k in ServiceOut.model_fields if k in data}
        )

    @routes.post("/api/v1/services", response_model=ServiceOut, status_code=201, tags=["services"])
    def register(body: LiveServiceSpec, who: Who) -> ServiceOut:
        """Register a service: from its next turn its scaler reads the triggers' Prometheus
        queries every polling interval and submits or cancels replica workloads. Kept in
        memory by this replica (a restart forgets it)."""
        return out(services.add(body, who).out())

    @routes.get("/api/v1/services", response_model=list[ServiceOut], tags=["services"])
    def list_services(who: Who) -> list[ServiceOut]:
        """The registered services the token may see."""
        return [out(s) for s in services.listed() if who.sees_team(s["team"])]

    return routes
