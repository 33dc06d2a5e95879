"""The service's durable state: SQLAlchemy 2 Core tables, SQLite by default, PostgreSQL when
given a ``postgresql://`` URL (driver psycopg 3).

Tables: ``meta`` (the epoch), ``policy_versions``, ``nodepool_versions``, ``workloads``,
``nodes``, ``events`` (append-only), ``api_tokens`` (sha256 hashes only), ``services`` (the
live services registered through the API), ``audit_log`` (policy, node pool and node changes by
admins; services registered and deleted) and ``leases`` (which replica runs the control loop).
Times are Unix seconds (UTC); the control loop's time is ``unix - epoch``. The schema is
Alembic's (``service/migrations``): :meth:`Store.create` runs ``upgrade head`` on every start,
for SQLite and PostgreSQL alike.

**One writer at a time.** Every write transaction is serialized with every other, on both
databases: SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's ``pg_advisory_xact_lock`` taken as the
first statement of each write transaction (released when it commits, after the commit is
visible). So ids (``workloads.id``, ``events.id``) are assigned in commit order: a reader that
sees id *n* committed sees every lower id that will ever commit, and paging with
``?after=ID`` (or the leader tailing the event log) never skips a row that commits late. Writers
batch (the control loop writes a step in a few transactions; API submissions are
group-committed) so one writer at a time is not one fsync per request. Reads are plain
transactions (snapshot per statement on PostgreSQL, per transaction on SQLite) and never wait
for writers.

SQLite runs in WAL mode with ``synchronous=NORMAL`` (a committed transaction survives a crash
of the process, such as kill -9; after a power cut the last few may be lost) and a busy
timeout. Writers of every process on one SQLite file first take an exclusive ``flock`` on
``FILE.lock`` beside it: the kernel hands it to the next writer at once, where SQLite's busy
handler would poll, sleeping up to 100 ms between tries (the API and the loop process write
to the same file many times a second). PostgreSQL keeps its own durability settings
(``synchronous_commit`` on by default).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, cast

import psycopg
from sqlalchemy import (
    ARRAY,
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
    any_,
    bindparam,
    create_engine,
    event,
    false,
    inspect,
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.sql.elements import ColumnElement

from fleetshare.service.store_metrics import Operation, StoreMetrics

try:
    import fcntl
except ImportError:  # not on Windows: SQLite's busy handler alone serializes processes
    fcntl = None  # type: ignore[assignment]

WRITE_LOCK_KEY = 0x666C7368  # "flsh": the advisory lock that serializes writers (PostgreSQL)
MIGRATIONS = "fleetshare.service:migrations"

DB_ENV = "FLEETSHARE_DB"
CHECKPOINT_SECONDS = 0.5
"""SQLite: how often the WAL is copied into the database (by a thread of each writing
process)."""

metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

MAX_ID = 2**63 - 1
"""The largest row id, and so the largest position (``?after=``) the API takes: a 64-bit
signed integer, what SQLite's INTEGER holds (a larger one does not even compare there)."""

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

nodepool_versions = Table(
    "nodepool_versions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_at", Float, nullable=False),
    Column("document", JSON, nullable=False),
    # Every node pool in fleetshare's NodePool format: {"pools": [...]}.
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
    # Cordoned (by an admin, through the API).
    Column("draining", Boolean, nullable=False, server_default=false()),
    # An admin drained it: its work is requeued (again after a restart) until uncordoned.
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

