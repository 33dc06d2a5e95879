"""Live services in ``fleetshare serve`` (in process: the app over a plane on a temporary
store): a service registered through the API has its replica workloads follow a real
Prometheus' query (tests/prometheus_server.py)."""

from __future__ import annotations

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
from tests.prometheus_server import Counter
from tests.service_helpers import wait_for


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    plane = ControlPlane(load_config(None), Store(f"sqlite:///{tmp_path / 'fleetshare.db'}"))
    tokens = {s: create_token(plane.store, s)[1] for s in ("admin", "viewer", "team:team-a")}
    with TestClient(create_app(plane)) as client:
        client.headers["Authorization"] = f"Bearer {tokens['team:team-a']}"
        yield client, tokens
    plane.store.close()


def _spec(address: str, **scaler: Any) -> dict[str, Any]:
    return {
        "name": "chat",
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
    assert response.status_code == 422 and "priority" in response.text
    response = client.post("/api/v1/services", json={**_spec(address), "team": "team-b"})
    assert response.status_code == 403
    viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
    response = client.post("/api/v1/services", json=_spec(address), headers=viewer)
    assert response.status_code == 403
    assert client.post("/api/v1/services", json=_spec(address)).status_code == 201
    assert client.post("/api/v1/services", json=_spec(address)).status_code == 409
