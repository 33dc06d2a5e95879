"""``fleetshare serve`` runs the control loop in a child process it supervises: the child
admits work submitted to the parent's API, is started again (rebuilding from the store) when
it dies, and never outlives the parent."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from fleetshare.service.auth import create_token
from fleetshare.service.store import Store
from tests.service_helpers import Server, job, sample_value, start_server, wait_for
from tests.test_service_crash import _check_invariants, _rows, _usage_is_the_sum


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _loop_process(server: Server) -> int:
    children = wait_for(lambda: _children(server.process.pid), timeout=30)
    assert len(children) == 1, children
    return int(children[0])


@pytest.mark.slow
def test_the_loop_process_admits_is_restarted_and_dies_with_the_server(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'fs.db'}"
    store = Store(db)
    store.create()
    admin = create_token(store, "admin")[1]
    server = start_server(db, tmp_path)
    try:
        child = _loop_process(server)
        with server.client(admin) as client:
            assert client.get("/healthz").json()["loop"] == "running"
            # the child admits what the parent's API committed; the parent's view shows it
            assert client.post("/api/v1/workloads", json=job("first", "team-a")).is_success
            wait_for(lambda: client.get("/api/v1/workloads/first").json()["state"] == "admitted")
            _usage_is_the_sum(client, store)
            # the loop's counters reach the parent's /metrics within its next report, merged
            # with the parent's own: its store's operations beside the loop process's
            admitted = 'fleetshare_admitted_workloads_total{cluster_queue="team-a"} 1.0'
            wait_for(lambda: admitted in client.get("/metrics").text)
            text = client.get("/metrics").text
            assert "fleetshare_leader 1.0" in text and "fleetshare_lease_held 1.0" in text
            ops = "fleetshare_store_operation_duration_seconds_count"
            assert sample_value(text, ops, operation="submit") >= 1  # the API process's
            assert sample_value(text, ops, operation="loop-write") >= 1  # the loop process's
            assert sample_value(text, ops, operation="take-over") == 1
            lease = "fleetshare_lease_transitions_total"
            assert sample_value(text, lease, to="acquired") == 1

            # kill -9 the loop process: the API still takes work, and a new loop process
            # admits it without admitting anything twice
            os.kill(child, signal.SIGKILL)
            wait_for(lambda: not _alive(child))
            names = [f"meanwhile-{i}" for i in range(3)]
            for i, name in enumerate(names):
                spec = job(name, "team-b" if i else "team-a", duration=600)
                assert client.post("/api/v1/workloads", json=spec).status_code == 201
            wait_for(lambda: client.get("/healthz").json()["loop"] == "running", timeout=60)
            again = _loop_process(server)
            assert again != child
            for name in names:
                wait_for(
                    lambda n=name: (
                        client.get(f"/api/v1/workloads/{n}").json()["state"] == "admitted"
                    ),
                    timeout=30,
                )
            rows = _rows(store)
            assert rows["first"].state == "admitted"
            assert rows["first"].first_admitted_at == rows["first"].admitted_at  # not readmitted

            # the killed loop process's counts carry over into its successor's: "first" and
            # meanwhile-0 for team-a, meanwhile-1 and -2 for team-b; two take-overs, each
            # acquiring the lease (the dead holder recognised), none lost
            # (each count reaches /metrics with a report of the process that made it: wait for
            # all of them, not for the first to arrive)
            def counted() -> bool:
                text = client.get("/metrics").text
                admitted = "fleetshare_admitted_workloads_total"
                return (
                    sample_value(text, admitted, cluster_queue="team-a") == 2
                    and sample_value(text, admitted, cluster_queue="team-b") == 2
                    and sample_value(text, ops, operation="take-over") == 2
                    and sample_value(text, lease, to="acquired") == 2
                )

            wait_for(counted)
            text = client.get("/metrics").text
            assert sample_value(text, lease, to="lost") == 0
            _check_invariants(store)
            _usage_is_the_sum(client, store)
        # stopping the server stops its loop process
        server.stop()
        assert not _alive(again)  # stopped before the server exited

        # kill -9 of the server: its loop process goes too (its stdin ends)
        server = start_server(db, tmp_path)
        child = _loop_process(server)
        server.kill()
        wait_for(lambda: not _alive(child), timeout=15)
    finally:
        server.stop()
        store.close()


@pytest.mark.slow
def test_a_stopped_loop_is_unhealthy_until_it_goes_on(tmp_path: Path) -> None:
    """Issue 28, item 1: a loop process paused with SIGSTOP once left /healthz 200 "running"
    and fleetshare_loop_up and fleetshare_leader 1 while submissions piled up. Past
    ``--stale-seconds`` without a report it is 503 and both gauges 0; resumed (SIGCONT), it
    reports again, is healthy again and admits what waited. A real process, really stopped."""
    db = f"sqlite:///{tmp_path / 'fs.db'}"
    store = Store(db)
    store.create()
    admin = create_token(store, "admin")[1]
    server = start_server(db, tmp_path, extra=("--stale-seconds", "3"))
    child = 0
    try:
        child = _loop_process(server)
        with server.client(admin) as client:
            assert client.get("/healthz").status_code == 200
            os.kill(child, signal.SIGSTOP)
            unhealthy = wait_for(
                lambda: (r := client.get("/healthz")).status_code == 503 and r.json(),
                timeout=30,
            )
            assert (
                "has not reported" in unhealthy["loop"] and "stopped or hung" in unhealthy["loop"]
            )
            metrics = client.get("/metrics").text
            assert "fleetshare_loop_up 0.0" in metrics and "fleetshare_leader 0.0" in metrics
            assert client.post("/api/v1/workloads", json=job("waited", "team-a")).status_code == 201
            assert client.get("/api/v1/workloads/waited").json()["state"] == "pending"

            os.kill(child, signal.SIGCONT)
            wait_for(lambda: client.get("/healthz").status_code == 200, timeout=30)
            wait_for(lambda: client.get("/api/v1/workloads/waited").json()["state"] == "admitted")
            metrics = client.get("/metrics").text
            assert "fleetshare_loop_up 1.0" in metrics and "fleetshare_leader 1.0" in metrics
    finally:
        if child and _alive(child):
            os.kill(child, signal.SIGCONT)
        server.stop()
        store.close()
