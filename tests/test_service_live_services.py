"""Live services in ``fleetshare serve``: a service registered through the API has its
replica workloads follow a real Prometheus' query (tests/prometheus_server.py), in process
(the app over a plane on a temporary store); it is kept in the store, so a real server killed
with SIGKILL takes it over again without doubling its replicas, a follower registers and
deletes, and the leader's scaler resumes from the replicas that exist (a fake Prometheus
answer, ``_Answers``, for the turn-by-turn tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from fleetshare.service import store as tables
from fleetshare.service.api import create_app
from fleetshare.service.auth import Principal, create_token
from fleetshare.service.live_services import LiveServices, LiveServiceSpec
from fleetshare.service.plane import ControlPlane, NotFound
from fleetshare.service.store import Store
from fleetshare.service.stored_services import replica_serial
from tests.prometheus_server import Counter
from tests.service_helpers import config_file_listing, config_listing, start_server, wait_for

INVALID = config_listing({"invalid": "http://prometheus.invalid"})
"""The default config listing a Prometheus that is never reached (the tests answer for it)."""


@pytest.fixture
def service(
    tmp_path: Path, prometheus: tuple[str, Counter]
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    config = config_listing({"main": prometheus[0]})
    plane = ControlPlane(config, Store(f"sqlite:///{tmp_path / 'fleetshare.db'}"))
    scopes = ("admin", "viewer", "team:team-a", "team:team-b")
    tokens = {s: create_token(plane.store, s)[1] for s in scopes}
    with TestClient(create_app(plane)) as client:
        client.headers["Authorization"] = f"Bearer {tokens['team:team-a']}"
        yield client, tokens
    plane.store.close()


def _spec(address: str, name: str = "chat", **scaler: Any) -> dict[str, Any]:
    return {
        "name": name,
        "team": "team-a",
        "replica": {"requests": {"cpu": 1}},
        "scaler": {
            "min_replicas": 1,
            "max_replicas": 10,
            "polling_interval_seconds": 1,
            "behavior": {
                "scale_down": {
                    "stabilization_window_seconds": 0,
                    "policies": [{"type": "Percent", "value": 100, "period_seconds": 15}],
                }
            },
            "triggers": [
                {
                    "metric": "rps",
                    "target": 7,
                    "prometheus": {
                        "server_address": address,
                        "query": "sum(rate(chat_requests_total[4s]))",
                    },
                }
            ],
            **scaler,
        },
    }


def _replicas(client: TestClient, count: int) -> list[str] | None:
    (chat,) = client.get("/api/v1/services").json()
    return list(chat["replicas"]) if len(chat["replicas"]) == count else None


def test_replica_workloads_follow_the_query(
    service: tuple[TestClient, dict[str, str]], prometheus: tuple[str, Counter]
) -> None:
    client, _ = service
    address, counter = prometheus
    counter.set_rate(17.5)
    response = client.post("/api/v1/services", json=_spec(address))
    assert response.status_code == 201, response.text
    up = wait_for(lambda: _replicas(client, 3), timeout=60, interval=0.5)  # ceil(17.5 / 7)
    assert up == ["chat-r1", "chat-r2", "chat-r3"]
    for name in up:
        workload = client.get(f"/api/v1/workloads/{name}").json()
        assert workload["team"] == "team-a" and workload["state"] in ("pending", "admitted")
    counter.set_rate(3.5)
    assert wait_for(lambda: _replicas(client, 1), timeout=60, interval=0.5) == ["chat-r1"]
    assert client.get("/api/v1/workloads/chat-r3").json()["state"] == "cancelled"


def test_registration_is_checked(
    service: tuple[TestClient, dict[str, str]], prometheus: tuple[str, Counter]
) -> None:
    client, tokens = service
    address, _ = prometheus
    bad = _spec(address)
    del bad["scaler"]["triggers"][0]["prometheus"]
    response = client.post("/api/v1/services", json=bad)
    assert response.status_code == 422
    assert "scaler.triggers[0].prometheus" in response.text
    response = client.post("/api/v1/services", json={**_spec(address), "priority": "urgent"})
    assert response.status_code == 422 and "urgent" in response.text
    assert [d["loc"] for d in response.json()["detail"]] == [["body", "priority"]]
    nosuch = {**_spec(address), "team": "nosuch"}
    response = client.post("/api/v1/services", json=nosuch, headers=_as(tokens, "admin"))
    assert response.status_code == 422 and "nosuch" in response.text
    assert [d["loc"] for d in response.json()["detail"]] == [["body", "team"]]
    response = client.post("/api/v1/services", json={**_spec(address), "team": "team-b"})
    assert response.status_code == 403
    viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
    response = client.post("/api/v1/services", json=_spec(address), headers=viewer)
    assert response.status_code == 403
    assert client.post("/api/v1/services", json=_spec(address)).status_code == 201
    assert client.post("/api/v1/services", json=_spec(address)).status_code == 409


def _as(tokens: dict[str, str], scope: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens[scope]}"}


def test_get_delete_and_team_scoping(
    service: tuple[TestClient, dict[str, str]], prometheus: tuple[str, Counter]
) -> None:
    client, tokens = service
    address, counter = prometheus
    counter.set_rate(10.5)
    assert client.post("/api/v1/services", json=_spec(address)).status_code == 201
    b = _as(tokens, "team:team-b")
    bee = {**_spec(address, "bee"), "team": "team-b"}
    assert client.post("/api/v1/services", json=bee, headers=b).status_code == 201
    up = wait_for(lambda: _replicas(client, 2), timeout=60, interval=0.5)  # ceil(10.5 / 7)
    got = client.get("/api/v1/services/chat").json()
    assert got["team"] == "team-a" and got["replicas"] == up and got["spec"]["name"] == "chat"
    assert "team:team-a" in got["created_by"]
    # a team token: its own only, another team's is answered as a missing one
    assert [s["name"] for s in client.get("/api/v1/services", headers=b).json()] == ["bee"]
    for method in ("GET", "DELETE"):
        theirs = client.request(method, "/api/v1/services/chat", headers=b)
        missing = client.request(method, "/api/v1/services/nope", headers=b)
        assert theirs.status_code == missing.status_code == 404
        assert theirs.json()["detail"].replace("chat", "N") == missing.json()["detail"].replace(
            "nope", "N"
        )
    # admin and viewer see both; a viewer deletes nothing
    admin, viewer = _as(tokens, "admin"), _as(tokens, "viewer")
    for headers in (admin, viewer):
        names = [s["name"] for s in client.get("/api/v1/services", headers=headers).json()]
        assert names == ["chat", "bee"]
    assert client.delete("/api/v1/services/chat", headers=viewer).status_code == 403
    assert client.get("/api/v1/services/chat").json()["replicas"] == up
    # deleting cancels its replicas in the same transaction
    response = client.delete("/api/v1/services/chat")
    assert response.status_code == 200, response.text
    assert client.get("/api/v1/services/chat").status_code == 404
    for name in up:
        assert client.get(f"/api/v1/workloads/{name}").json()["state"] == "cancelled"
    kinds = [
        (e["kind"], e["details"].get("action"))
        for e in client.get("/api/v1/events", params={"limit": 1000}).json()["items"]
        if e["kind"] == "service"
    ]
    assert kinds == [("service", "register"), ("service", "delete")]  # team-a's only
    # registered again under the same name: new replicas go on from the highest number
    assert client.post("/api/v1/services", json=_spec(address)).status_code == 201
    again = wait_for(lambda: _replicas(client, 2), timeout=60, interval=0.5)
    assert again == ["chat-r3", "chat-r4"]


class _Answers:
    """An httpx client whose every Prometheus query answers ``value`` (a scalar)."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.client = httpx.Client(transport=httpx.MockTransport(self._handle))

    def _handle(self, _: httpx.Request) -> httpx.Response:
        result = [0, str(self.value)]
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "scalar", "result": result}}
        )


