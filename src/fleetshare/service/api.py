"""The REST API (FastAPI; the OpenAPI spec is at ``/openapi.json``, its page at ``/docs`` loads
Swagger UI from this server: fastapi-offline's copy, no CDN; there is no ``/redoc``, whose
ReDoc always loads its vendor's logo from a CDN).

Every ``/api/v1`` endpoint and ``/metrics`` needs ``Authorization: Bearer TOKEN``: 401 without
a valid token, 403 when its scope does not allow the operation. A team token sees only its
own team: lists are filtered, and another team's workload or team is answered 404 exactly as
one that does not exist. Policies and workloads arrive in the request body; nothing in a
request names a file the server would read or write.
"""

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Body, Depends, FastAPI, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from prometheus_client.core import Metric
from pydantic import BaseModel, Field
from sqlalchemy import Row, func, select
from starlette.types import Scope

from fleetshare.governance.quota import compile_policy
from fleetshare.inputs import InputError, parse_yaml
from fleetshare.model.quantity import to_number
from fleetshare.model.reason import PendingCategory
from fleetshare.policy.reading import DEFAULT_READING, BorrowLimitReading
from fleetshare.policy.schema import Policy, PolicyError, load_policy
from fleetshare.scenario.report import team_usage
from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service import api_nodes, api_services, whatif
from fleetshare.service import store as tables
from fleetshare.service.auth import Principal, TokenCache, authenticate
from fleetshare.service.http_metrics import RequestMetrics
from fleetshare.service.limits import BodyLimits
from fleetshare.service.live_services import LiveServices
from fleetshare.service.metrics import CONTENT_TYPE, ServiceMetrics
from fleetshare.service.plane import (
    Conflict,
    ControlPlane,
    Forbidden,
    Invalid,
    NotFound,
    PoolProblems,
    ServiceError,
    View,
)
from fleetshare.service.shortcut import Shortcut
from fleetshare.service.submission import (
    Submission,
    SubmissionError,
    check_name,
    check_spec,
    is_manifest,
    manifest,
    native,
    read_body,
)

MAX_PAGE = 1000
INLINE_BODY_BYTES = 16 << 10
"""A JSON submission up to this size is read on the event loop (no thread hop); YAML and
larger bodies are read in a worker thread."""
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
MAX_STREAMS = 64
"""Event streams open at once (each polls the store)."""
STREAM_POLL_SECONDS = 0.25
STREAM_KEEPALIVE_SECONDS = 15.0
STREAM_REAUTH_SECONDS = 10.0
"""A stream checks its token this often, and ends once it is revoked."""
STREAM_RETRY_MS = 2000
NAME = Annotated[str, Field(min_length=1, max_length=253)]


# -- response and request models ---------------------------------------------------------------


class WorkloadOut(BaseModel):
    id: int
    name: str
    team: str
    state: Literal["pending", "admitted", "finished", "cancelled"]
    priority_class: str | None
    priority: int
    pods: int
    spec: dict[str, Any]
    submitted_at: str
    admitted_at: str | None
    finished_at: str | None
    flavors: list[str]
    nodes: list[str]
    borrowed: dict[str, float]
    preemptions: int
    pending_reason: str | None
    queue_position: int | None
    notes: list[str] = Field(
        default_factory=list,
        description="on submission of a manifest: what it holds that is not modelled",
    )


class WorkloadPage(BaseModel):
    items: list[WorkloadOut]
    next_after: int | None = Field(description="pass as ?after= for the next page; null: done")


class Explanation(BaseModel):
    name: str
    team: str
    state: str
    reason: str | None = Field(description="why it waits, with numbers (pending only)")
    category: PendingCategory | None = Field(
        default=None,
        description="the kind of reason, as fleetshare_pending_workloads_by_reason counts it "
        "(null until a cycle considered it)",
    )
    queue_position: int | None = Field(description="1 = next in its team's queue")
    flavors: list[str]
    nodes: list[str]


class TeamOut(BaseModel):
    name: str
    cohort: str | None
    quota: dict[str, float]
    used: dict[str, float]
    borrowed: dict[str, float]
    by_flavor: dict[str, dict[str, dict[str, float]]]
    pending: int
    admitted: int


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


class WhoAmI(BaseModel):
    scope: str
    team: str | None
    token_id: int
    can_submit: bool
    can_read_policy: bool


