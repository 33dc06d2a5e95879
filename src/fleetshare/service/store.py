"""The service's durable state: SQLAlchemy 2 Core tables, SQLite by default.

Tables: ``meta`` (the epoch, the schema version), ``policy_versions``, ``workloads``, ``nodes``,
``events`` (append-only), ``api_tokens`` (sha256 hashes only) and ``audit_log`` (policy
changes). Times are Unix seconds (UTC); the control loop's time is ``unix - epoch``.

SQLite runs in WAL mode with ``synchronous=NORMAL`` (a committed transaction survives a crash
of the process, such as kill -9; after a power cut the last few may be lost) and a busy
timeout. Every write transaction starts with ``BEGIN IMMEDIATE``, so two writers queue for the
lock instead of failing when a reader upgrades; reads use a plain ``BEGIN`` and, in WAL mode,
never wait for writers. Another database is a URL away (``postgresql://...``): the tables are
plain Core; nothing here but the connection set-up is SQLite's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    select,
)

SCHEMA_VERSION = 1
"""Bumped when the tables change (migrations with Alembic come with PostgreSQL support)."""

DB_ENV = "FLEETSHARE_DB"

metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

policy_versions = Table(
    "policy_versions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_at", Float, nullable=False),
    Column("source_format", String(16), nullable=False),
    Column("document", JSON, nullable=False),
    # The policy in fleetshare's format (what the engine runs).
    Column("original", JSON),
    # What was sent, when it was another format (Kueue YAML, HyperPod JSON).
    Column("author", String(128), nullable=False),
)

workloads = Table(
    "workloads",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # Submit order.
    Column("name", String(253), nullable=False, unique=True),
    Column("team", String(253), nullable=False),
    Column("state", String(16), nullable=False),
    # pending, admitted, finished or cancelled.
    Column("spec", JSON, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("priority_class", String(253)),
    Column("submitted_at", Float, nullable=False),
    Column("pending_since", Float, nullable=False),
    # Submission, or the latest preemption (admission wait is counted from here).
    Column("admitted_at", Float),
    Column("first_admitted_at", Float),
    Column("finished_at", Float),
    Column("assignment", JSON),
    # ``{"flavors": [...], "placement": [[[node, pods], ...], ...]}`` while admitted.
    Column("borrowed", JSON),
    Column("preemptions", Integer, nullable=False, default=0),
    Column("submitted_by", String(128), nullable=False),
    Index("ix_workloads_team_id", "team", "id"),
    Index("ix_workloads_state_id", "state", "id"),
)

nodes = Table(
    "nodes",
    metadata,
    Column("name", String(253), primary_key=True),
    Column("source", String(16), nullable=False),
    # config (the config file's nodes) or autoscaler (launched through the cloud).
    Column("pool", String(253)),
    Column("instance_type", String(64)),
    Column("zone", String(64)),
    Column("capacity_type", String(16), nullable=False),
    Column("allocatable", JSON, nullable=False),
    Column("labels", JSON, nullable=False),
    Column("taints", JSON, nullable=False),
    Column("ready", Boolean, nullable=False),
    Column("unschedulable", Boolean, nullable=False),
    Column("healthy", Boolean, nullable=False),
    Column("price_per_hour", Float),
    Column("instance", JSON),
    # The cloud instance behind an autoscaler node (id, launch time, price).
    Column("joined_at", Float),
    Column("left_at", Float),
    Column("leave_reason", Text),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("workload", String(253)),
    Column("team", String(253)),
    Column("details", JSON, nullable=False),
    Index("ix_events_team_id", "team", "id"),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("scope", String(300), nullable=False),
    Column("name", String(200), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("actor", String(128), nullable=False),
    Column("action", String(64), nullable=False),
    Column("policy_version", Integer, ForeignKey("policy_versions.id")),
    Column("details", JSON, nullable=False),
)


def default_url() -> str:
    """``$FLEETSHARE_DB``, else ``sqlite:///`` a file ``fleetshare.db`` in
    ``$XDG_DATA_HOME/fleetshare`` (``~/.local/share/fleetshare``)."""
    env = os.environ.get(DB_ENV)
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(base) / 'fleetshare' / 'fleetshare.db'}"


class Store:
    """A database holding the service's state (see the module docstring)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        self.sqlite = self.url.startswith("sqlite")
        if self.sqlite:
            path = self.url.split("///", 1)[1] if "///" in self.url else ""
            if path and path != ":memory:" and not path.startswith("file:"):
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Engine = create_engine(
            self.url,
            connect_args={"check_same_thread": False, "timeout": 30} if self.sqlite else {},
        )
        if self.sqlite:
            event.listen(self.engine, "connect", _sqlite_connect)
            event.listen(self.engine, "begin", _sqlite_begin)

    def create(self) -> float:
        """Create the tables if missing; return the epoch (set on first use)."""
        metadata.create_all(self.engine)
        with self.write() as conn:
            row = conn.execute(select(meta.c.value).where(meta.c.key == "epoch")).first()
            if row is not None:
                version = conn.execute(
                    select(meta.c.value).where(meta.c.key == "schema_version")
                ).scalar_one()
                if int(version) != SCHEMA_VERSION:
                    raise RuntimeError(
                        f"{self.url}: schema version {version}; this fleetshare knows "
                        f"{SCHEMA_VERSION}"
                    )
                return float(row[0])
            epoch = time.time()
            conn.execute(
                meta.insert(),
                [
                    {"key": "epoch", "value": repr(epoch)},
                    {"key": "schema_version", "value": str(SCHEMA_VERSION)},
                ],
            )
            return epoch

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (committed on leaving, rolled back on an exception)."""
        with self.engine.connect().execution_options(fleetshare_write=True) as conn, conn.begin():
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction (one consistent view)."""
        with self.engine.connect() as conn, conn.begin():
            yield conn

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # transactions are begun explicitly (below)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    immediate = conn.get_execution_options().get("fleetshare_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
