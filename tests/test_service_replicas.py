"""Two replicas on one store: one leader runs the loop, the other serves and accepts writes and
takes over when the leader dies; the store's schema comes from the Alembic migrations."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from fleetshare.autoscaling.nodepool import PoolSet
from fleetshare.scenario.loader import load_scenario_data
from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service import store as tables
from fleetshare.service.auth import create_token
from fleetshare.service.lease import Lease, certainly_dead, local_identity
from fleetshare.service.plane import ControlPlane, LeaseLost
from fleetshare.service.store import Store, engine_url
from tests.postgres import PostgresServer
from tests.service_helpers import Server, cli_env, job, start_server, wait_for
from tests.test_service_crash import LOAD, _check_invariants, _rows, _usage_is_the_sum
from tests.test_service_plane import ADMIN, CONFIG


def _plane(db: str, **options: Any) -> ControlPlane:
    return ControlPlane(load_scenario_data(CONFIG, Path(".")), Store(db), **options)


def _submit(plane: ControlPlane, name: str, team: str = "team-a") -> None:
    spec = {"name": name, "team": team, "requests": {"nvidia.com/gpu": 1, "cpu": 2}}
    plane.submit(WorkloadSpec.model_validate(spec), ADMIN)


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_migrations_make_the_schema_of_the_tables(
    database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``upgrade head`` gives exactly the tables ``store.py`` declares (nothing to autogenerate),
    twice in a row is a no-op, and a store made before migrations is stamped and upgraded."""
    if database == "postgresql":
        db = request.getfixturevalue("postgresql").database()
    else:
        db = f"sqlite:///{tmp_path / 'fs.db'}"
    store = Store(db)
    epoch = store.create()
    assert store.create() == epoch
    assert store.schema_revision() == "0004"
    engine = create_engine(engine_url(db))
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), tables.metadata)
    engine.dispose()
    assert diff == []
    store.close()

    if database == "sqlite":  # a store made by the first release: create_all, no alembic table
        old = tmp_path / "old.db"
        engine = create_engine(f"sqlite:///{old}")
        legacy = [
            t
            for name, t in tables.metadata.tables.items()
            if name not in ("leases", "nodepool_versions", "services")
        ]
        tables.metadata.create_all(engine, tables=legacy)
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE nodes DROP COLUMN draining")  # added by 0003
            conn.execute(tables.meta.insert(), [{"key": "epoch", "value": "12.5"}])
            conn.execute(tables.meta.insert(), [{"key": "schema_version", "value": "1"}])
        engine.dispose()
        again = Store(f"sqlite:///{old}")
        assert again.create() == 12.5
        assert again.schema_revision() == "0004"
        again.close()


def test_a_follower_writes_the_leader_decides_and_a_dead_leader_is_replaced(
    tmp_path: Path,
) -> None:
    """In one process, two planes on one SQLite file: the first holds the lease; the second
    is a follower whose submissions the leader admits; when the leader stops renewing, the
    follower takes over after the lease's TTL, and the old leader can no longer write."""
    db = f"sqlite:///{tmp_path / 'fs.db'}"
    leader = _plane(db, lease_ttl=0.6)
    follower = _plane(db, lease_ttl=0.6)
    assert leader.leader and not follower.leader
    assert follower.role().startswith("follower (leader: ")
    _submit(follower, "from-the-follower")
    leader.step()
    assert "from-the-follower" in leader.view.running
    follower.step()  # a follower's step does nothing
    follower._refresh_follower()
    assert "from-the-follower" in follower.view.running  # the follower's view, from the store

    # the leader goes silent (no heartbeat: it was never started); the follower takes over
    follower.start()
    try:
        wait_for(lambda: follower.leader, timeout=10)
        assert set(follower.view.running) == {"from-the-follower"}
        _submit(follower, "after-failover")
        wait_for(lambda: "after-failover" in follower.view.running, timeout=10)
        # the old leader is fenced: its next write fails and it stops deciding
        _submit(leader, "late")
        with pytest.raises(LeaseLost):
            leader.step()
    finally:
        follower.close()
        leader.store.close()
    rows = _rows(Store(db))
    assert rows["late"].state == "pending" or rows["late"].state == "admitted"
    assert rows["after-failover"].state == "admitted"