def test_a_new_leader_adopts_the_replicas_that_exist(tmp_path: Path) -> None:
    """What a restart or a failover does: a second LiveServices on the store (the first's
    memory gone) takes the stored service over with its three replicas, submits none again,
    holds them through the scale-down window that starts at the take-over, and numbers the
    next replica 4."""
    plane = ControlPlane(INVALID, Store(f"sqlite:///{tmp_path / 'fs.db'}"))
    who = Principal(1, "team:team-a")
    policy = {"type": "Percent", "value": 100, "period_seconds": 15}
    window = {"stabilization_window_seconds": 60, "policies": [policy]}
    data = _spec("http://prometheus.invalid", behavior={"scale_down": window})
    spec = LiveServiceSpec.model_validate(data)
    metric = _Answers(21.0)
    first = LiveServices(plane, metric.client)
    first.add(spec, who)
    start = plane.clock.now()
    first.tick(start)  # activated: one replica
    first.tick(start + 1)
    assert first.listed(who)[0]["replicas"] == ["chat-r1", "chat-r2", "chat-r3"]

    metric.value = 7.0  # one replica would do, but the window starts again at the take-over
    second = LiveServices(plane, metric.client)
    second.tick(start + 5)
    (chat,) = second.listed(who)
    assert chat["replicas"] == ["chat-r1", "chat-r2", "chat-r3"]
    assert (chat["wanted"], chat["why"]) == (3, "held by stabilisation")
    metric.value = 28.0
    second.tick(start + 10)
    assert second.listed(who)[0]["replicas"] == ["chat-r1", "chat-r2", "chat-r3", "chat-r4"]
    metric.value = 7.0
    second.tick(start + 100)
    assert len(second.listed(who)[0]["replicas"]) == 1
    with pytest.raises(NotFound):
        second.visible("chat", Principal(2, "team:team-b"))
    plane.store.close()


