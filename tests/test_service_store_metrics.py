"""Issue 28 item 6: the store's latency and errors per operation, on real SQLite and
PostgreSQL, counted by hand; real failures (a read-only database file, a PostgreSQL
connection killed by the server) counted with their operation and PEP 249 class."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from prometheus_client import CollectorRegistry, disable_created_metrics
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from fleetshare.service import store as tables
from fleetshare.service.merged_metrics import merge, parse, render
from fleetshare.service.plane import Conflict
from fleetshare.service.store import Store
from fleetshare.service.store_metrics import OPERATIONS
from tests.postgres import PostgresServer

DURATION = "fleetshare_store_operation_duration_seconds"
ERRORS = "fleetshare_store_errors_total"


def _registry(store: Store) -> CollectorRegistry:
    disable_created_metrics()  # type: ignore[no-untyped-call]
    registry = CollectorRegistry()
    store.metrics.register(registry)
    return registry


def _count(registry: CollectorRegistry, operation: str) -> float:
    value = registry.get_sample_value(f"{DURATION}_count", {"operation": operation})
    return value or 0.0


def _errors(registry: CollectorRegistry, operation: str, error: str) -> float:
    value = registry.get_sample_value(ERRORS, {"operation": operation, "error": error})
    return value or 0.0


def _url(database: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if database == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgresql")
        return server.database()
    return f"sqlite:///{tmp_path / 'fs.db'}"


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_each_transaction_is_one_observation_of_its_operation(
    database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """3 reads, 2 writes and a write the caller refuses inside (rolled back): 3, 2 and 1
    observations under their operations, every one in the +Inf bucket, no error; the schema
    migration at creation counted as ``migrate``; on PostgreSQL a one-round-trip write too."""
    store = Store(_url(database, tmp_path, request))
    try:
        registry = _registry(store)
        store.create()
        assert _count(registry, "migrate") >= 1
        before = {op: _count(registry, op) for op in OPERATIONS}
        for _ in range(3):
            with store.read("workloads-read") as conn:
                conn.execute(select(tables.workloads)).all()
        for i in range(2):
            with store.write("cancel") as conn:
                conn.execute(tables.meta.insert().values(key=f"k{i}", value="v"))
        with pytest.raises(Conflict), store.write("node-action") as conn:
            conn.execute(tables.meta.insert().values(key="refused", value="v"))
            raise Conflict("the caller's refusal, not the store's")
        expected = {"workloads-read": 3, "cancel": 2, "node-action": 1}
        if store.postgresql:
            assert store.write_at_once("submit", "SELECT 1", {}) == [(1,)]
            expected["submit"] = 1
        for op in OPERATIONS:
            assert _count(registry, op) - before[op] == expected.get(op, 0), op
        for op, n in expected.items():
            inf = registry.get_sample_value(f"{DURATION}_bucket", {"operation": op, "le": "+Inf"})
            assert inf == n, op
        with store.read("workloads-read") as conn:  # the refused write was rolled back
            keys = set(conn.execute(select(tables.meta.c.key)).scalars())
        assert {"k0", "k1"} <= keys and "refused" not in keys
        assert not [s for f in registry.collect() if f.name == ERRORS[:-6] for s in f.samples]
    finally:
        store.close()


def test_a_read_only_sqlite_file_counts_an_operational_error(tmp_path: Path) -> None:
    """A store whose file is read-only (as on a read-only mount): reads go on, a write fails
    in SQLite, and is counted once as an error of its operation, and once as a duration."""
    path = tmp_path / "fs.db"
    Store(f"sqlite:///{path}").create()
    store = Store(f"sqlite:///file:{path}?mode=ro&uri=true")
    try:
        registry = _registry(store)
        with store.read("events-read") as conn:
            conn.execute(select(tables.events)).all()
        with pytest.raises(OperationalError, match="readonly"), store.write("cancel") as conn:
            conn.execute(tables.meta.insert().values(key="k", value="v"))
        assert _errors(registry, "cancel", "OperationalError") == 1
        assert _count(registry, "cancel") == 1
        assert _errors(registry, "events-read", "OperationalError") == 0
        assert _count(registry, "events-read") == 1
    finally:
        store.close()


def test_a_postgresql_connection_killed_counts_an_operational_error(
    postgresql: PostgresServer,
) -> None:
    """The server ends the store's connection in the middle of a read (pg_terminate_backend,
    as an administrator or a failover would): the read fails, counted as an OperationalError
    of ``events-read``; the next read, on a new connection, succeeds and counts no error."""
    store = Store(postgresql.database())
    try:
        store.create()
        registry = _registry(store)
        admin = postgresql.url.replace("+psycopg", "")
        with pytest.raises(OperationalError), store.read("events-read") as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with psycopg.connect(admin, autocommit=True) as other:
                # waits (up to 10 s) until the backend is gone
                ended = other.execute("SELECT pg_terminate_backend(%s, 10000)", [pid]).fetchone()
            assert ended == (True,)
            conn.exec_driver_sql("SELECT 1")
        assert _errors(registry, "events-read", "OperationalError") == 1
        with store.read("events-read") as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
        assert _errors(registry, "events-read", "OperationalError") == 1
        assert _count(registry, "events-read") == 2
    finally:
        store.close()


def test_merged_metrics_add_counters_and_histograms_and_keep_the_first_gauge() -> None:
    """Two processes' expositions as one (and a loop process's counts carried into its
    successor's): counters and histogram samples with equal labels summed, others side by
    side; a gauge is the first source's."""
    api = (
        b"# HELP ops_total Ops.\n# TYPE ops_total counter\n"
        b'ops_total{operation="read"} 2.0\nops_total{operation="submit"} 5.0\n'
        b"# HELP wait_seconds Waits.\n# TYPE wait_seconds histogram\n"
        b'wait_seconds_bucket{le="1.0"} 1.0\nwait_seconds_bucket{le="+Inf"} 2.0\n'
        b"wait_seconds_count 2.0\nwait_seconds_sum 3.5\n"
        b"# HELP up Up.\n# TYPE up gauge\nup 1.0\n"
    )
    loop = (
        b"# HELP ops_total Ops.\n# TYPE ops_total counter\n"
        b'ops_total{operation="read"} 3.0\nops_total{operation="loop-write"} 7.0\n'
        b"# HELP wait_seconds Waits.\n# TYPE wait_seconds histogram\n"
        b'wait_seconds_bucket{le="1.0"} 0.0\nwait_seconds_bucket{le="+Inf"} 1.0\n'
        b"wait_seconds_count 1.0\nwait_seconds_sum 4.0\n"
        b"# HELP up Up.\n# TYPE up gauge\nup 0.0\n"
    )
    merged = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parse(render(merge(parse(api), parse(loop))))
        for s in family.samples
    }
    assert merged == {
        ("ops_total", (("operation", "read"),)): 5.0,
        ("ops_total", (("operation", "submit"),)): 5.0,
        ("ops_total", (("operation", "loop-write"),)): 7.0,
        ("wait_seconds_bucket", (("le", "1.0"),)): 1.0,
        ("wait_seconds_bucket", (("le", "+Inf"),)): 3.0,
        ("wait_seconds_count", ()): 3.0,
        ("wait_seconds_sum", ()): 7.5,
        ("up", ()): 1.0,
    }