def _seen(plane: ControlPlane) -> Any:
    """What a view shows: running work with its placement (in name order: the order a view
    learnt of admissions is not part of it), pending work and reasons in order, the nodes."""
    view = plane.view
    running = sorted(
        (n, r.workload.name, r.assignment, r.admitted_at) for n, r in view.running.items()
    )
    nodes = [(n.name, n.schedulable) for n in view.nodes]
    return running, list(view.pending), dict(view.waiting), nodes


def test_a_followers_view_read_in_steps_is_the_view_read_at_once(tmp_path: Path) -> None:
    """A follower refreshes only what changed since its last refresh (workloads named by new
    events, nodes after a node event): after submissions, admissions, a cancellation, a
    preemption and a cordon its view is the one a new follower reads in full."""
    db = f"sqlite:///{tmp_path / 'fs.db'}"
    leader = _plane(db)
    follower = _plane(db)
    try:
        rounds: list[Any] = [
            lambda: [_submit(follower, n) for n in ("a1", "a2", "a3")],
            lambda: _submit(follower, "b1", "team-b"),  # reclaims its quota from team-a
            lambda: follower.cancel("a3", ADMIN),
            lambda: follower.node_action(sorted(leader.backend.nodes)[0], "cordon", ADMIN),
            lambda: [_submit(leader, n, "team-b") for n in ("b2", "b3")],
        ]
        for change in rounds:
            change()
            leader.step()
            follower._refresh_follower()
            fresh = _plane(db)  # a follower too: it reads the store in full
            assert _seen(follower) == _seen(fresh)
            fresh.store.close()
        assert _seen(follower)[0] and _seen(follower)[1]  # something runs, something waits
    finally:
        follower.close()
        leader.close()


def test_a_followers_node_operations_reach_the_leader(tmp_path: Path) -> None:
    """A cordon and node pools committed through a follower: the leader's loop applies them
    from the log, and the follower shows them from the store."""
    db = f"sqlite:///{tmp_path / 'fs.db'}"
    leader = _plane(db)
    follower = _plane(db)
    try:
        node = sorted(leader.backend.nodes)[0]
        follower.node_action(node, "cordon", ADMIN)
        pools = PoolSet.model_validate({"pools": [{"name": "gpu", "families": ["g5"]}]}).pools
        follower.set_pools(pools, ADMIN)
        leader.step()
        assert leader.backend.nodes[node].unschedulable
        assert leader.node_pools == pools and leader.autoscaler is not None
        follower._refresh_follower()
        assert not next(n for n in follower.view.nodes if n.name == node).schedulable
        assert follower.pools_in_force()[1] == pools
    finally:
        follower.close()
        leader.close()


def test_a_dead_local_holder_is_recognised() -> None:
    mine = local_identity()
    host, boot, pidns, _pid = mine.split("/")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert certainly_dead(f"{host}/{boot}/{pidns}/{dead.pid}/abcd")
    assert not certainly_dead(f"{mine}/abcd")  # this process: alive
    assert not certainly_dead(f"other-host/{boot}/{pidns}/{dead.pid}/abcd")
    assert not certainly_dead("garbage")


