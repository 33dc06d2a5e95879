"""kill -9 the server under load, restart it on the same store, and check nothing was lost,
nothing was admitted twice, usage is the sum over admitted work, and the loop resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from fleetshare.model.resources import parse_resources
from fleetshare.service import store as tables
from fleetshare.service.auth import create_token
from fleetshare.service.store import Store
from tests.service_helpers import cli_env, job, start_server, wait_for

LOAD = Path(__file__).with_name("service_load.py")


def _rows(store: Store) -> dict[str, Any]:
    with store.read("workloads-read") as conn:
        return {r.name: r for r in conn.execute(select(tables.workloads))}


def _check_invariants(store: Store) -> None:
    """No node holds more than it has; no workload admitted twice in a row in the event log;
    pending rows hold no assignment (finished and cancelled ones keep where they ran)."""
    rows = _rows(store)
    with store.read("workloads-read") as conn:
        nodes = {
            r.name: r.allocatable
            for r in conn.execute(select(tables.nodes).where(tables.nodes.c.left_at.is_(None)))
        }
        events = conn.execute(select(tables.events).order_by(tables.events.c.id)).all()
    held: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows.values():
        if row.state == "pending":
            assert row.assignment is None, row.name
        if row.state != "admitted":
            continue
        requests = parse_resources(row.spec["requests"])
        for placement in row.assignment["placement"]:
            for node, pods in placement:
                assert node in nodes, (row.name, node)
                for resource, amount in requests.items():
                    held[node][resource] += amount * pods
    for node, used in held.items():
        for resource, amount in used.items():
            assert amount <= nodes[node].get(resource, 0), (node, resource, amount)
    running: dict[str, bool] = {}
    for event in events:
        if event.kind == "admit":
            assert not running.get(event.workload), f"{event.workload} admitted twice"
            running[event.workload] = True
        elif event.kind in ("preempt", "finish", "cancel"):
            running[event.workload] = False
    for name, row in rows.items():
        assert running.get(name, False) == (row.state == "admitted"), name


def _usage_is_the_sum(client: Any, store: Store) -> None:
    rows = _rows(store)
    for team in client.get("/api/v1/teams").json():
        admitted = [r for r in rows.values() if r.team == team["name"] and r.state == "admitted"]
        assert team["admitted"] == len(admitted)
        expected: dict[str, int] = defaultdict(int)
        for row in admitted:
            for resource, amount in parse_resources(row.spec["requests"]).items():
                expected[resource] += amount * row.spec.get("pods", 1)
        used = {k: round(v * 1000) for k, v in team["used"].items()}
        assert used == {k: v for k, v in expected.items() if v}


@pytest.mark.slow
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_kill_9_under_load_loses_nothing(
    database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if database == "postgresql":
        db = request.getfixturevalue("postgresql").database()
    else:
        db = f"sqlite:///{tmp_path / 'fleetshare.db'}"
    store = Store(db)
    store.create()
    admin = create_token(store, "admin")[1]
    token_a = create_token(store, "team:team-a")[1]
    token_b = create_token(store, "team:team-b")[1]
    acks = tmp_path / "acks.txt"
    server = start_server(db, tmp_path)
    for round_ in range(2):
        load = subprocess.Popen(
            [sys.executable, str(LOAD), server.url, token_a, token_b, str(acks)],
            env=cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            enough = 20 * (round_ + 1)
            wait_for(lambda n=enough: acks.exists() and acks.read_text().count("submit") > n)
            time.sleep(1.0)
            server.kill()  # SIGKILL mid-load
            time.sleep(0.3)
        finally:
            os.kill(load.pid, signal.SIGKILL)
            load.wait(timeout=30)

        before = _rows(store)
        forever = {  # admitted work without a duration must come back as it was
            name: (r.admitted_at, r.assignment)
            for name, r in before.items()
            if r.state == "admitted" and "duration" not in r.spec
        }
        server = start_server(db, tmp_path)
        with server.client(admin) as client:
            lines = acks.read_text().splitlines()
            submitted = {line.split()[1] for line in lines if line.startswith("submit")}
            cancelled = {line.split()[1] for line in lines if line.startswith("cancel")}
            assert submitted and cancelled
            after = _rows(store)
            assert submitted <= set(after), sorted(submitted - set(after))[:5]
            assert all(after[name].state == "cancelled" for name in cancelled)
            for name, (admitted_at, assignment) in forever.items():
                assert after[name].state == "admitted", name
                assert (after[name].admitted_at, after[name].assignment) == (
                    admitted_at,
                    assignment,
                )
            _check_invariants(store)
            _usage_is_the_sum(client, store)

    # the loop resumes: free the cluster, submit, and see it admitted
    with server.client(admin) as client:
        for state in ("pending", "admitted"):
            while True:
                page = client.get(
                    "/api/v1/workloads", params={"state": state, "limit": 1000}
                ).json()
                if not page["items"]:
                    break
                for item in page["items"]:
                    assert client.delete(f"/api/v1/workloads/{item['name']}").status_code == 200
        assert client.post("/api/v1/workloads", json=job("after-restart", "team-a")).is_success
        wait_for(
            lambda: client.get("/api/v1/workloads/after-restart").json()["state"] == "admitted"
        )
        _check_invariants(store)
        _usage_is_the_sum(client, store)
    server.stop()
    store.close()
