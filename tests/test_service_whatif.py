"""POST /api/v1/what-if: the simulator on the service's state and recent history, with the
current and a proposed policy (in process: the app over a plane on a temporary store)."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetshare.service.api import create_app
from fleetshare.service.auth import create_token
from fleetshare.service.config import load_config
from fleetshare.service.plane import ControlPlane
from fleetshare.service.store import Store
from tests.service_helpers import job, wait_for


@pytest.fixture(scope="module")
def service(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """Team-a runs three one-GPU jobs of 30 min (quota 2, borrowing 1) with a fourth waiting
    for the borrow limit; team-b nothing."""
    path: Path = tmp_path_factory.mktemp("whatif") / "fleetshare.db"
    plane = ControlPlane(load_config(None), Store(f"sqlite:///{path}"))
    tokens = {s: create_token(plane.store, s)[1] for s in ("admin", "viewer", "team:team-a")}
    with TestClient(create_app(plane)) as client:
        client.headers["Authorization"] = f"Bearer {tokens['admin']}"
        for i in range(4):
            response = client.post("/api/v1/workloads", json=job(f"a{i}", "team-a", duration=1800))
            assert response.status_code == 201, response.text

        def settled() -> bool:
            states = [client.get(f"/api/v1/workloads/a{i}").json() for i in range(4)]
            return [s["state"] for s in states].count("admitted") == 3 and any(
                s["pending_reason"] for s in states
            )

        wait_for(settled)
        yield client, tokens
    plane.store.close()


def policy_of(client: TestClient) -> dict[str, Any]:
    policy: dict[str, Any] = client.get("/api/v1/policy").json()["policy"]
    return policy


def test_the_same_policy_gives_the_same_numbers(service: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = service
    response = client.post("/api/v1/what-if", json={"policy": policy_of(client), "hours": 1})
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["resource"] == "nvidia.com/gpu"
    assert out["bounds"]["running"] == 3 and out["bounds"]["pending"] == 1
    assert out["bounds"]["replayed"] == 4 and out["bounds"]["left_out"] == {}
    assert out["current"] == out["proposed"]
    assert all(t["current"] == t["proposed"] for t in out["teams"])
    assert [t["team"] for t in out["teams"]] == ["team-a", "team-b"]


def test_more_borrowing_shortens_team_as_wait(service: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = service
    proposed = copy.deepcopy(policy_of(client))
    for team in proposed["teams"]:
        team["borrow_limits"] = [{"percent_of_quota": 100}]
    started = time.monotonic()
    response = client.post("/api/v1/what-if", json={"policy": proposed, "hours": 1})
    assert time.monotonic() - started < 20
    assert response.status_code == 200, response.text
    out = response.json()
    a = next(t for t in out["teams"] if t["team"] == "team-a")
    # now: the fourth job waits until one of the three running ends (~30 min);
    # proposed: team-a may borrow two GPUs, so it runs at once
    assert 1700 <= a["current"]["wait_p99_seconds"] <= 1800
    assert a["proposed"]["wait_p99_seconds"] < 60
    assert a["current"]["workloads"] == a["proposed"]["workloads"] == 5
    assert a["proposed"]["borrowed_hours"] >= a["current"]["borrowed_hours"]
    assert out["proposed"]["cluster"]["utilisation"] >= out["current"]["cluster"]["utilisation"]
    assert not out["current"]["stopped_early"] and out["current"]["simulated_hours"] <= 1


def test_bounds_are_kept_and_said(service: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = service
    body = {"policy": policy_of(client), "hours": 1, "max_workloads": 5}
    out = client.post("/api/v1/what-if", json=body).json()
    assert out["bounds"]["running"] == 3 and out["bounds"]["pending"] == 1
    assert out["bounds"]["replayed"] == 1 and out["bounds"]["left_out"] == {"replay": 3}
    for bad in ({"hours": 25}, {"hours": 0}, {"max_workloads": 0}, {"max_workloads": 10**6}):
        response = client.post("/api/v1/what-if", json={"policy": policy_of(client), **bad})
        assert response.status_code == 422
        assert next(iter(bad)) in str(response.json()["detail"])


@pytest.mark.parametrize("max_workloads", [1, 3])
def test_a_bound_holding_running_work_only_is_answered(
    service: tuple[TestClient, dict[str, str]], max_workloads: int
) -> None:
    """A bound the running work fills (its three all take part; nothing is submitted in the
    run) is a 200 with the numbers of what ran, not a 500."""
    client, _ = service
    body = {"policy": policy_of(client), "hours": 1, "max_workloads": max_workloads}
    response = client.post("/api/v1/what-if", json=body)
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["bounds"]["running"] == 3 and out["bounds"]["pending"] == 0  # running all
    for run in ("current", "proposed"):
        cluster = out[run]["cluster"]
        assert cluster["workloads"] == 0 and cluster["used_hours"] > 0


def test_a_proposed_policy_dropping_a_team_says_so(
    service: tuple[TestClient, dict[str, str]],
) -> None:
    client, _ = service
    only_b = {**policy_of(client), "teams": policy_of(client)["teams"][1:]}
    out = client.post("/api/v1/what-if", json={"policy": only_b, "hours": 1}).json()
    assert any("team team-a is not in the policy" in n for n in out["notes"])
    a = next(t for t in out["teams"] if t["team"] == "team-a")
    assert a["proposed"] is None and a["current"] is not None


def test_who_may_ask_and_what_is_refused(service: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = service
    policy = policy_of(client)
    viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
    team = {"Authorization": f"Bearer {tokens['team:team-a']}"}
    body = {"policy": policy, "hours": 0.5}
    assert client.post("/api/v1/what-if", json=body, headers=viewer).status_code == 200
    assert client.post("/api/v1/what-if", json=body, headers=team).status_code == 403
    assert (
        client.post("/api/v1/what-if", json=body, headers={"Authorization": ""}).status_code == 401
    )
    bad = {"policy": {"teams": [{"name": "team-a", "sharing": "Hoard"}]}}
    response = client.post("/api/v1/what-if", json=bad)
    assert response.status_code == 422 and "sharing" in str(response.json()["detail"])
    # nothing changed
    assert client.get("/api/v1/policy").json()["version"] == 1


def test_unknown_query_parameters_are_refused(service: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = service
    response = client.get("/api/v1/workloads", params={"stat": "pending"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "stat"]
    assert client.get("/api/v1/workloads", params={"state": "pending"}).status_code == 200