def test_lease_transitions_are_counted_where_they_are_decided(tmp_path: Path) -> None:
    """Two replicas' leases on one store, by hand (a TTL of -1 s: a lease is expired as soon
    as it is taken, so nothing waits): the first acquires; the second takes the expired lease over
    (acquired); the first's renewal finds it gone (lost); the second gives it up (released);
    an attempt that finds another live holder, and a renewal of a lease still held, change
    nothing."""
    store = Store(f"sqlite:///{tmp_path / 'fs.db'}")
    store.create()
    first, second = Lease(store, ttl=-1.0), Lease(store, ttl=-1.0)
    try:

        def counts(lease: Lease) -> dict[str, float]:
            return {
                s.labels["to"]: s.value
                for family in lease.transitions.collect()
                for s in family.samples
                if s.name.endswith("_total")
            }

        assert first.try_acquire() and first.renew()
        assert second.try_acquire()  # expired at once: taken over
        assert not first.renew()
        assert not first.renew()  # not held: nothing more to lose
        second.release()
        assert counts(first) == {"acquired": 1, "lost": 1, "released": 0}
        assert counts(second) == {"acquired": 1, "lost": 0, "released": 1}
        live = Lease(store, ttl=60.0)
        assert live.try_acquire() and not first.try_acquire()  # a live holder: no change
        assert counts(first) == {"acquired": 1, "lost": 1, "released": 0}
        assert counts(live) == {"acquired": 1, "lost": 0, "released": 0}
    finally:
        store.close()


def _health(server: Server) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{server.url}/healthz", timeout=5).json()
    return body


@pytest.mark.slow
def test_failover_under_load(postgresql: PostgresServer, tmp_path: Path) -> None:
    """Two ``fleetshare serve`` on one PostgreSQL; clients submit and cancel through both;
    kill -9 the leader: the follower takes over within seconds, every acknowledged submission
    is there, nothing was admitted twice, usage is the sum over admitted work."""
    db = postgresql.database()
    store = Store(db)
    store.create()
    admin = create_token(store, "admin")[1]
    token_a = create_token(store, "team:team-a")[1]
    token_b = create_token(store, "team:team-b")[1]
    first = start_server(db, tmp_path)
    second = start_server(db, tmp_path)
    assert _health(first)["loop"] == "running"
    assert _health(second)["loop"].startswith("follower")

    # a submission through the follower is admitted by the leader
    with second.client(admin) as client:
        assert client.post("/api/v1/workloads", json=job("via-follower", "team-a")).is_success
        wait_for(lambda: client.get("/api/v1/workloads/via-follower").json()["state"] == "admitted")
        assert client.delete("/api/v1/workloads/via-follower").is_success

    acks = {name: tmp_path / f"acks-{name}.txt" for name in ("first", "second")}
    loads = [
        subprocess.Popen(
            [sys.executable, str(LOAD), srv.url, token_a, token_b, str(acks[name]), name],
            env=cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, srv in (("first", first), ("second", second))
    ]
    try:
        for path in acks.values():
            wait_for(lambda p=path: p.exists() and p.read_text().count("submit") > 20, 30)
        killed = time.monotonic()
        first.kill()
        wait_for(lambda: _health(second)["loop"] == "running", timeout=20, interval=0.05)
        took = time.monotonic() - killed
        assert took < 10, took
        count = acks["second"].read_text().count("submit")
        wait_for(lambda: acks["second"].read_text().count("submit") > count + 10, 30)
    finally:
        for load in loads:
            load.kill()
            load.wait(timeout=30)
    time.sleep(3.5)  # every job with a duration (at most 3 s) has finished: the state is still

    lines = [line for path in acks.values() for line in path.read_text().splitlines()]
    submitted = {line.split()[1] for line in lines if line.startswith("submit")}
    cancelled = {line.split()[1] for line in lines if line.startswith("cancel")}
    rows = _rows(store)
    assert submitted <= set(rows), sorted(submitted - set(rows))[:5]
    assert all(rows[name].state == "cancelled" for name in cancelled)
    assert any(rows[name].state in ("admitted", "finished") for name in submitted)
    _check_invariants(store)
    with second.client(admin) as client:
        _usage_is_the_sum(client, store)
        for state in ("pending", "admitted"):
            for item in client.get(
                "/api/v1/workloads", params={"state": state, "limit": 1000}
            ).json()["items"]:
                client.delete(f"/api/v1/workloads/{item['name']}")
        assert client.post("/api/v1/workloads", json=job("after-failover", "team-b")).is_success
        wait_for(
            lambda: client.get("/api/v1/workloads/after-failover").json()["state"] == "admitted"
        )
    second.stop()
    store.close()
    print(f"takeover after kill -9: {took:.2f} s")