def test_a_service_survives_kill_9_without_doubling_its_replicas(
    tmp_path: Path, prometheus: tuple[str, Counter]
) -> None:
    """A real server killed with SIGKILL and started again on its store: the service is
    still there, its three replicas are taken over (none submitted again), and deleting it
    afterwards cancels them."""
    address, counter = prometheus
    db = f"sqlite:///{tmp_path / 'fleetshare.db'}"
    store = Store(db)
    store.create()
    token = create_token(store, "team:team-a")[1]
    store.close()
    counter.set_rate(17.5)
    server = start_server(db, tmp_path, config_file_listing(tmp_path, {"main": address}))
    try:
        with server.client(token) as client:
            assert client.post("/api/v1/services", json=_spec(address)).status_code == 201
            three = ["chat-r1", "chat-r2", "chat-r3"]

            def replicas() -> list[str]:
                got: list[str] = client.get("/api/v1/services/chat").json()["replicas"]
                return got

            wait_for(lambda: replicas() == three, timeout=60, interval=0.5)
        server.kill()
        server = start_server(db, tmp_path, config_file_listing(tmp_path, {"main": address}))
        with server.client(token) as client:
            assert replicas() == three  # from the store, before the new scaler's first turn

            def decided_after(at: float) -> bool:
                chat = client.get("/api/v1/services/chat").json()
                return chat["at"] is not None and chat["at"] > at

            wait_for(lambda: decided_after(0), timeout=30, interval=0.2)
            first = client.get("/api/v1/services/chat").json()["at"]
            wait_for(lambda: decided_after(first + 2), timeout=30, interval=0.2)
            assert replicas() == three
            assert client.get("/api/v1/workloads/chat-r4").status_code == 404
            assert client.delete("/api/v1/services/chat").status_code == 200
            for name in three:
                assert client.get(f"/api/v1/workloads/{name}").json()["state"] == "cancelled"
    finally:
        server.stop()


def test_a_follower_registers_and_deletes_and_the_leader_scales(tmp_path: Path) -> None:
    """Any replica registers or deletes (the store is shared); the leader takes the service
    over on its next turn, and a replica it submitted after the deletion committed (its turn
    ran meanwhile) is cancelled when it lets the service go."""
    db = f"sqlite:///{tmp_path / 'fs.db'}"
    leader_plane = ControlPlane(INVALID, Store(db))
    follower_plane = ControlPlane(INVALID, Store(db))
    assert leader_plane.leader and not follower_plane.leader
    metric = _Answers(3.0)
    leader = LiveServices(leader_plane, metric.client)
    follower = LiveServices(follower_plane, metric.client)
    who = Principal(1, "team:team-a")
    follower.add(LiveServiceSpec.model_validate(_spec("http://prometheus.invalid")), who)
    now = leader_plane.clock.now()
    leader.tick(now)
    (chat,) = follower.listed(who)
    assert chat["replicas"] == ["chat-r1"] and "wanted" not in chat  # the leader's alone
    assert leader.listed(who)[0]["wanted"] == 1

    stale = leader.services["chat"]
    follower.delete("chat", who)
    leader._tick(stale, now + 1)  # a turn that began before the deletion committed
    assert stale.replicas == ["chat-r2"]
    leader.tick(now + 2)
    assert "chat" not in leader.services
    w = tables.workloads
    with leader_plane.store.read("workloads-read") as conn:
        states = dict(
            conn.execute(select(w.c.name, w.c.state).where(w.c.name.like("chat-%"))).all()
        )
    assert states == {"chat-r1": "cancelled", "chat-r2": "cancelled"}
    follower_plane.store.close()
    leader_plane.store.close()


