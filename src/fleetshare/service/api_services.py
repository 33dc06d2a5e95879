"""The REST endpoints for live services (part of the API of :mod:`fleetshare.service.api`;
see :mod:`fleetshare.service.live_services`).

``POST /api/v1/services`` (a token that may submit workloads of the team): register a service
whose replicas follow its triggers' Prometheus queries; 201 once it is committed to the store.
``GET /api/v1/services`` and ``GET /api/v1/services/{name}`` (any token): the services the
token's team may see, with their live replicas and the scaler's last decision or error.
``PUT /api/v1/services/{name}``: register the service, or change it in place (200; 201 when
it was created): its replicas stay and the scaler carries on under the new rules.
``DELETE /api/v1/services/{name}``: delete a service and cancel its replicas. As for
workloads, a team token sees and touches its own team's services only (another team's is a
404, as one that does not exist) and a viewer token reads only (403).
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel, Field

from fleetshare.service.auth import Principal
from fleetshare.service.live_services import LiveServices, LiveServiceSpec
from fleetshare.service.plane import ControlPlane, Invalid


class ServiceOut(BaseModel):
    name: str
    team: str
    spec: dict[str, Any] = Field(description="the service as registered (defaults left out)")
    created_at: str
    created_by: str = Field(description="the token that registered it (its replicas are its)")
    replicas: list[str] = Field(description="its replica workloads pending or admitted")
    wanted: int | None = Field(default=None, description="the scaler's last decision")
    why: str | None = None
    at: float | None = Field(default=None, description="loop time of the last decision")
    error: str | None = Field(default=None, description="the last failed read, if the latest")


NAME = Annotated[str, Path(min_length=1, max_length=253)]
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such service, or another team's"}
}


def router(
    plane: ControlPlane,
    services: LiveServices,
    principal: Callable[..., Awaitable[Principal]],
) -> APIRouter:
    """The endpoints over ``services``; ``principal`` authenticates a request."""
    routes = APIRouter()
    Who = Annotated[Principal, Depends(principal)]

    def out(data: dict[str, Any]) -> ServiceOut:
        values = {k: data.get(k) for k in ServiceOut.model_fields if k in data}
        values["created_at"] = plane.datetime(data["created_at"])
        return ServiceOut.model_validate(values)

    @routes.post("/api/v1/services", response_model=ServiceOut, status_code=201, tags=["services"])
    def register(body: LiveServiceSpec, who: Who) -> ServiceOut:
        """Register a service (committed to the store: it survives restarts and failovers).
        The leader's scaler reads the triggers' Prometheus queries every polling interval
        and submits or cancels replica workloads ``<name>-r<n>`` as this token. 409 when a
        service of that name exists."""
        return out(services.add(body, who))

    @routes.put(
        "/api/v1/services/{name}",
        response_model=ServiceOut,
        tags=["services"],
        responses={201: {"description": "created"}},
    )
    def apply(name: NAME, body: LiveServiceSpec, who: Who, response: Response) -> ServiceOut:
        """Register the service, or change the one of that name in place (as ``kubectl
        apply``): its replicas stay, the leader's scaler carries on under the new rules, and
        replicas submitted from then on use the new replica spec and priority. Its team
        stays (422 when the body names another; delete it and register it again)."""
        if body.name != name:
            raise Invalid(f"the body names {body.name!r}, the path {name!r}", "name")
        stored, created = services.apply(body, who)
        if created:
            response.status_code = 201
        return out(stored)

    @routes.get("/api/v1/services", response_model=list[ServiceOut], tags=["services"])
    def list_services(who: Who) -> list[ServiceOut]:
        """The services the token may see, in registration order."""
        return [out(s) for s in services.listed(who)]

    @routes.get(
        "/api/v1/services/{name}", response_model=ServiceOut, tags=["services"], responses=NOT_FOUND
    )
    def get_service(name: NAME, who: Who) -> ServiceOut:
        """One service."""
        return out(services.visible(name, who))

    @routes.delete(
        "/api/v1/services/{name}", response_model=ServiceOut, tags=["services"], responses=NOT_FOUND
    )
    def delete_service(name: NAME, who: Who) -> ServiceOut:
        """Delete a service and cancel its pending and admitted replicas (one transaction);
        the service as it was. A viewer token may not (403)."""
        return out(services.delete(name, who))

    return routes