leases = Table(
    "leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(300), nullable=False),
    # host/boot id/pid namespace/pid/nonce of the replica holding it
    Column("term", Integer, nullable=False),
    # +1 on every change of holder (fencing: a write checks holder and term)
    Column("acquired_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
)

services = Table(
    "services",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # Registration order.
    Column("name", String(60), nullable=False, unique=True),
    Column("team", String(253), nullable=False),
    Column("spec", JSON, nullable=False),
    # The service as registered (``LiveServiceSpec``, defaults left out).
    Column("token_id", Integer, nullable=False),
    Column("scope", String(300), nullable=False),
    # The token that registered it: its replicas are submitted and cancelled as that token.
    Column("created_at", Float, nullable=False),
    Column("created_by", String(128), nullable=False),
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


def engine_url(url: str) -> str:
    """``url`` with the driver fleetshare uses: ``postgresql://`` (or ``postgres://``) means
    psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class Store:
    """A database holding the service's state (see the module docstring)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        self.metrics = StoreMetrics()
        """Latency and errors of every transaction, by operation
        (:mod:`fleetshare.service.store_metrics`)."""
        self._writer = threading.RLock()
        self._writing = 0
        """Nested write transactions of the thread holding ``_writer``."""
        self._lock_path: Path | None = None
        """SQLite: the file whose ``flock`` serializes writers across processes."""
        self._lock_fd: int | None = None
        self._checkpoints: threading.Event | None = None
        """SQLite file: set when the checkpoint thread must stop (see :meth:`_checkpoint`)."""
        self._checkpointer: threading.Thread | None = None
        self.sqlite = self.url.startswith("sqlite")
        self.postgresql = self.url.startswith(("postgresql", "postgres:"))
        if self.sqlite:
            path = self.url.split("///", 1)[1] if "///" in self.url else ""
            if path and path != ":memory:" and not path.startswith("file:"):
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                if fcntl is not None:
                    self._lock_path = Path(path + ".lock")
                self._checkpoints = threading.Event()
            self.engine: Engine = create_engine(
                self.url, connect_args={"check_same_thread": False, "timeout": 30}
            )
            event.listen(self.engine, "connect", _sqlite_connect)
            event.listen(self.engine, "begin", _sqlite_begin)
        else:
            self.engine = create_engine(
                engine_url(self.url), pool_size=8, max_overflow=48, pool_pre_ping=True
            )
            if self.postgresql:
                event.listen(self.engine, "connect", _postgresql_connect)
                event.listen(self.engine, "begin", _postgresql_begin)
                # INSERTs of many rows (events, submissions) as one multi-row VALUES statement,
                # as SQLAlchemy's psycopg2 dialect does; psycopg's executemany is a statement
                # per row on the server
                self.engine.dialect.use_insertmanyvalues_wo_returning = True

    @property
    def display_url(self) -> str:
        """The URL without its password."""
        return make_url(self.url).render_as_string(hide_password=True)

    def create(self) -> float:
        """Bring the schema to the newest version (Alembic ``upgrade head``, one replica at a
        time); return the epoch (set on first use)."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", MIGRATIONS)
        with self.write("migrate") as conn:
            config.attributes["connection"] = conn
            names = set(inspect(conn).get_table_names())
            if "meta" in names and "alembic_version" not in names:
                command.stamp(config, "0001")  # a store made before migrations existed
            command.upgrade(config, "head")
            row = conn.execute(select(meta.c.value).where(meta.c.key == "epoch")).first()
            if row is not None:
                return float(row[0])
            epoch = time.time()
            conn.execute(meta.insert(), [{"key": "epoch", "value": repr(epoch)}])
            return epoch

    def schema_revision(self) -> str | None:
        """The Alembic revision the database is at."""
        with self.read("migrate") as conn:
            if "alembic_version" not in inspect(conn).get_table_names():
                return None
            return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()

    @contextmanager
    def write(self, operation: Operation) -> Iterator[Connection]:
        """A write transaction for ``operation`` (committed on leaving, rolled back on an
        exception); one at a time across every process on the database. Threads of this
        process queue on a lock first, and on SQLite processes on ``flock``: the database's own
        wait (SQLite's busy handler) polls, sleeping up to 100 ms at a time, where the locks
        hand over at once. Measured (:attr:`metrics`) from the wait for the locks to the
        commit."""
        with self.metrics.measured(operation), ExitStack() as stack:
            stack.enter_context(self._writer)
            self._writing += 1
            stack.callback(self._left)
            if self._writing == 1 and self._lock_path is not None:
                stack.enter_context(self._file_lock())
            if self._checkpoints is not None and self._checkpointer is None:
                self._checkpointer = threading.Thread(
                    target=self._checkpoint, name="fleetshare-checkpoint", daemon=True
                )
                self._checkpointer.start()
            conn = stack.enter_context(
                self.engine.connect().execution_options(fleetshare_write=True)
            )
            stack.enter_context(conn.begin())
            yield conn

    def write_at_once(
        self, operation: Operation, statement: str, params: Mapping[str, Any]
    ) -> list[Any]:
        """PostgreSQL: ``statement`` as a write transaction (serialized as :meth:`write`'s) in
        one round trip: ``BEGIN``, the writer lock, the statement and ``COMMIT`` go as one
        query (the parameters bound by psycopg on the client); the statement's rows once
        committed. Raises, rolled back, when any part fails. Each round trip releases the GIL
        and waits to take it back (up to the switch interval, 5 ms, while the event loop's
        thread runs), so in the API process a commit in one round trip, not six, is a shorter
        wait for every submission in the batch. Not inside another write of the same thread
        (its own connection would wait for the lock the other holds)."""
        assert self.postgresql, "one query of several statements: PostgreSQL's"
        script = f"BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY}); {statement}; COMMIT"
        with self.metrics.measured(operation), self._writer:
            raw = self.engine.raw_connection()
            try:
                conn = raw.driver_connection
                assert conn is not None
                conn.autocommit = True  # the script's BEGIN and COMMIT are the transaction
                try:
                    cursor = psycopg.ClientCursor(conn)
                    cursor.execute(script, params)
                    cursor.nextset()  # past BEGIN
                    cursor.nextset()  # past the lock
                    rows = cursor.fetchall()
                except BaseException:
                    try:
                        conn.rollback()
                        conn.autocommit = False
                    except Exception:  # the connection is broken: the pool drops it
                        raw.invalidate()
                    raise
                conn.autocommit = False
                return rows
            finally:
                raw.close()

    def _checkpoint(self) -> None:
        """SQLite: copy the WAL into the database every :data:`CHECKPOINT_SECONDS`, off the
        writers' path (``PASSIVE``: it waits for no reader or writer, and takes no write lock).
        Connections do not checkpoint on commit (``wal_autocheckpoint=0``): the commit that
        crossed the WAL's threshold would fsync the database while every writer waits."""
        stop = self._checkpoints
        assert stop is not None
        while not stop.wait(CHECKPOINT_SECONDS):
            try:
                raw = self.engine.raw_connection()
                try:
                    raw.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)")
                finally:
                    raw.close()
            except Exception:  # busy or closing: the next turn tries again
                continue

    def _left(self) -> None:
        self._writing -= 1

    @contextmanager
    def _file_lock(self) -> Iterator[None]:
        assert fcntl is not None and self._lock_path is not None
        if self._lock_fd is None:
            self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)  # waits without holding the GIL
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    @contextmanager
    def read(self, operation: Operation) -> Iterator[Connection]:
        """A read transaction for ``operation``, measured (:attr:`metrics`)."""
        with self.metrics.measured(operation), self.engine.connect() as conn, conn.begin():
            yield conn

    def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.set()
            if self._checkpointer is not None:
                self._checkpointer.join(timeout=5)
            self._checkpointer = None
            self._checkpoints = threading.Event()
        self.engine.dispose()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def named(conn: Connection, column: Any, names: Sequence[str]) -> ColumnElement[bool]:
    """``column IN names``; on PostgreSQL ``column = ANY(array)``: one parameter, so the text
    is the same for any number of names (psycopg parses each new text of a statement and
    caches only short ones: an ``IN`` of 500 names was ~3 ms of its parsing), and the server
    looks each up in the index."""
    if conn.dialect.name == "postgresql":
        array = bindparam("names", list(names), type_=ARRAY(String), unique=True)
        return cast(ColumnElement[bool], column == any_(array))
    return cast(ColumnElement[bool], column.in_(names))


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # transactions are begun explicitly (below)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA wal_autocheckpoint=0")  # Store._checkpoint does it
    cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    immediate = conn.get_execution_options().get("fleetshare_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


RANDOM_PAGE_COST = 1.1
"""PostgreSQL: the planner's ``random_page_cost`` in the store's sessions. At the default (4,
for spinning disks) it finds a sequential scan of every workload ever submitted cheaper than
200 lookups in the ``name`` index, and the loop's write of 200 rows (``UPDATE ... FROM
unnest``) hashed the whole table: 10 ms at 15,000 rows, growing with the table, where the
index takes 2.5 ms. The store's working set is small and cached (the value commonly used for
SSDs and cached data)."""


IDLE_IN_TRANSACTION_SECONDS = 10.0
"""PostgreSQL: the server ends a session of the store's that has sat this long inside a
transaction without a statement (``idle_in_transaction_session_timeout``), rolling it back.
Writers are serialized by a lock each write transaction holds to its end, so a process
stopped inside one (SIGSTOP, a debugger, a VM paused) would otherwise hold every writer of
every replica up until it goes on: the standby could not even take the lease over. The store
never waits this long between two statements of a transaction (its longest gap is Python work
on a few hundred rows); when the stopped process goes on, its session is gone and its next
statement fails (a loop process then stops, and is started again). SQLite has no such limit: a
process stopped inside a write holds the file's writers up until it continues (``flock``,
and SQLite's own lock, cannot be taken from a live process), one more reason replicas use
PostgreSQL."""


def _postgresql_connect(dbapi_connection: Any, _record: Any) -> None:
    idle = round(IDLE_IN_TRANSACTION_SECONDS * 1000)
    with dbapi_connection.cursor() as cursor:
        cursor.execute(f"SET random_page_cost = {RANDOM_PAGE_COST}")
        cursor.execute(f"SET idle_in_transaction_session_timeout = {idle}")
    dbapi_connection.commit()


def _postgresql_begin(conn: Connection) -> None:
    if conn.get_execution_options().get("fleetshare_write", False):
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY})")
