"""The REST endpoints for the policy (part of the API of :mod:`fleetshare.service.api`).

``GET /api/v1/policy`` (admin and viewer tokens): the policy in force. ``PUT /api/v1/policy``
(admin): replace it, in fleetshare's format or imported from Kueue or HyperPod. ``POST
/api/v1/what-if`` (admin and viewer tokens): the current and a proposed policy simulated from
now and compared.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field
from sqlalchemy import Row, select

from fleetshare.governance.quota import compile_policy
from fleetshare.inputs import InputError, parse_yaml
from fleetshare.policy.reading import DEFAULT_READING, BorrowLimitReading
from fleetshare.policy.schema import Policy, PolicyError, load_policy
from fleetshare.service import store as tables
from fleetshare.service import whatif
from fleetshare.service.api_errors import PolicyProblems, TooMany
from fleetshare.service.auth import Principal
from fleetshare.service.plane import Conflict, ControlPlane, Forbidden, Invalid


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


def router(plane: ControlPlane, principal: Callable[..., Awaitable[Principal]]) -> APIRouter:
    """The endpoints over ``plane``; ``principal`` authenticates a request."""
    routes = APIRouter()
    Who = Annotated[Principal, Depends(principal)]

    def reader_of_policy(who: Who) -> Principal:
        if who.team is not None:
            raise Forbidden("team tokens cannot read the policy; ask for /api/v1/teams/{team}")
        return who

    @routes.get("/api/v1/policy", response_model=PolicyOut, tags=["policy"])
    def get_policy(who: Annotated[Principal, Depends(reader_of_policy)]) -> PolicyOut:
        """The policy in force (admin and viewer tokens)."""
        with plane.store.read("policy-read") as conn:
            row = conn.execute(
                select(tables.policy_versions).order_by(tables.policy_versions.c.id.desc()).limit(1)
            ).one()
        return policy_out(plane, row)

    @routes.put("/api/v1/policy", response_model=PolicyOut, tags=["policy"])
    def put_policy(body: PolicyIn, who: Who) -> PolicyOut:
        """Replace the policy (admin only; written to the audit log). 422 names each bad
        field and why; 409 when teams with pending or admitted work would disappear."""
        if not who.admin:
            raise Forbidden("only an admin token may change the policy")
        policy = parse_policy(body, plane)
        original = None if body.format == "fleetshare" else body.policy
        version = plane.set_policy(policy, body.format, original, who)
        return policy_version(plane, version)

    @routes.post(
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
        policy = parse_policy(body, plane)
        try:
            return whatif.what_if(plane, policy, body.hours, body.max_workloads)
        except whatif.Busy as exc:
            raise TooMany(str(exc)) from None
        except whatif.NoPrice as exc:
            raise Conflict(str(exc)) from None

    return routes


def parse_policy(body: PolicyIn, plane: ControlPlane) -> Policy:
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
        raise PolicyProblems(exc.problems) from None
    except InputError as exc:
        raise PolicyProblems([("", exc.why)]) from None
    except (ValueError, TypeError, KeyError) as exc:
        raise Invalid(str(exc), "policy") from None
    return policy


def policy_version(plane: ControlPlane, version: int) -> PolicyOut:
    """Policy version ``version`` as the API shows it."""
    with plane.store.read("policy-read") as conn:
        row = conn.execute(
            select(tables.policy_versions).where(tables.policy_versions.c.id == version)
        ).one()
    return policy_out(plane, row)


def policy_out(plane: ControlPlane, row: Row[Any]) -> PolicyOut:
    notes = row.document.get("notes", []) if isinstance(row.document, dict) else []
    return PolicyOut(
        version=row.id,
        created_at=plane.datetime(row.created_at) or "",
        source_format=row.source_format,
        author=row.author,
        policy=row.document,
        notes=list(notes),
    )
