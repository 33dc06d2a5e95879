"""The REST endpoints for workloads (part of the API of :mod:`fleetshare.service.api`).

``POST /api/v1/workloads``: submit one (a native spec or Kubernetes objects, JSON or YAML; the
:class:`Submitter` also answers the :class:`~fleetshare.service.shortcut.Shortcut`). ``GET
/api/v1/workloads`` (a page, filtered), ``GET`` and ``DELETE /api/v1/workloads/{name}`` (one;
cancel it) and ``GET /api/v1/workloads/{name}/explain`` (why it waits). A team token sees its
own team's workloads only: another team's is a 404, as one that does not exist.
"""

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import BaseModel, Field
from sqlalchemy import Row, select

from fleetshare.model.reason import PendingCategory
from fleetshare.policy.schema import Policy
from fleetshare.service import store as tables
from fleetshare.service.api_errors import service_error_response
from fleetshare.service.auth import Principal
from fleetshare.service.plane import ControlPlane, Forbidden, NotFound, ServiceError, View
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
"""The most items one page of a list holds."""
INLINE_BODY_BYTES = 16 << 10
"""A JSON submission up to this size is read on the event loop (no thread hop); YAML and
larger bodies are read in a worker thread."""


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


class Submitter:
    """The submission endpoint's work, for the route and for the
    :class:`~fleetshare.service.shortcut.Shortcut`."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    async def __call__(self, who: Principal, body: bytes, content_type: str) -> Response:
        """Read, check and commit a submission: 201 with the row as committed."""
        plane = self.plane
        if not who.can_write_workloads:
            raise Forbidden("a viewer token cannot submit workloads")
        if len(body) <= INLINE_BODY_BYTES and "json" in content_type:
            sub = _read_submission(body, content_type, plane.policy, who)
        else:  # YAML, or a large body: parsing it would hold up the event loop
            sub = await run_in_threadpool(_read_submission, body, content_type, plane.policy, who)
        # the row as committed, not read back (the loop may have admitted it meanwhile)
        out = workload_out(plane, await plane.submit_async(sub.spec, who))
        out.notes = list(sub.notes)
        return Response(out.model_dump_json(), status_code=201, media_type="application/json")

    async def shortcut(self, who: Principal, body: bytes, content_type: str) -> Response | None:
        """The submission for the :class:`~fleetshare.service.shortcut.Shortcut`: a refused
        body (nothing committed) goes to the app, whose middleware answers a malformed one;
        the store's refusals are answered as the app's exception handler does."""
        try:
            return await self(who, body, content_type)
        except SubmissionError:
            return None
        except ServiceError as exc:
            return service_error_response(exc)


def router(
    plane: ControlPlane, principal: Callable[..., Awaitable[Principal]], submitted: Submitter
) -> APIRouter:
    """The endpoints over ``plane``; ``principal`` authenticates a request, ``submitted``
    takes a submission."""
    routes = APIRouter()
    Who = Annotated[Principal, Depends(principal)]

    def visible(name: str, who: Principal) -> Row[Any]:
        with plane.store.read("workloads-read") as conn:
            row = conn.execute(
                select(tables.workloads).where(tables.workloads.c.name == name)
            ).first()
        if row is None or not who.sees_team(row.team):
            raise NotFound(f"no workload {name!r}")
        return row

    @routes.post(
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

    @routes.get("/api/v1/workloads", response_model=WorkloadPage, tags=["workloads"])
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
        with plane.store.read("workloads-read") as conn:
            rows = conn.execute(query).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return WorkloadPage(
            items=[workload_out(plane, r._mapping) for r in rows],
            next_after=rows[-1].id if more else None,
        )

    @routes.get("/api/v1/workloads/{name}", response_model=WorkloadOut, tags=["workloads"])
    def get_workload(name: str, who: Who) -> WorkloadOut:
        """One workload."""
        return workload_out(plane, visible(name, who)._mapping)

    @routes.delete("/api/v1/workloads/{name}", response_model=WorkloadOut, tags=["workloads"])
    def cancel_workload(name: str, who: Who) -> WorkloadOut:
        """Cancel a pending or admitted workload (409 when it ended already)."""
        plane.cancel(name, who)
        return workload_out(plane, visible(name, who)._mapping)

    @routes.get("/api/v1/workloads/{name}/explain", response_model=Explanation, tags=["workloads"])
    def explain(name: str, who: Who) -> Explanation:
        """Why a workload waits (the reason with numbers) and its place in its team's queue."""
        row = visible(name, who)
        view = plane.view  # one view for the reason and its category
        out = workload_out(plane, row._mapping, view)
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

    return routes


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


def workload_out(
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
