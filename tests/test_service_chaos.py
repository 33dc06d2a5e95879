"""Chaos with stopped, not killed, processes (issue 28): SIGSTOP leaves a process alive, holding
what it held (its lease, a transaction, its sockets), and lets it go on later as if nothing
happened. What a user relies on, with two replicas on one PostgreSQL:

- while the leader's loop process is stopped, that replica says so (``/healthz`` 503,
  ``fleetshare_loop_up``, ``fleetshare_leader`` and ``fleetshare_lease_held`` 0);
- the standby takes the lease once it expires and admits what was submitted meanwhile, to
  either replica;
- continued (SIGCONT), the old leader finds the lease lost and admits nothing: every
  acknowledged submission is admitted once, usage is the sum over admitted work, and the lease
  counters read what was computed by hand.

The same with the whole leader replica stopped (its API process too: it does not answer at
all), and a writer stopped inside its transaction (the server ends the session, so the other
writers go on). Every wait is bounded; every stopped process is continued in ``finally``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from fleetshare.service import store as tables
from fleetshare.service.auth import create_token
from fleetshare.service.lease import LOOP_LEASE
from fleetshare.service.store import IDLE_IN_TRANSACTION_SECONDS, Store
from tests.postgres import PostgresServer
from tests.service_helpers import Server, cli_env, job, sample_value, start_server, wait_for
from tests.test_service_crash import _check_invariants, _rows, _usage_is_the_sum
from tests.test_service_loop_process import _alive, _loop_process

pytestmark = pytest.mark.slow
STALE = ("--stale-seconds", "3")
LEASE = "fleetshare_lease_transitions_total"
TAKEOVER_SECONDS = 60.0
"""Bound on a takeover: the lease's TTL (4 s), a follower's try (1 s), and, when the stop
caught the leader inside a write, the server's idle-in-transaction limit (10 s), on a loaded
2-core machine."""


def _metrics(client: httpx.Client) -> str:
    return client.get("/metrics").text


def _admitted(client: httpx.Client, name: str) -> bool:
    return bool(client.get(f"/api/v1/workloads/{name}").json()["state"] == "admitted")


def _loop_says(client: httpx.Client, start: str) -> bool:
    response = client.get("/healthz")
    return response.status_code == 200 and str(response.json()["loop"]).startswith(start)


def _admit_events(store: Store) -> Counter[str]:
    """How many times each workload was admitted, by the event log."""
    e = tables.events
    with store.read("events-read") as conn:
        return Counter(conn.execute(select(e.c.workload).where(e.c.kind == "admit")).scalars())


def _lease_holder(store: Store) -> str:
    t = tables.leases
    with store.read("lease-read") as conn:
        return str(conn.execute(select(t.c.holder).where(t.c.name == LOOP_LEASE)).scalar_one())


def _stop(*pids: int) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def _go_on(*pids: int) -> None:
    for pid in pids:
        if pid and _alive(pid):
            os.kill(pid, signal.SIGCONT)


def _two_replicas(db: str, tmp_path: Path) -> tuple[Store, str, Server, Server, int]:
    """A store with an admin token; replica A leading, B standing by; A's loop process."""
    store = Store(db)
    store.create()
    admin = create_token(store, "admin")[1]
    a = start_server(db, tmp_path, extra=STALE)
    loop_a = _loop_process(a)
    with a.client(admin) as client:
        wait_for(lambda: _loop_says(client, "running"), timeout=30)
    b = start_server(db, tmp_path, extra=STALE)
    with b.client(admin) as client:
        assert _loop_says(client, "follower")
    return store, admin, a, b, loop_a


def _after_the_old_leader_went_on(
    store: Store, ca: httpx.Client, cb: httpx.Client, names: list[str]
) -> None:
    """A's loop process found the lease lost (and was started again, following B's); nothing
    was admitted twice; both replicas' usage is the sum over admitted work; the counters read
    what was computed by hand: A acquired once and lost once, B acquired once."""
    wait_for(lambda: _loop_says(ca, "follower"), timeout=TAKEOVER_SECONDS)

    def a_counted() -> bool:
        text = _metrics(ca)
        return sample_value(text, LEASE, to="lost") == 1

    wait_for(a_counted, timeout=30)
    text = _metrics(ca)
    assert sample_value(text, LEASE, to="acquired") == 1
    assert sample_value(text, LEASE, to="released") == 0
    assert sample_value(text, "fleetshare_lease_held") == 0
    assert sample_value(text, "fleetshare_leader") == 0
    text = _metrics(cb)
    assert sample_value(text, LEASE, to="acquired") == 1
    assert sample_value(text, LEASE, to="lost") == 0
    assert sample_value(text, "fleetshare_lease_held") == 1
    # both replicas name B's loop process as the holder, as the store does
    holder = _lease_holder(store)
    for client in (ca, cb):
        assert sample_value(_metrics(client), "fleetshare_lease_holder_info", holder=holder) == 1
    # new work goes on being admitted, by B, whichever replica takes it (3 of the 4 GPUs
    # are in use: "first" and during-0 of team-a, during-1 of team-b, which has room)
    assert ca.post("/api/v1/workloads", json=job("after", "team-b")).status_code == 201
    wait_for(lambda: _admitted(cb, "after"), timeout=30)
    admitted = _admit_events(store)
    assert all(admitted[name] == 1 for name in [*names, "after"]), admitted
    assert set(admitted.values()) == {1}, admitted
    rows = _rows(store)
    assert all(rows[n].first_admitted_at == rows[n].admitted_at for n in admitted)
    _check_invariants(store)
    _usage_is_the_sum(ca, store)
    _usage_is_the_sum(cb, store)