class EventOut(BaseModel):
    id: int
    at: str
    kind: str
    workload: str | None
    team: str | None
    details: dict[str, Any]


class EventPage(BaseModel):
    items: list[EventOut]
    next_after: int | None


class PolicyIn(BaseModel):
    """A policy: fleetshare's format (an object, or YAML text), Kueue YAML (text or a list of
    objects) or HyperPod JSON (text, an object or a list)."""

    model_config = {"extra": "forbid"}
    format: Literal["fleetshare", "kueue", "hyperpod"] = "fleetshare"
    policy: dict[str, Any] | list[Any] | str
    borrow_limit_reading: BorrowLimitReading = Field(
        default=DEFAULT_READING,
        description="HyperPod BorrowLimit as a percent of idle compute (as its API model says) "
        "or of the team's quota (as its walkthrough behaves)",
    )


class WhatIfIn(PolicyIn):
    """A proposed policy (as for ``PUT /api/v1/policy``) and how far to look."""

    hours: float = Field(
        default=4.0,
        gt=0,
        le=whatif.MAX_HOURS,
        description="history replayed and horizon simulated, in hours",
    )
    max_workloads: int = Field(
        default=whatif.MAX_WORKLOADS,
        ge=1,
        le=whatif.MAX_WORKLOADS,
        description="every running workload is simulated, and pending and replayed ones "
        "while the count is below this",
    )


class WhatIfNumbers(BaseModel):
    workloads: int = Field(description="submitted in the run (pending now, and replayed)")
    admitted: int
    never_admitted: int
    wait_p50_seconds: float | None
    wait_p99_seconds: float | None
    borrowed_hours: float = Field(description="∫ usage beyond quota, resource-hours")
    used_hours: float
    preemptions: int


class WhatIfCluster(BaseModel):
    utilisation: float | None = Field(description="used / schedulable capacity over the horizon")
    used_hours: float
    available_hours: float
    workloads: int
    admitted: int
    never_admitted: int
    wait_p50_seconds: float | None
    wait_p99_seconds: float | None
    borrowed_hours: float
    preemptions: int
    cost_usd: float


class WhatIfRun(BaseModel):
    simulated_hours: float
    stopped_early: bool = Field(description="its wall-clock budget ran out first")
    cluster: WhatIfCluster


class WhatIfTeam(BaseModel):
    team: str
    current: WhatIfNumbers | None
    proposed: WhatIfNumbers | None


class WhatIfBounds(BaseModel):
    max_hours: float
    max_workloads: int
    wall_budget_seconds_per_run: float
    running: int
    pending: int
    replayed: int
    left_out: dict[str, int] = Field(description="workloads left out by the bound, by kind")


class WhatIfOut(BaseModel):
    hours: float
    resource: str = Field(description="the resource measured: GPUs, or CPUs without GPUs")
    started_at: str | None
    seconds: float = Field(description="wall-clock seconds the comparison took")
    bounds: WhatIfBounds
    current: WhatIfRun
    proposed: WhatIfRun
    teams: list[WhatIfTeam]
    notes: list[str]
    assumptions: list[str]


class PolicyOut(BaseModel):
    version: int
    created_at: str
    source_format: str
    author: str
    policy: dict[str, Any]
    notes: list[str]


class Health(BaseModel):
    ok: bool
    loop: str


KUBERNETES_OBJECT: dict[str, Any] = {
    "title": "KubernetesObject",
    "description": "A Kubernetes object the manifests package reads: batch/v1 Job, "
    "kubeflow.org/v1 PyTorchJob, jobset.x-k8s.io/v1alpha2 JobSet, ray.io/v1 RayJob or "
    "RayCluster, v1 Pod (one, or the pods of one pod group), or a v1 List of those.",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {"type": "object"},
    },
}

SUBMIT_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "oneOf": [
                    {"$ref": "#/components/schemas/WorkloadSpec"},
                    {"$ref": "#/components/schemas/KubernetesObject"},
                    {
                        "type": "array",
                        "minItems": 1,
                        "items": {"$ref": "#/components/schemas/KubernetesObject"},
                    },
                ]
            }
        },
        "application/yaml": {
            "schema": {"type": "string", "description": "YAML text: a spec, or objects"}
        },
    },
}


# -- the app -----------------------------------------------------------------------------------