def test_an_update_changes_the_rules_in_place(
    service: tuple[TestClient, dict[str, str]], prometheus: tuple[str, Counter]
) -> None:
    """PUT changes a service in place: its replicas stay, the scaler carries on under the
    new limit, new replicas take the new replica spec; its team stays, and another team's
    service or a viewer changes nothing."""
    client, tokens = service
    address, counter = prometheus
    counter.set_rate(17.5)
    created = client.put("/api/v1/services/chat", json=_spec(address))
    assert created.status_code == 201, created.text
    up = wait_for(lambda: _replicas(client, 3), timeout=60, interval=0.5)
    assert up == ["chat-r1", "chat-r2", "chat-r3"]

    capped = _spec(address, max_replicas=2)
    response = client.put("/api/v1/services/chat", json=capped)
    assert response.status_code == 200, response.text
    assert response.json()["spec"]["scaler"]["max_replicas"] == 2
    assert wait_for(lambda: _replicas(client, 2), timeout=60, interval=0.5) == up[:2]

    bigger = {**_spec(address, max_replicas=4), "replica": {"requests": {"cpu": 2}}}
    assert client.put("/api/v1/services/chat", json=bigger).status_code == 200
    four = wait_for(lambda: _replicas(client, 3), timeout=60, interval=0.5)
    assert four == ["chat-r1", "chat-r2", "chat-r4"]
    old = client.get("/api/v1/workloads/chat-r1").json()
    new = client.get("/api/v1/workloads/chat-r4").json()
    assert (old["spec"]["requests"]["cpu"], new["spec"]["requests"]["cpu"]) == (1, 2)

    refused = [
        ({**bigger, "team": "team-b"}, "admin", 422, "team"),
        ({**bigger, "name": "other"}, "team:team-a", 422, "name"),
        (bigger, "viewer", 403, "viewer"),
        ({**bigger, "team": "team-b"}, "team:team-b", 409, "exists already"),
    ]
    for body, scope, status, words in refused:
        response = client.put("/api/v1/services/chat", json=body, headers=_as(tokens, scope))
        assert response.status_code == status and words in response.text, (scope, response.text)
    assert client.get("/api/v1/services/chat").json()["spec"] == bigger
    actions = [
        e["details"].get("action")
        for e in client.get("/api/v1/events", params={"limit": 1000}).json()["items"]
        if e["kind"] == "service"
    ]
    assert actions == ["register", "update", "update"]


def test_replica_names() -> None:
    """A replica is ``<service>-r<n>``; another service's replicas (``chat-r1``'s own) and
    names that only look alike are not."""
    assert replica_serial("chat", "chat-r12") == 12
    for other in ("chat-r1-r1", "chat-r01", "chat-r", "chat-rx", "chatty-r1", "chat-r0"):
        assert replica_serial("chat", other) is None, other
    assert replica_serial("chat-r1", "chat-r1-r1") == 1


@pytest.mark.parametrize(
    ("requests", "says"),
    [
        ({"nvidia.com/gpu": -1}, "must not be negative"),
        ({"cpu": -2}, "must not be negative"),
        ({"cpu": "lots"}, "not a Kubernetes quantity"),
        ({"memory": 1e30}, "too large"),
    ],
)
def test_a_replica_asks_what_a_workload_may(
    service: tuple[TestClient, dict[str, str]],
    prometheus: tuple[str, Counter],
    requests: dict[str, Any],
    says: str,
) -> None:
    """One validation for every way work enters: a replica's requests are checked as a
    workload's are (a negative GPU once answered 201, then logged a traceback every second)."""
    client, _ = service
    address, _ = prometheus
    spec = _spec(address)
    spec["replica"]["requests"] = requests
    response = client.post("/api/v1/services", json=spec)
    assert response.status_code == 422, response.text
    (detail,) = response.json()["detail"]
    assert detail["loc"][:3] == ["body", "replica", "requests"] and says in detail["msg"]
    workload = {"name": "w", "team": "team-a", "requests": requests}
    refused = client.post("/api/v1/workloads", json=workload)
    assert refused.status_code == 422 and says in refused.text
