"""The REST API (FastAPI; the OpenAPI spec is at ``/openapi.json``, its page at ``/docs`` loads
Swagger UI from this server: fastapi-offline's copy, no CDN; there is no ``/redoc``, whose
ReDoc always loads its vendor's logo from a CDN).

Every ``/api/v1`` endpoint and ``/metrics`` needs ``Authorization: Bearer TOKEN``: 401 without
a valid token, 403 when its scope does not allow the operation. A team token sees only its
own team: lists are filtered, and another team's workload or team is answered 404 exactly as
one that does not exist. Policies and workloads arrive in the request body; nothing in a
request names a file the server would read or write.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from prometheus_client.core import Metric
from pydantic import BaseModel
from starlette.types import Scope

from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service import (
    api_cluster,
    api_events,
    api_nodes,
    api_policy,
    api_services,
    api_teams,
    api_workloads,
)
from fleetshare.service.api_errors import Unauthorized, install_handlers
from fleetshare.service.api_workloads import INLINE_BODY_BYTES, KUBERNETES_OBJECT, Submitter
from fleetshare.service.auth import Principal, TokenCache
from fleetshare.service.http_metrics import RequestMetrics
from fleetshare.service.limits import BodyLimits
from fleetshare.service.live_services import LiveServices
from fleetshare.service.metrics import CONTENT_TYPE, ServiceMetrics
from fleetshare.service.plane import ControlPlane, Forbidden
from fleetshare.service.shortcut import Shortcut

DASHBOARD = Path(__file__).with_name("dashboard")
"""The dashboard's files: plain HTML, CSS and JavaScript (no build step, no CDN)."""
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
DOCS_ASSETS = "/docs-assets"
"""Where Swagger UI's files are served (fastapi-offline's copies)."""


class WhoAmI(BaseModel):
    scope: str
    team: str | None
    token_id: int
    can_submit: bool
    can_read_policy: bool


class Health(BaseModel):
    ok: bool
    loop: str


def create_app(
    plane: ControlPlane,
    *,
    start_loop: bool = True,
    loop_metrics: Callable[[], list[Metric]] | None = None,
    on_stop: Callable[[], None] | None = None,
) -> FastAPI:
    """The API over ``plane``; with ``start_loop`` the loop thread runs while the app does
    (in ``api`` mode: the view's refresh). ``loop_metrics``: the loop's counters and
    histograms when another process runs it (metric families); ``on_stop`` is called when
    the app stops (the loop process is stopped)."""
    metrics = ServiceMetrics(plane, loop_metrics)
    services = LiveServices(plane)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if start_loop:
            plane.start()
            services.start()
        try:
            yield
        finally:
            services.stop()
            plane.stop()
            if on_stop is not None:
                on_stop()

    app = FastAPIOffline(
        title="fleetshare",
        version="1",
        summary="Fair sharing of accelerator clusters: quotas, borrowing, preemption.",
        lifespan=lifespan,
        dependencies=[Depends(_known_query)],
        static_url=DOCS_ASSETS,
        redoc_url=None,
        # Swagger UI's default shows a badge from validator.swagger.io
        swagger_ui_parameters={"validatorUrl": None},
    )
    app.add_middleware(BodyLimits)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    tokens = TokenCache(plane.store)
    principal = _authenticator(tokens)
    install_handlers(app)
    for routes in (
        api_nodes.router(plane, principal),
        api_services.router(plane, services, principal),
        _service_router(plane, metrics, principal),
        api_policy.router(plane, principal),
        api_teams.router(plane, principal),
    ):
        app.include_router(routes)
    submitted = Submitter(plane)
    app.include_router(api_workloads.router(plane, principal, submitted))
    app.include_router(api_cluster.router(plane, principal))
    app.include_router(api_events.router(plane, principal))
    app.mount("/dashboard", _Static(directory=DASHBOARD), name="dashboard")
    # outermost: the hot path skips the middleware (its body checks are the same parse_json
    # that the submission's reading runs), the router and dependency solving
    app.add_middleware(
        Shortcut,
        path="/api/v1/workloads",
        principal=tokens.principal,
        handler=submitted.shortcut,
        max_bytes=INLINE_BODY_BYTES,
    )
    # outermost of all: every request is timed, the hot path's too
    app.add_middleware(RequestMetrics, duration=metrics.http, fixed=("/api/v1/workloads",))
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's spec, plus the schemas of bodies read by hand (workload submissions)."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes
        )
        spec = WorkloadSpec.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(spec.pop("$defs", {}))
        schemas["WorkloadSpec"] = spec
        schemas["KubernetesObject"] = KUBERNETES_OBJECT
        app.openapi_schema = schema
    return app.openapi_schema


def _authenticator(tokens: TokenCache) -> Callable[..., Awaitable[Principal]]:
    """The dependency that authenticates a request's bearer token (401 without a valid one)."""
    bearer = HTTPBearer(auto_error=False, description="a token from `fleetshare token create`")

    async def principal(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Principal:
        header = f"Bearer {credentials.credentials}" if credentials is not None else None
        found = await tokens.principal(header)
        if found is None:
            raise Unauthorized()
        return found

    return principal


def _service_router(
    plane: ControlPlane,
    metrics: ServiceMetrics,
    principal: Callable[..., Awaitable[Principal]],
) -> APIRouter:
    """The service's own endpoints: health, metrics, the caller's token, the dashboard."""
    routes = APIRouter()
    Who = Annotated[Principal, Depends(principal)]

    @routes.get("/healthz", response_model=Health, tags=["service"])
    def healthz() -> JSONResponse:
        """Liveness: 200 while the control loop runs here (``running``) or on another replica
        (``follower (leader: ...)``), 503 after it failed or while it has not gone round (or
        reported) within ``serve --stale-seconds``."""
        failed = plane.failed or plane.stalled
        loop = "running" if plane.leader else plane.role()
        body = {"ok": failed is None, "loop": loop if failed is None else f"failed: {failed}"}
        return JSONResponse(body, status_code=200 if failed is None else 503)

    @routes.get("/metrics", tags=["service"], response_class=Response)
    def prometheus(who: Who) -> Response:
        """Prometheus metrics (admin or viewer tokens; see docs/service.md)."""
        if who.team is not None:
            raise Forbidden("metrics are for admin and viewer tokens")
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @routes.get("/api/v1/whoami", response_model=WhoAmI, tags=["service"])
    def whoami(who: Who) -> WhoAmI:
        """The caller's token: its scope and what it may do (the dashboard asks)."""
        return WhoAmI(
            scope=who.scope,
            team=who.team,
            token_id=who.token_id,
            can_submit=who.can_write_workloads,
            can_read_policy=who.team is None,
        )

    @routes.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        """The dashboard (it asks for a token and calls the API with it)."""
        return FileResponse(DASHBOARD / "index.html", headers=PAGE_HEADERS)

    return routes


def _query_names(dependant: Any) -> set[str]:
    """The query parameters an operation (and its dependencies) takes."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def _known_query(request: Request) -> None:
    """A query parameter the operation does not take is refused (422 naming it): a typo such
    as ``?stat=pending`` must not silently list everything."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.query_params:
        return
    known = _query_names(dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise RequestValidationError(
            [
                {"loc": ["query", name], "msg": "unknown query parameter", "type": "extra"}
                for name in unknown
            ]
        )


class _Static(StaticFiles):
    """The dashboard's files, with the page's security headers."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(PAGE_HEADERS)
        return response