_FOREIGN_PREEMPTION = {
    "reclaim": "another team reclaims its lent quota; {team} was borrowing",
    "reclaim-while-borrowing": (
        "a workload of another team must borrow and preempts borrowed work of lower priority"
    ),
    "fair-share": "fair share: another team borrows less than {team} (weighted dominant share)",
}
"""A preemption's message as a team token sees it when the preemptor is another team's
(the engine's, ``governance/cycle.py`` ``_why``, names that team and its workload)."""


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
    store = plane.store
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

    def openapi() -> dict[str, Any]:
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

    app.openapi = openapi  # type: ignore[method-assign]
    bearer = HTTPBearer(auto_error=False, description="a token from `fleetshare token create`")

    tokens = TokenCache(store)

    async def principal(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Principal:
        header = f"Bearer {credentials.credentials}" if credentials is not None else None
        found = await tokens.principal(header)
        if found is None:
            raise _Unauthorized()
        return found

    Who = Annotated[Principal, Depends(principal)]

    def reader_of_policy(who: Who) -> Principal:
        if who.team is not None:
            raise Forbidden("team tokens cannot read the policy; ask for /api/v1/teams/{team}")
        return who

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return _service_error_response(exc)

    @app.exception_handler(_Unauthorized)
    async def _unauthorized(_: Request, exc: _Unauthorized) -> JSONResponse:
        return JSONResponse(
            {"detail": "missing or invalid bearer token"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    @app.exception_handler(SubmissionError)
    async def _submission_error(_: Request, exc: SubmissionError) -> JSONResponse:
        return _submission_error_response(exc)

    app.add_exception_handler(PoolProblems, api_nodes.pool_problems)
    app.include_router(api_nodes.router(plane, principal))
    app.include_router(api_services.router(plane, services, principal))

    @app.exception_handler(_PolicyProblems)
    async def _policy_problems(_: Request, exc: _PolicyProblems) -> JSONResponse:
        detail = [
            {"loc": ["body", "policy", *([path] if path else [])], "msg": why, "type": "policy"}
            for path, why in exc.problems
        ]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.get("/healthz", response_model=Health, tags=["service"])
    def healthz() -> JSONResponse:
        """Liveness: 200 while the control loop runs here (``running``) or on another replica
        (``follower (leader: ...)``), 503 after it failed or while it has not gone round (or
        reported) within ``serve --stale-seconds``."""
        failed = plane.failed or plane.stalled
        loop = "running" if plane.leader else plane.role()
        body = {"ok": failed is None, "loop": loop if failed is None else f"failed: {failed}"}
        return JSONResponse(body, status_code=200 if failed is None else 503)

    @app.get("/metrics", tags=["service"], response_class=Response)
    def prometheus(who: Who) -> Response:
        """Prometheus metrics (admin or viewer tokens; see docs/service.md)."""
        if who.team is not None:
            raise Forbidden("metrics are for admin and viewer tokens")
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    # -- policy --------------------------------------------------------------------------------

    @app.get("/api/v1/policy", response_model=PolicyOut, tags=["policy"])
    def get_policy(who: Annotated[Principal, Depends(reader_of_policy)]) -> PolicyOut:
        """The policy in force (admin and viewer tokens)."""
        with store.read("policy-read") as conn:
            row = conn.execute(
                select(tables.policy_versions).order_by(tables.policy_versions.c.id.desc()).limit(1)
            ).one()
        return _policy_out(plane, row)

    @app.put("/api/v1/policy", response_model=PolicyOut, tags=["policy"])
    def put_policy(body: PolicyIn, who: Who) -> PolicyOut:
        """Replace the policy (admin only; written to the audit log). 422 names each bad
        field and why; 409 when teams with pending or admitted work would disappear."""
        if not who.admin:
            raise Forbidden("only an admin token may change the policy")
        policy = _parse_policy(body, plane)
        original = None if body.format == "fleetshare" else body.policy
        version = plane.set_policy(policy, body.format, original, who)
        with store.read("policy-read") as conn:
            row = conn.execute(
                select(tables.policy_versions).where(tables.policy_versions.c.id == version)
            ).one()
        return _policy_out(plane, row)

    @app.post(
        "/api/v1/what-if",
        response_model=WhatIfOut,
        tags=["policy"],
        responses={429: {"description": "another what-if is running"}},
    )
    def what_if(body: WhatIfIn, who: Annotated[Principal, Depends(reader_of_policy)]) -> Any:
        """Simulate the current and a proposed policy from now, on the current cluster,
        running and pending work, with the last ``hours`` of submissions replayed, and
        compare them per team (admitted, queue wait p50/p99, borrowed, preemptions) and for
        the cluster (utilisation). Bounded: at most ``max_workloads`` workloads, ``hours``
        ≤ 24 and a wall-clock budget per run (the response says what was left out). Admin
        and viewer tokens; nothing is changed."""
        policy = _parse_policy(body, plane)
        try:
            return whatif.what_if(plane, policy, body.hours, body.max_workloads)
        except whatif.Busy as exc:
            raise _TooMany(str(exc)) from None
        except whatif.NoPrice as exc:
            raise Conflict(str(exc)) from None

    # -- teams ---------------------------------------------------------------------------------

    def teams_of(view: View, who: Principal) -> list[TeamOut]:
        summary = team_usage(view.engine, view.nodes, list(view.running.values()), view.now)
        pending: dict[str, int] = {}
        for workload in view.pending.values():
            pending[workload.team] = pending.get(workload.team, 0) + 1
        admitted: dict[str, int] = {}
        for entry in view.running.values():
            admitted[entry.workload.team] = admitted.get(entry.workload.team, 0) + 1
        out = []
        for team in view.engine.policy.teams:
            if not who.sees_team(team.name):
                continue
            numbers = summary.get(team.name, {})
            out.append(
                TeamOut(
                    name=team.name,
                    cohort=team.group,
                    quota=numbers.get("quota", {}),
                    used=numbers.get("used", {}),
                    borrowed=numbers.get("borrowed", {}),
                    by_flavor=numbers.get("by_flavor", {}),
                    pending=pending.get(team.name, 0),
                    admitted=admitted.get(team.name, 0),
                )
            )
        return out

    @app.get("/api/v1/teams", response_model=list[TeamOut], tags=["teams"])
    def list_teams(who: Who) -> list[TeamOut]:
        """Every team's quota, usage and borrowing per resource (a team token: its own)."""
        return teams_of(plane.current_view(), who)

    @app.get("/api/v1/teams/{team}", response_model=TeamOut, tags=["teams"])
    def get_team(team: str, who: Who) -> TeamOut:
        """One team's quota, usage and borrowing, in total and per flavor."""
        for out in teams_of(plane.current_view(), who):
            if out.name == team:
                return out
        raise NotFound(f"no team {team!r}")

    @app.put(
        "/api/v1/teams/{team}",
        response_model=PolicyOut,
        tags=["teams"],
        responses={201: {"description": "the team was added"}},
    )
    def put_team(
        team: Annotated[str, PathParam(max_length=253)],
        body: Annotated[
            dict[str, Any],
            Body(
                description="The team as in a fleetshare policy's `teams` list (quota, "
                "group, sharing, limits, weight, ...); its name is the path's",
                examples=[{"quota": [{"instance_type": "ml.g5.12xlarge", "count": 2}]}],
            ),
        ],
        who: Who,
        response: Response,
    ) -> PolicyOut:
        """Add or replace one team of the policy in force (admin only): a new policy
        version, audited, as a PUT of the whole policy would make, without reading and
        sending the rest of it; 201 when the team is new. 422 names each bad field."""
        try:
            version, added = plane.change_team(team, body, who)
        except PolicyError as exc:
            raise _PolicyProblems(exc.problems) from None
        except InputError as exc:
            raise _PolicyProblems([("", exc.why)]) from None
        if added:
            response.status_code = 201
        return _policy_version(version)

    @app.delete("/api/v1/teams/{team}", response_model=PolicyOut, tags=["teams"])
    def delete_team(team: Annotated[str, PathParam(max_length=253)], who: Who) -> PolicyOut:
        """Remove one team from the policy in force (admin only; a new policy version); 409
        while it has pending or admitted work, 404 if there is no such team."""
        version, _ = plane.change_team(team, None, who)
        return _policy_version(version)

    def _policy_version(version: int) -> PolicyOut:
        with store.read("policy-read") as conn:
            row = conn.execute(
                select(tables.policy_versions).where(tables.policy_versions.c.id == version)
            ).one()
        return _policy_out(plane, row)

    # -- workloads -----------------------------------------------------------------------------

    def visible(name: str, who: Principal) -> Row[Any]:
        with store.read("workloads-read") as conn:
            row = conn.execute(
                select(tables.workloads).where(tables.workloads.c.name == name)
            ).first()
        if row is None or not who.sees_team(row.team):
            raise NotFound(f"no workload {name!r}")
        return row

    @app.post(
        "/api/v1/workloads",
        response_model=WorkloadOut,
        status_code=201,
        tags=["workloads"],
        openapi_extra={"requestBody": SUBMIT_BODY},
    )
    async def submit(request: Request, who: Who) -> Response:
        """Submit a workload: fleetshare's native spec, or Kubernetes objects making one
        workload (batch/v1 Job, PyTorchJob, JobSet, RayJob, RayCluster, a Pod or one pod
        group), as JSON or YAML text (``Content-Type: application/yaml``). A manifest's team
        is its queue label's (``kueue.x-k8s.io/queue-name``, ``fleetshare.io/team``); a team
        token may submit to its own team only (403). ``submit_at`` is ignored: it is
        submitted now. 201 once it is committed to the store; 422 names the document and
        field."""
        body = await request.body()
        return await submitted(who, body, request.headers.get("content-type", ""))

    async def submitted(who: Principal, body: bytes, content_type: str) -> Response:
        """The submission endpoint's work (for the route and the :class:`Shortcut`)."""
        if not who.can_write_workloads:
            raise Forbidden("a viewer token cannot submit workloads")
        if len(body) <= INLINE_BODY_BYTES and "json" in content_type:
            sub = _read_submission(body, content_type, plane.policy, who)
        else:  # YAML, or a large body: parsing it would hold up the event loop
            sub = await run_in_threadpool(_read_submission, body, content_type, plane.policy, who)
        # the row as committed, not read back (the loop may have admitted it meanwhile)
        out = _workload_out(plane, await plane.submit_async(sub.spec, who))
        out.notes = list(sub.notes)
        return Response(out.model_dump_json(), status_code=201, media_type="application/json")

    async def shortcut(who: Principal, body: bytes, content_type: str) -> Response | None:
        """:func:`submitted` for the :class:`Shortcut`: a refused body (nothing committed)
        goes to the app, whose middleware answers a malformed one; the store's refusals are
        answered as the app's exception handler does."""
        try:
            return await submitted(who, body, content_type)
        except SubmissionError:
            return None
        except ServiceError as exc:
            return _service_error_response(exc)

    # outermost: the hot path skips the middleware (its body checks are the same parse_json
    # that _read_submission runs), the router and dependency solving
    app.add_middleware(
        Shortcut,
        path="/api/v1/workloads",
        principal=tokens.principal,
        handler=shortcut,
        max_bytes=INLINE_BODY_BYTES,
    )
    # outermost of all: every request is timed, the hot path's too
    app.add_middleware(RequestMetrics, duration=metrics.http, fixed=("/api/v1/workloads",))

    @app.get("/api/v1/workloads", response_model=WorkloadPage, tags=["workloads"])
    def list_workloads(
        who: Who,
        team: Annotated[str | None, Query(max_length=253)] = None,
        state: Annotated[
            Literal["pending", "admitted", "finished", "cancelled"] | None, Query()
        ] = None,
        after: Annotated[
            int, Query(ge=0, le=tables.MAX_ID, description="list ids after this one")
        ] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    ) -> WorkloadPage:
        """Workloads in submit order, filtered by team and state, a page at a time."""
        w = tables.workloads
        query = select(w).where(w.c.id > after).order_by(w.c.id).limit(limit + 1)
        if who.team is not None:
            query = query.where(w.c.team == who.team)
        if team is not None:
            query = query.where(w.c.team == team)
        if state is not None:
            query = query.where(w.c.state == state)
        with store.read("workloads-read") as conn:
            rows = conn.execute(query).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return WorkloadPage(
            items=[_workload_out(plane, r._mapping) for r in rows],
            next_after=rows[-1].id if more else None,
        )

    @app.get("/api/v1/workloads/{name}", response_model=WorkloadOut, tags=["workloads"])
    def get_workload(name: str, who: Who) -> WorkloadOut:
        """One workload."""
        return _workload_out(plane, visible(name, who)._mapping)

    @app.delete("/api/v1/workloads/{name}", response_model=WorkloadOut, tags=["workloads"])
    def cancel_workload(name: str, who: Who) -> WorkloadOut:
        """Cancel a pending or admitted workload (409 when it ended already)."""
        plane.cancel(name, who)
        return _workload_out(plane, visible(name, who)._mapping)

    @app.get("/api/v1/workloads/{name}/explain", response_model=Explanation, tags=["workloads"])
    def explain(name: str, who: Who) -> Explanation:
        """Why a workload waits (the reason with numbers) and its place in its team's queue."""
        row = visible(name, who)
        view = plane.view  # one view for the reason and its category
        out = _workload_out(plane, row._mapping, view)
        reason = out.pending_reason
        if row.state == "pending" and reason is None:
            reason = "submitted; the control loop has not considered it yet"
        waiting = view.waiting.get(row.name) if row.state == "pending" else None
        return Explanation(
            name=out.name,
            team=out.team,
            state=out.state,
            reason=reason,
            category=waiting.reason.category if waiting else None,
            queue_position=out.queue_position,
            flavors=out.flavors,
            nodes=out.nodes,
        )

    # -- nodes and events ----------------------------------------------------------------------

    @app.get("/api/v1/nodes", response_model=list[NodeOut], tags=["nodes"])
    def list_nodes(who: Who) -> list[NodeOut]:
        """The cluster's nodes (a team token sees only its own workloads on them)."""
        view = plane.current_view()
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

    def event_out(r: Row[Any], who: Principal) -> EventOut:
        """An event as ``who`` may see it (another team's preemptor is not named)."""
        details = dict(r.details)
        if "by_team" in details:
            if who.team is not None and details["by_team"] not in (None, who.team):
                details["by"] = "a workload of another team"
                # the engine's message names the preemptor and its team
                details["message"] = _FOREIGN_PREEMPTION.get(
                    str(details.get("reason")), "preempted by a workload of another team"
                ).format(team=who.team)
            details.pop("by_team")
        return EventOut(
            id=r.id,
            at=plane.datetime(r.at) or "",
            kind=r.kind,
            workload=r.workload,
            team=r.team,
            details=details,
        )

    def events_after(who: Principal, after: int, limit: int) -> list[Row[Any]]:
        e = tables.events
        query = select(e).where(e.c.id > after).order_by(e.c.id).limit(limit)
        if who.team is not None:
            query = query.where(e.c.team == who.team)
        with store.read("events-read") as conn:
            return list(conn.execute(query).all())

    def stream_start(who: Principal, backlog: int) -> int:
        """The id after which a stream without a position starts: the latest event, less
        ``backlog`` of those ``who`` sees."""
        e = tables.events
        with store.read("events-read") as conn:
            latest = conn.execute(select(func.max(e.c.id))).scalar() or 0
            if not backlog:
                return int(latest)
            query = select(e.c.id).where(e.c.id <= latest).order_by(e.c.id.desc()).limit(backlog)
            if who.team is not None:
                query = query.where(e.c.team == who.team)
            ids = list(conn.execute(query).scalars())
        return min(ids) - 1 if ids else int(latest)

    streams = _Streams(MAX_STREAMS)

    @app.get(
        "/api/v1/events/stream",
        tags=["events"],
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "server-sent events: `id:` the event id, `data:` an Event",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            429: {"description": "too many open streams"},
        },
    )
    async def stream_events(
        request: Request,
        who: Who,
        after: Annotated[
            int | None,
            Query(ge=0, le=tables.MAX_ID, description="start after this event id (default: now)"),
        ] = None,
        backlog: Annotated[
            int,
            Query(ge=0, le=MAX_PAGE, description="without a position: first send this many"),
        ] = 0,
        last_event_id: Annotated[
            str | None,
            Header(
                alias="Last-Event-ID",
                max_length=20,
                description="resume after this id (what EventSource sends on reconnecting)",
            ),
        ] = None,
    ) -> StreamingResponse:
        """The event log as a server-sent event stream, scoped as ``/api/v1/events`` (a
        team token sees its own team's). Each message is ``id: N`` and ``data: {Event}``;
        a comment every 15 s keeps it open. It starts after ``Last-Event-ID`` (a reconnect),
        else after ``?after=``, else at the latest event (less ``backlog`` of them)."""
        start = after
        if last_event_id is not None:
            start = _event_position(last_event_id)
        if start is None:
            start = await run_in_threadpool(stream_start, who, backlog)
        if not streams.enter():
            raise _TooMany(f"at most {MAX_STREAMS} event streams are open; try again later")
        header = request.headers.get("authorization")

        async def messages() -> AsyncIterator[str]:
            position = start
            quiet = 0.0
            checked = time.monotonic()
            try:
                yield f"retry: {STREAM_RETRY_MS}\n\n"
                while not await request.is_disconnected():
                    if time.monotonic() - checked > STREAM_REAUTH_SECONDS:
                        checked = time.monotonic()
                        if await run_in_threadpool(authenticate, store, header) is None:
                            return  # the token was revoked
                    rows = await run_in_threadpool(events_after, who, position, MAX_PAGE)
                    for r in rows:
                        data = event_out(r, who).model_dump_json()
                        yield f"id: {r.id}\ndata: {data}\n\n"
                        position = r.id
                    if rows:
                        quiet = 0.0
                        continue
                    if quiet >= STREAM_KEEPALIVE_SECONDS:
                        quiet = 0.0
                        yield ": keepalive\n\n"
                    await asyncio.sleep(STREAM_POLL_SECONDS)
                    quiet += STREAM_POLL_SECONDS
            finally:
                streams.leave()

        return StreamingResponse(
            messages(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get("/api/v1/cluster", response_model=ClusterOut, tags=["nodes"])
    def cluster(who: Who) -> ClusterOut:
        """The idle pool: per resource, the capacity of Ready and schedulable nodes, what
        admitted work uses of it and what is idle; nodes by instance and capacity type with
        their hourly cost. Totals only (a team token sees no other team's work in them)."""
        view = plane.current_view()
        up = {n.name for n in view.nodes if n.ready and n.schedulable}
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
        resources = {
            r: ResourceOut(
                capacity=to_number(c),
                used=to_number(used.get(r, 0)),
                idle=to_number(max(0, c - used.get(r, 0))),
            )
            for r, c in sorted(capacity.items())
        }
        groups: dict[tuple[str | None, str], list[float | None]] = {}
        for node in view.nodes:
            info = view.node_info.get(node.name)
            price = info.price_per_hour if info else None
            groups.setdefault((node.instance_type, node.capacity_type), []).append(price)
        out_groups = [
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
        return ClusterOut(
            resources=resources,
            nodes=len(view.nodes),
            schedulable_nodes=len(up),
            price_per_hour=round(sum(g.price_per_hour or 0.0 for g in out_groups), 4),
            groups=out_groups,
        )

    @app.get("/api/v1/whoami", response_model=WhoAmI, tags=["service"])
    def whoami(who: Who) -> WhoAmI:
        """The caller's token: its scope and what it may do (the dashboard asks)."""
        return WhoAmI(
            scope=who.scope,
            team=who.team,
            token_id=who.token_id,
            can_submit=who.can_write_workloads,
            can_read_policy=who.team is None,
        )

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        """The dashboard (it asks for a token and calls the API with it)."""
        return FileResponse(DASHBOARD / "index.html", headers=PAGE_HEADERS)

    app.mount("/dashboard", _Static(directory=DASHBOARD), name="dashboard")

    @app.get("/api/v1/events", response_model=EventPage, tags=["events"])
    def list_events(
        who: Who,
        after: Annotated[
            int, Query(ge=0, le=tables.MAX_ID, description="events with ids after this one")
        ] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    ) -> EventPage:
        """The event log in order (admit, preempt with reason, finish, cancel, node join and
        leave, policy changes, autoscaler actions), a page at a time; a team token sees its
        own team's events."""
        rows = events_after(who, after, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        items = [event_out(r, who) for r in rows]
        return EventPage(items=items, next_after=rows[-1].id if more else None)

    return app


class _Unauthorized(Exception):
    pass


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


def _event_position(last_event_id: str) -> int:
    """The position a reconnecting stream sends back: one of the ids it was sent (422 on the
    header otherwise)."""
    text = last_event_id.strip()
    if not (text.isascii() and text.isdigit() and int(text) <= tables.MAX_ID):
        raise RequestValidationError(
            [
                {
                    "loc": ["header", "Last-Event-ID"],
                    "msg": f"an event id, 0 to {tables.MAX_ID}",
                    "type": "value_error",
                }
            ]
        )
    return int(text)


class _Static(StaticFiles):
    """The dashboard's files, with the page's security headers."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(PAGE_HEADERS)
        return response


class _TooMany(ServiceError):
    status = 429


class _Streams:
    """Counts open event streams (at most ``limit``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.open >= self.limit:
                return False
            self.open += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.open -= 1


class _PolicyProblems(Exception):
    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(problems)
        self.problems = problems


def _parse_policy(body: PolicyIn, plane: ControlPlane) -> Policy:
    """The policy of a request, validated and compiled against the catalog, or 422."""
    from fleetshare.policy.hyperpod import import_hyperpod
    from fleetshare.policy.kueue import import_kueue

    try:
        source = body.policy
        if body.format == "fleetshare":
            data = parse_yaml(source, "policy") if isinstance(source, str) else source
            policy = load_policy(data, "policy")
        elif body.format == "kueue":
            if isinstance(source, dict):
                source = [source]
            policy = import_kueue(source)
        else:
            policy = import_hyperpod(source, borrow_limit_reading=body.borrow_limit_reading)
        compile_policy(policy, plane.catalog)
    except PolicyError as exc:
        raise _PolicyProblems(exc.problems) from None
    except InputError as exc:
        raise _PolicyProblems([("", exc.why)]) from None
    except (ValueError, TypeError, KeyError) as exc:
        raise Invalid(str(exc), "policy") from None
    return policy


def _policy_out(plane: ControlPlane, row: Row[Any]) -> PolicyOut:
    notes = row.document.get("notes", []) if isinstance(row.document, dict) else []
    return PolicyOut(
        version=row.id,
        created_at=plane.datetime(row.created_at) or "",
        source_format=row.source_format,
        author=row.author,
        policy=row.document,
        notes=list(notes),
    )


def _service_error_response(exc: ServiceError) -> JSONResponse:
    if exc.status == 422:  # shaped as FastAPI's (the spec's HTTPValidationError)
        loc = ["body"] if exc.field is None else ["body", exc.field]
        detail = [{"loc": loc, "msg": exc.message, "type": "value_error"}]
        return JSONResponse({"detail": detail}, status_code=422)
    return JSONResponse({"detail": exc.message}, status_code=exc.status)


def _submission_error_response(exc: SubmissionError) -> JSONResponse:
    if exc.status != 422:
        return JSONResponse({"detail": exc.problems[0][1]}, status_code=exc.status)
    detail = [{"loc": loc, "msg": msg, "type": "submission"} for loc, msg in exc.problems]
    return JSONResponse({"detail": detail}, status_code=422)


def _read_submission(body: bytes, content_type: str, policy: Policy, who: Principal) -> Submission:
    """The body of a submission as a spec for ``policy`` (see :mod:`.submission`)."""
    data = read_body(body, content_type)
    if is_manifest(data):
        sub = manifest(data, policy, who)
    else:
        spec = native(data)
        check_spec(spec, policy, who)
        sub = Submission(spec)
    check_name(sub.spec)
    return sub


def _workload_out(
    plane: ControlPlane, row: Mapping[Any, Any], view: View | None = None
) -> WorkloadOut:
    """A workload row (read, or as just committed) as the API shows it (its pending reason
    from ``view``, by default the plane's latest)."""
    assignment = row["assignment"] or {"flavors": [], "placement": []}
    waiting = (view or plane.view).waiting.get(row["name"]) if row["state"] == "pending" else None
    spec = dict(row["spec"])
    podsets = spec.get("podsets") or [{"count": spec.get("pods", 1)}]
    return WorkloadOut(
        id=row["id"],
        name=row["name"],
        team=row["team"],
        state=row["state"],
        priority_class=row["priority_class"],
        priority=row["priority"],
        pods=sum(int(ps.get("count", 1)) for ps in podsets),
        spec=spec,
        submitted_at=plane.datetime(row["submitted_at"]) or "",
        admitted_at=plane.datetime(row["admitted_at"]),
        finished_at=plane.datetime(row["finished_at"]),
        flavors=list(dict.fromkeys(assignment["flavors"])),
        nodes=sorted({n for ps in assignment["placement"] for n, _ in ps}),
        borrowed=dict(row["borrowed"] or {}),
        preemptions=row["preemptions"],
        pending_reason=waiting.reason if waiting else None,
        queue_position=waiting.position if waiting else None,
    )
