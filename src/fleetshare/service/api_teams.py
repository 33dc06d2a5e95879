"""The REST endpoints for teams (part of the API of :mod:`fleetshare.service.api`).

``GET /api/v1/teams`` and ``GET /api/v1/teams/{team}`` (any token; a team token sees its own
team only): each team's quota, usage and borrowing. ``PUT`` and ``DELETE
/api/v1/teams/{team}`` (admin): add, replace or remove one team of the policy in force, as a
new policy version.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Response
from fastapi import Path as PathParam
from pydantic import BaseModel

from fleetshare.inputs import InputError
from fleetshare.policy.schema import PolicyError
from fleetshare.scenario.report import team_usage
from fleetshare.service.api_errors import PolicyProblems
from fleetshare.service.api_policy import PolicyOut, policy_version
from fleetshare.service.auth import Principal
from fleetshare.service.plane import ControlPlane, NotFound, View


class TeamOut(BaseModel):
    name: str
    cohort: str | None
    quota: dict[str, float]
    used: dict[str, float]
    borrowed: dict[str, float]
    by_flavor: dict[str, dict[str, dict[str, float]]]
    pending: int
    admitted: int


def teams_of(view: View, who: Principal) -> list[TeamOut]:
    """The teams of ``view`` that ``who`` sees, with their numbers."""
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


def router(plane: ControlPlane, principal: Callable[..., Awaitable[Principal]]) -> APIRouter:
    """The endpoints over ``plane``; ``principal`` authenticates a request."""
    routes = APIRouter()
    Who = Annotated[Principal, Depends(principal)]

    @routes.get("/api/v1/teams", response_model=list[TeamOut], tags=["teams"])
    def list_teams(who: Who) -> list[TeamOut]:
        """Every team's quota, usage and borrowing per resource (a team token: its own)."""
        return teams_of(plane.current_view(), who)

    @routes.get("/api/v1/teams/{team}", response_model=TeamOut, tags=["teams"])
    def get_team(team: str, who: Who) -> TeamOut:
        """One team's quota, usage and borrowing, in total and per flavor."""
        for out in teams_of(plane.current_view(), who):
            if out.name == team:
                return out
        raise NotFound(f"no team {team!r}")

    @routes.put(
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
            raise PolicyProblems(exc.problems) from None
        except InputError as exc:
            raise PolicyProblems([("", exc.why)]) from None
        if added:
            response.status_code = 201
        return policy_version(plane, version)

    @routes.delete("/api/v1/teams/{team}", response_model=PolicyOut, tags=["teams"])
    def delete_team(team: Annotated[str, PathParam(max_length=253)], who: Who) -> PolicyOut:
        """Remove one team from the policy in force (admin only; a new policy version); 409
        while it has pending or admitted work, 404 if there is no such team."""
        version, _ = plane.change_team(team, None, who)
        return policy_version(plane, version)

    return routes