def test_a_stopped_loop_process_loses_the_lease_and_admits_nothing_after(
    postgresql: PostgresServer, tmp_path: Path
) -> None:
    """SIGSTOP of the leader's loop process (its API process runs on)."""
    store, admin, a, b, loop_a = _two_replicas(postgresql.database(), tmp_path)
    try:
        with a.client(admin) as ca, b.client(admin) as cb:
            assert ca.post("/api/v1/workloads", json=job("first", "team-a")).status_code == 201
            wait_for(lambda: _admitted(ca, "first"), timeout=30)
            _stop(loop_a)
            unhealthy = wait_for(
                lambda: (r := ca.get("/healthz")).status_code == 503 and r.json(), timeout=30
            )
            assert "has not reported" in unhealthy["loop"]
            text = _metrics(ca)
            for gauge in ("fleetshare_loop_up", "fleetshare_leader", "fleetshare_lease_held"):
                assert sample_value(text, gauge) == 0, gauge
            # acknowledged meanwhile, by either replica (A's API still commits)
            names = ["first"]
            for i, (client, team) in enumerate([(ca, "team-a"), (cb, "team-b")]):
                names.append(f"during-{i}")
                spec = job(names[-1], team, duration=600)
                assert client.post("/api/v1/workloads", json=spec).status_code == 201
            # B's loop process takes the expired lease and admits them
            wait_for(lambda: _loop_says(cb, "running"), timeout=TAKEOVER_SECONDS)
            for name in names[1:]:
                wait_for(lambda n=name: _admitted(cb, n), timeout=30)  # type: ignore[misc]
            assert _alive(loop_a) and ca.get("/healthz").status_code == 503  # still stopped
            _go_on(loop_a)
            _after_the_old_leader_went_on(store, ca, cb, names)
    finally:
        _go_on(loop_a)
        a.stop()
        b.stop()
        store.close()


def test_a_stopped_leader_replica_loses_the_lease_and_admits_nothing_after(
    postgresql: PostgresServer, tmp_path: Path
) -> None:
    """SIGSTOP of the whole leader replica, its API process and its loop process: it answers
    nothing (a liveness probe fails), the standby takes over and admits what is submitted to
    it; continued, the old leader follows."""
    store, admin, a, b, loop_a = _two_replicas(postgresql.database(), tmp_path)
    api_a = a.process.pid
    try:
        with a.client(admin) as ca, b.client(admin) as cb:
            assert ca.post("/api/v1/workloads", json=job("first", "team-a")).status_code == 201
            wait_for(lambda: _admitted(ca, "first"), timeout=30)
            _stop(api_a, loop_a)
            with pytest.raises(httpx.TimeoutException):
                httpx.get(f"{a.url}/healthz", timeout=1.0)
            names = ["first"]
            for i, team in enumerate(["team-a", "team-b"]):
                names.append(f"during-{i}")
                spec = job(names[-1], team, duration=600)
                assert cb.post("/api/v1/workloads", json=spec).status_code == 201
            wait_for(lambda: _loop_says(cb, "running"), timeout=TAKEOVER_SECONDS)
            for name in names[1:]:
                wait_for(lambda n=name: _admitted(cb, n), timeout=30)  # type: ignore[misc]
            _go_on(api_a, loop_a)
            _after_the_old_leader_went_on(store, ca, cb, names)
    finally:
        _go_on(api_a, loop_a)
        a.stop()
        b.stop()
        store.close()


STOPPED_WRITER = """
import os, signal, sys
from fleetshare.service import store as tables
from fleetshare.service.store import Store

store = Store(sys.argv[1])
with store.write("cancel") as conn:
    conn.execute(tables.meta.insert().values(key="stopped", value="v"))
    print("inside", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # stopped inside the transaction, holding the lock
    conn.execute(tables.meta.insert().values(key="went-on", value="v"))
"""


def test_a_writer_stopped_inside_its_transaction_holds_the_others_up_for_a_while(
    postgresql: PostgresServer,
) -> None:
    """A process stopped inside a write transaction (so holding the writer lock): the
    server ends its session after ``IDLE_IN_TRANSACTION_SECONDS``, and the other writers go
    on; its writes are rolled back; continued, it fails instead of writing."""
    db = postgresql.database()
    store = Store(db)
    store.create()
    child = subprocess.Popen(
        [sys.executable, "-c", STOPPED_WRITER, db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"inside\n"
        wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().split()[2] == "T")
        done = threading.Event()

        def write() -> None:
            with store.write("cancel") as conn:
                conn.execute(tables.meta.insert().values(key="other", value="v"))
            done.set()

        threading.Thread(target=write, daemon=True).start()
        assert done.wait(IDLE_IN_TRANSACTION_SECONDS + 30), "the other writer never went on"
        os.kill(child.pid, signal.SIGCONT)
        assert child.wait(timeout=30) != 0
        _, err = child.communicate(timeout=30)
        assert b"idle-in-transaction timeout" in err or b"OperationalError" in err, err[-2000:]
        with store.read("workloads-read") as conn:
            keys = set(conn.execute(select(tables.meta.c.key)).scalars())
        assert "other" in keys and not keys & {"stopped", "went-on"}
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait(timeout=30)
        store.close()
