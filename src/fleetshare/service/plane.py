"""The control plane: the control loop on the wall clock over the embedded backend, with
its state in the store, one replica deciding at a time.

Replicas. Any number of ``fleetshare serve`` processes may share one store (PostgreSQL, or a
SQLite file on one machine). Exactly one holds the ``control-loop`` lease
(:mod:`fleetshare.service.lease`) and runs the loop: the **leader**. The others are
**followers**: they serve every read, accept every write (a submission, a cancellation or a
policy change is committed to the store and is then as good as the leader's own), refresh their
view of the cluster from the store every :data:`FOLLOW_SECONDS` and before each read of it
(:meth:`ControlPlane.current_view`), and try for the lease about every second; one of them
takes over within about the lease's TTL (4 s) when the leader dies, at once when it stops
cleanly or, on the same host, when its process is gone. In ``api`` mode (:data:`Mode`) a plane
is a follower for good: ``fleetshare serve`` runs the loop in a process of its own
(:mod:`fleetshare.service.loop_process`).

The log is the inbox. API threads never touch the loop's state: they commit a change and wake
the loop. The leader's loop reads what was committed from the event log (``submit``,
``cancel``, ``policy`` and ``nodepools`` events and an admin's ``cordon``, ``uncordon`` and
``drain`` after its cursor, in id order), whichever replica committed it.
Writers are serialized (``Store.write``), so ids are in commit order and the cursor never skips
an event that commits late. The loop thread sleeps until woken, its next timer (a finish, a node
becoming Ready, a guard expiring) is due, or ``poll_interval`` passes (for other replicas'
writes); each time it wakes it applies the new events and the due timers, reconciles, writes
everything the reconcile changed in order, :data:`WRITE_CHUNK` changes per transaction (each
fenced: it also checks that the lease is still ours), and publishes an immutable
:class:`View` that the API reads for teams, reasons and metrics.

Transactions. A submission is one transaction (the workload row and its ``submit`` event),
group-committed with the submissions that arrive meanwhile; a cancellation, a policy change, a
change of the node pools and a node operation are one each (with the event; all but a
cancellation with an audit row). The loop's writes are guarded by
the state they expect (admit only a ``pending`` row, preempt or finish only an ``admitted``
one), so a cancellation committed meanwhile always wins; the loop drops the workload when it
reads the ``cancel`` event.

Taking over (a restart is the same). The store is the truth: the latest policy version, the
node pools in force (the latest set through the API, else the config's), the nodes (the
config's nodes again, cordoned if an admin cordoned them, and the joined nodes the autoscaler
had launched for a pool in force: the simulated cloud and the autoscaler take their instances
back), and every pending and admitted workload in submit order,
read in the transaction that fences the new term and sets the cursor to the last event.
Admitted workloads are put back on their nodes with their admission time, so they finish when
they would have (time kept running while no loop ran); none is admitted again; work whose node
is gone is requeued with reason ``node-removed``, work on a node being drained with
``node-drained`` (a drain committed just before a crash is carried out after it). Loop time
is seconds since the store's epoch, so times written before keep their meaning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, cast, get_args

from sqlalchemy import Connection, func, select

from fleetshare.autoscaling.cloud import CapacityType, Instance
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.simulated_cloud import SimulatedCloud
from fleetshare.control.autoscaler import Autoscaler
from fleetshare.control.clock import Clock, WallClock
from fleetshare.control.loop import ControlLoop
from fleetshare.control.state import FINISH, NODE, Waiting
from fleetshare.governance.admission import CycleCache, Engine
from fleetshare.governance.quota import compile_policy
from fleetshare.governance.snapshot import Running
from fleetshare.model.catalog import Catalog
from fleetshare.model.node import Node
from fleetshare.model.reason import PENDING_CATEGORIES, PendingReason
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import Policy, load_policy
from fleetshare.scenario.loader import Scenario, ScenarioError, build_workload
from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service import nodepools, pg_writes
from fleetshare.service import store as tables
from fleetshare.service.auth import Principal
from fleetshare.service.backend import (
    EmbeddedCluster,
    NodeInfo,
    assignment_from_json,
    node_from_row,
)
from fleetshare.service.config import check_config
from fleetshare.service.group_commit import GroupCommit
from fleetshare.service.lease import DEFAULT_TTL, Lease
from fleetshare.service.rows import CHUNK as _CHUNK
from fleetshare.service.rows import upsert_node, write_changes
from fleetshare.service.store import Store, named

log = logging.getLogger("fleetshare.service")

ACTIVE = ("pending", "admitted")
STALE_SECONDS = 15.0
"""A loop that has not gone round (or, run as a process of its own, not reported) for this
long is unhealthy: ``/healthz`` answers 503, ``fleetshare_loop_up`` and ``fleetshare_leader``
read 0 (``serve --stale-seconds``). It goes round every 0.1-1 s; one reconcile of ten
thousand pending workloads takes about 2 s on 2 cores."""
POLL_SECONDS = 0.1
"""The leader reads the event log at least this often (for other replicas' writes)."""
MIN_STEP_SECONDS = 0.05
MAX_STEP_GAP_SECONDS = 0.1
STEP_GAP_FACTOR = 3.0
"""Between two steps the loop waits ``STEP_GAP_FACTOR`` times the last reconcile's duration,
at least ``MIN_STEP_SECONDS`` and at most ``MAX_STEP_GAP_SECONDS``: under a stream of
submissions it takes them in batches (one reconcile for many) and leaves the API most of the
process (the GIL), while the admission lag stays a gap plus a reconcile or two (0.25 s as
the cap gave a p99 lag of 1.4 s at 5,000 workloads; 0.1 s gives 0.6 s)."""
FOLLOW_SECONDS = 0.25
"""A follower serving the API refreshes its view from the store this often."""
LEASE_TRY_SECONDS = 1.0
"""A follower tries for the lease this often."""
Mode = Literal["all", "api", "loop"]
"""What a :class:`ControlPlane` runs: ``all`` the loop (when it holds the lease) and the API's
view; ``api`` only the view, as a follower that never tries for the lease (the loop runs in
another process, :mod:`fleetshare.service.loop_process`); ``loop`` only the loop (no view
while another replica leads)."""
WRITE_CHUNK = 100
"""The loop writes a step's changes in transactions of at most this many, in the order they
happened: every other writer waits while one commits (a step of 2,000 changes held the API's
submissions up for ~0.1 s), and a prefix of a step is a state the loop went through (each
change was made on the state the ones before it left), which a restart rebuilds from. 100
rather than 200: the API's p99 at 1,000 submissions/s is 35-50 ms instead of 51-66 ms
(bench/README.md)."""
TAIL_BATCH = 5000
"""Events read from the log per step at most."""
NODE_ACTIONS = ("cordon", "uncordon", "drain")
"""An admin's node operations (each an event kind, ``{"node", "by"}``)."""
DRAINED = "node-drained"
"""The eviction reason of work requeued by a drain."""
API_EVENTS = ("submit", "cancel", "policy", nodepools.POOLS_EVENT, *NODE_ACTIONS)
"""The events the leader's loop acts on (the others it wrote itself)."""


def pending_reason(details: Mapping[str, Any]) -> PendingReason:
    """The reason a ``pending`` event's details log, with its category (``unknown`` for an
    event logged before reasons had categories); its key is its words (the log keeps no key:
    what is read back is shown, never judged in substance)."""
    category = details.get("category")
    if category not in PENDING_CATEGORIES:
        return PendingReason(str(details["reason"]), "unknown")
    return PendingReason(str(details["reason"]), category)


class LeaseLost(Exception):
    """Another replica holds the loop's lease now: this one must not decide any more."""


class ServiceError(Exception):
    """An operation refused; ``status`` is the HTTP status it maps to, ``field`` the body's
    field a 422 is about (None: the body)."""

    status = 400

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Forbidden(ServiceError):
    status = 403


class Invalid(ServiceError):
    status = 422


class Unavailable(ServiceError):
    status = 503


@dataclass(frozen=True)
class View:
    """What the loop published after its latest step (read by the API without the lock)."""

    now: float
    engine: Engine
    nodes: tuple[Node, ...]
    node_info: Mapping[str, NodeInfo]
    running: Mapping[str, Running]
    pending: Mapping[str, Workload]
    waiting: Mapping[str, Waiting]
    steps: int


class ControlPlane:
    """The service's control loop and state (see the module docstring)."""

    def __init__(
        self,
        config: Scenario,
        store: Store,
        *,
        lease_ttl: float = DEFAULT_TTL,
        poll_interval: float = POLL_SECONDS,
        mode: Mode = "all",
        stale_seconds: float = STALE_SECONDS,
        clock: Clock | None = None,
    ) -> None:
        """``clock`` gives the loop's time (default: the wall clock, in seconds since the
        store's epoch); a test replays on a :class:`~fleetshare.control.clock.VirtualClock`."""
        self.config = check_config(config)
        self.catalog: Catalog = config.catalog
        self.store = store
        self.epoch = store.create()
        self.clock: Clock = clock if clock is not None else WallClock(time.time() - self.epoch)
        self.lock = threading.Lock()
        """Held by the loop thread while it works on the backend and the loop."""
        self.lease = Lease(store, ttl=lease_ttl)
        self.poll_interval = poll_interval
        self.mode: Mode = mode
        self.loop_process_leads = False
        """In ``api`` mode: whether this replica's loop process runs the loop (set by its
        supervisor, :class:`~fleetshare.service.loop_process.LoopProcess`)."""
        self.loop_process_holds_lease = False
        """In ``api`` mode: whether this replica's loop process holds the lease, as it last
        reported (False while its reports are stale or it is being started again)."""
        self.notify_loop: Callable[[], None] | None = None
        """In ``api`` mode: wakes the loop process (after a commit it acts on)."""
        self._lease_tried = 0.0
        self._refreshing = threading.Lock()
        """Held while a follower's view is refreshed (by its thread or a reader)."""
        self.backend = EmbeddedCluster()
        self.backend.namespaces = {
            n.name: dict(n.labels) for n in self.config.spec.cluster.namespaces
        }
        self.cache = CycleCache()
        self.cloud: SimulatedCloud | None = None
        self.autoscaler: Autoscaler | None = None
        self.loop: ControlLoop | None = None
        """The control loop, on the leader only."""
        self._cursor = 0
        """The last event id the leader's loop has read."""
        self._policy_version = 0
        self._follower = _FollowerState()
        self._prebuilt: dict[str, Workload] = {}
        self._last_reconcile = 0.0
        """Workloads this replica committed, built already, until the loop reads them."""
        self._commits = GroupCommit(self._commit_submissions, "fleetshare-commit")
        self._wakeup = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._heartbeat: threading.Thread | None = None
        self.beat = time.monotonic()
        """When the loop thread last went round (monotonic): :attr:`stalled` reads it."""
        self.stale_seconds = stale_seconds
        self.failed: str | None = None
        """Why the loop stopped, when it failed (the store and memory may then differ: the
        service must be restarted, and rebuilds from the store)."""
        self.on_step: Callable[[float], None] | None = None
        """Called with each reconcile's duration in seconds (metrics)."""
        self.policy: Policy = config.policy
        self.node_pools: list[NodePool] = list(config.spec.node_pools)
        """The node pools in force: the store's latest version once one was set, else the
        config's."""
        self._pools_version = 0
        self.view: View
        if mode != "api" and self.lease.try_acquire():
            self._take_over()
        else:
            self._refresh_follower()

    @property
    def lease_held(self) -> bool:
        """Whether this replica holds the loop's lease (:attr:`Lease.held`; in ``api`` mode
        its loop process's, as last reported)."""
        return self.loop_process_holds_lease if self.mode == "api" else self.lease.held

    @property
    def leader(self) -> bool:
        """True on the replica that holds the lease and runs the loop with it, not failed (in
        ``api`` mode: its loop process, as it last reported)."""
        if self.mode == "api":
            return self.loop_process_leads and self.failed is None
        return self.lease_held and self.loop is not None and self.failed is None

    def role(self) -> str:
        """``leader``, or ``follower (leader: HOLDER)``."""
        if self.leader:
            return "leader"
        current = self.lease.current()
        return f"follower (leader: {current[0] if current else 'none yet'})"

    # -- time ------------------------------------------------------------------------------

    def unix(self, t: float) -> float:
        """Loop time ``t`` as Unix seconds."""
        return self.epoch + t

    def datetime(self, unix: float | None) -> str | None:
        """Unix seconds as ISO 8601 UTC."""
        if unix is None:
            return None
        return datetime.fromtimestamp(unix, UTC).isoformat().replace("+00:00", "Z")

    # -- taking over (start-up and restart) ----------------------------------------------------

    def _engine(self, policy: Policy) -> Engine:
        engine = Engine(policy, self.catalog)
        engine.cache = self.cache
        return engine

    def _take_over(self) -> None:
        """We hold the lease: load the store and run the loop (see the module docstring)."""
        self.policy = self._rebuild()
        self.view = self._make_view(self.clock.now(), 0)

    def _rebuild(self) -> Policy:
        """Load the store into memory (see the module docstring); seed an empty store from
        the config."""
        now = self.clock.now()
        at = self.unix(now)
        backend = self.backend
        self.cloud = self.autoscaler = None
        backend.autoscaled = False
        with self.store.write("take-over") as conn:
            if not self.lease.check(conn):
                raise LeaseLost("the lease went to another replica before the loop started")
            stored = nodepools.latest(conn)
            if stored is not None:
                self.node_pools = nodepools.from_document(stored.document)
                self._pools_version = stored.id
            self._use_pools(self.node_pools)
            row = conn.execute(
                select(tables.policy_versions.c.id, tables.policy_versions.c.document)
                .order_by(tables.policy_versions.c.id.desc())
                .limit(1)
            ).first()
            if row is None:
                policy = self.config.policy
                version = self._store_policy(conn, policy, "fleetshare", None, "config", at)
            else:
                policy = load_policy(row.document, "stored policy")
                version = row.id
            draining = self._restore_nodes(conn, now)
            rows = conn.execute(
                select(tables.workloads)
                .where(tables.workloads.c.state.in_(ACTIVE))
                .order_by(tables.workloads.c.id)
            ).all()
            self._cursor = conn.execute(select(func.max(tables.events.c.id))).scalar() or 0
        self._policy_version = version
        self.policy = policy
        self.loop = ControlLoop(backend, self._engine(policy), self.autoscaler)
        gone: set[str] = set()
        for r in rows:
            workload = self._workload_from_row(dict(r._mapping), policy)
            if r.state == "pending":
                backend.add_pending(workload, r.pending_since - self.epoch)
                continue
            assignment = assignment_from_json(r.assignment)
            backend.restore_running(Running(workload, assignment, r.admitted_at - self.epoch))
            gone.update(assignment.nodes - backend.nodes.keys())
        for name in sorted(gone):
            backend.evict_from(name, "node-removed", "the node is gone after a restart", now)
        for name in draining:  # a drain committed before the crash may not have been applied
            if name in backend.nodes:
                backend.evict_from(name, DRAINED, "the node is being drained", now)
        return policy

    def _use_pools(self, pools: list[NodePool]) -> None:
        """Decide with ``pools`` from now on: the autoscaler's (its ``set_pools``), or, the
        first time there are pools, a new autoscaler on the simulated cloud."""
        self.node_pools = pools
        if self.autoscaler is not None:
            self.autoscaler.set_pools(pools)
            return
        if not pools:
            return
        spec = self.config.spec
        self.cloud = SimulatedCloud(spec.cloud.config(self.catalog))
        settings = spec.autoscaler.model_copy(
            update={"clock_start": datetime.fromtimestamp(self.epoch, UTC)}
        )
        self.autoscaler = Autoscaler(
            pools,
            self.cloud,
            self.catalog,
            settings,
            pdbs=spec.pdbs,
            do_not_disrupt=spec.do_not_disrupt,
        )
        self.backend.autoscaled = True
        if self.loop is not None:
            self.loop.autoscaler = self.autoscaler

    def _restore_nodes(self, conn: Connection, now: float) -> list[str]:
        """The config's nodes join (again), cordoned if an admin cordoned them; stored nodes
        that are not among them leave. The nodes being drained, in name order."""
        at = self.unix(now)
        nodes_t = tables.nodes
        stored = {
            r.name: r for r in conn.execute(select(nodes_t).where(nodes_t.c.left_at.is_(None)))
        }
        config = {n.name: n for n in self.config.nodes}
        for node in self.config.nodes:
            item = self.catalog.get(node.instance_type) if node.instance_type else None
            info = NodeInfo("config", price_per_hour=item.price_per_hour if item else None)
            row = stored.get(node.name)
            if row is not None and row.unschedulable:
                node = node.with_state(unschedulable=True)
            self.backend.add_node(node, info, now, log=False)
            if node.name not in stored:
                upsert_node(conn, node, info, at)
                self._event(conn, at, "node", None, None, {"action": "join", "node": node.name})
        for name, row in stored.items():
            if name in config or self._adopt(row._mapping, now):
                continue
            why = (
                "not in the config any more"
                if row.source == "config"
                else f"its node pool {row.pool!r} is not in the config any more"
            )
            conn.execute(
                nodes_t.update().where(nodes_t.c.name == name).values(left_at=at, leave_reason=why)
            )
            self._event(
                conn, at, "node", None, None, {"action": "leave", "node": name, "reason": why}
            )
        return sorted(n for n, r in stored.items() if r.draining and n in self.backend.nodes)

    def _adopt(self, row: Mapping[Any, Any], now: float) -> bool:
        """An autoscaled node of a pool still configured joins again, its instance taken
        back by the simulated cloud and the autoscaler (same id, launch time and price: it
        is billed, interrupted and consolidated as before); True when it did."""
        if (
            row["source"] != "autoscaler"
            or self.cloud is None
            or self.autoscaler is None
            or row["pool"] not in self.autoscaler.pools
            or not isinstance(row["instance"], dict)
            or row["capacity_type"] not in get_args(CapacityType)
        ):
            return False
        node = node_from_row(dict(row))
        launched_at = float(row["instance"]["launched_at"]) - self.epoch
        joined_at = row["joined_at"] - self.epoch if row["joined_at"] is not None else None
        instance = Instance(
            id=str(row["instance"]["id"]),
            instance_type=str(node.instance_type),
            zone=str(node.zone),
            capacity_type=cast(CapacityType, node.capacity_type),
            price_per_hour=float(row["price_per_hour"] or 0.0),
            pool=str(row["pool"]),
            state="running",
            launched_at=launched_at,
            ready_at=joined_at,
        )
        if not self.autoscaler.adopt(node.name, instance, "restored", joined=True):
            return False
        self.cloud.adopt(instance)
        info = NodeInfo("autoscaler", row["pool"], row["price_per_hour"], dict(row["instance"]))
        self.backend.add_node(node, info, now, log=False)
        return True

    def _workload_from_row(self, row: Mapping[str, Any], policy: Policy) -> Workload:
        """The workload as it was submitted: its team and priority as resolved then."""
        spec = WorkloadSpec.model_validate(row["spec"])
        try:
            built = build_workload(spec, policy, row["name"], resolve_teams=False)
        except ScenarioError:  # its priority class went away with a policy change
            built = build_workload(
                spec.model_copy(update={"priority": None}), policy, row["name"], resolve_teams=False
            )
        return replace(
            built,
            team=row["team"],
            priority=row["priority"],
            priority_class=row["priority_class"],
            submit_time=row["submitted_at"] - self.epoch,
        )

    # -- the loop thread -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop thread: it reconciles at once on the leader, and on a follower
        refreshes the view and tries for the lease about every second."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="fleetshare-loop", daemon=True)
        self._wakeup.set()
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop thread, wait for it, and give the lease up (another replica takes
        over at once)."""
        self._stop.set()
        self._wakeup.set()
        for thread in (self._thread, self._heartbeat):
            if thread is not None:
                thread.join(timeout=30)
        self._thread = self._heartbeat = None
        self._commits.close()
        if self.lease.held:
            try:
                self.lease.release()
            except Exception:  # the database is gone: the lease expires on its own
                log.warning("could not release the lease", exc_info=True)

    def close(self) -> None:
        """Stop, and close the store."""
        self.stop()
        self.store.close()

    @property
    def stalled(self) -> str | None:
        """Why this replica's loop thread looks hung (None: it went round within
        :attr:`stale_seconds`): a loop that stopped going round is not healthy, however
        healthy its last report was."""
        if self._thread is None:
            return None
        age = time.monotonic() - self.beat
        if age <= self.stale_seconds:
            return None
        return f"the control loop has not gone round for {age:.0f} s (stopped or hung)"

    def _run(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            self.beat = time.monotonic()
            if self.loop is None:
                self._follow()
                continue
            if self._heartbeat is None:
                self._heartbeat = threading.Thread(
                    target=self._renew, name="fleetshare-lease", daemon=True
                )
                self._heartbeat.start()
            with self.lock:
                due = self.backend.next_timer()
            timeout = self.poll_interval
            if due is not None:
                timeout = min(timeout, max(0.0, due - self.clock.now()))
            self._wakeup.wait(timeout)
            gap = min(
                MAX_STEP_GAP_SECONDS,
                max(MIN_STEP_SECONDS, STEP_GAP_FACTOR * self._last_reconcile),
            )
            rest = last + gap - time.monotonic()
            if rest > 0 and self._stop.wait(rest):
                break
            self._wakeup.clear()
            if self._stop.is_set():
                break
            try:
                self.step()
                last = time.monotonic()
            except LeaseLost as exc:
                log.error("control loop stopped: %s", exc)
                self.failed = f"lost the lease: {exc}"
                break
            except Exception as exc:  # the store and memory may differ now: stop deciding
                log.exception("control loop failed; restart the service")
                self.failed = f"{type(exc).__name__}: {exc}"
                break

    def _follow(self) -> None:
        """One round as a follower: try for the lease (about every second; never in ``api``
        mode), else refresh the view (not in ``loop`` mode); then wait."""
        try:
            tried = time.monotonic()
            if self.mode != "api" and tried - self._lease_tried >= self._lease_interval:
                self._lease_tried = tried
                if self.lease.try_acquire():
                    log.warning("this replica holds the lease now: running the control loop")
                    with self.lock:
                        self._take_over()
                    return
            if self.mode != "loop":
                with self._refreshing:
                    self._refresh_follower()
        except LeaseLost:
            self.loop = None
        except Exception:  # the database may be away for a while: keep trying
            log.warning("follower: could not read the store", exc_info=True)
        self._stop.wait(self._lease_interval if self.mode == "loop" else FOLLOW_SECONDS)

    @property
    def _lease_interval(self) -> float:
        return min(LEASE_TRY_SECONDS, self.lease.ttl / 4)

    def _renew(self) -> None:
        """The leader's heartbeat: renew the lease every TTL/4 seconds."""
        interval = self.lease.ttl / 4
        while not self._stop.wait(interval) and self.failed is None:
            try:
                if not self.lease.renew():
                    self.failed = "lost the lease to another replica"
                    log.error("control loop stopped: %s", self.failed)
                    self._wakeup.set()
                    return
            except Exception:  # a step fences its own writes; try again
                log.warning("could not renew the lease", exc_info=True)

    def step(self) -> None:
        """Apply new events from the log and due timers, reconcile, write the changes,
        publish a view. On a follower: nothing."""
        with self.lock:
            loop = self.loop
            if loop is None:
                return
            now = self.clock.now()
            backend = self.backend
            acted = self.view.steps == 0
            if len(self._prebuilt) > 100_000:  # entries the loop never needed: rebuilt on use
                self._prebuilt.clear()
            for action, payload in self._tail():
                acted = True
                loop.world_changed()
                if action == "submit":
                    backend.add_pending(payload, payload.submit_time)
                elif action == "cancel":
                    backend.cancel(payload)
                elif action == "policy":
                    loop.set_engine(self._engine(payload))
                elif action == nodepools.POOLS_EVENT:
                    self._use_pools(payload)
                else:  # a node action
                    backend.cordon(payload, action != "uncordon")
                    if action == "drain":
                        backend.evict_from(payload, DRAINED, "the node is being drained", now)
            for at, timer, item in backend.due(now):
                acted = True
                if timer == FINISH:
                    if backend.finish_due(at, item):
                        loop.world_changed()
                elif timer == NODE and loop.node_ready(item.name):
                    backend.add_node(item, self._node_info(item), at)
                    loop.world_changed()
            seconds = 0.0
            if acted:
                started = time.perf_counter()
                loop.reconcile(now)
                seconds = time.perf_counter() - started
                self._last_reconcile = seconds
            changes, backend.changes = backend.changes, []
            for i in range(0, len(changes), WRITE_CHUNK):  # in order: a crash leaves a prefix
                with self.store.write("loop-write") as conn:
                    if not self.lease.check(conn):
                        raise LeaseLost("another replica took the lease over")
                    chunk = changes[i : i + WRITE_CHUNK]
                    write_changes(conn, chunk, self.unix, backend.nodes, backend.node_info)
            if acted or changes:
                self.view = self._make_view(now, self.view.steps + 1)
        if acted and self.on_step is not None:
            self.on_step(seconds)

    def _tail(self) -> list[tuple[str, Any]]:
        """The submissions, cancellations and policy changes committed since the cursor, in
        commit order, as the loop applies them."""
        e, w = tables.events, tables.workloads
        with self.store.read("loop-tail") as conn:
            top = conn.execute(select(func.max(e.c.id))).scalar() or 0
            if top <= self._cursor:
                return []
            rows = conn.execute(
                select(e.c.id, e.c.kind, e.c.workload, e.c.details)
                .where(e.c.id > self._cursor, e.c.id <= top, e.c.kind.in_(API_EVENTS))
                .order_by(e.c.id)
                .limit(TAIL_BATCH)
            ).all()
            submitted = [r.workload for r in rows if r.kind == "submit"]
            found: dict[str, Any] = {}
            for i in range(0, len(submitted), _CHUNK):
                chunk = submitted[i : i + _CHUNK]
                built = [n for n in chunk if n in self._prebuilt]
                if built:  # only the state is needed
                    query = select(w.c.name, w.c.state).where(named(conn, w.c.name, built))
                    for state_row in conn.execute(query):
                        found[state_row.name] = state_row
                rest = [n for n in chunk if n not in self._prebuilt]
                if rest:
                    for r in conn.execute(select(w).where(named(conn, w.c.name, rest))):
                        found[r.name] = r
            documents = _documents(conn, tables.policy_versions, rows, "policy")
            pool_documents = _documents(conn, tables.nodepool_versions, rows, nodepools.POOLS_EVENT)
        self._cursor = rows[-1].id if len(rows) == TAIL_BATCH else top
        out: list[tuple[str, Any]] = []
        backend = self.backend
        for r in rows:
            if r.kind == "submit":
                row = found.get(r.workload)
                if row is None or row.state != "pending":
                    continue  # cancelled before the loop saw it
                if r.workload in backend.pending or r.workload in backend.running:
                    continue
                workload = self._prebuilt.pop(r.workload, None)
                if workload is None:
                    workload = self._workload_from_row(dict(row._mapping), self.policy)
                out.append(("submit", workload))
            elif r.kind == "cancel":
                out.append(("cancel", r.workload))
            elif r.kind in NODE_ACTIONS:
                out.append((r.kind, r.details["node"]))
            elif r.kind == nodepools.POOLS_EVENT:
                version = r.details.get("version")
                if version is None or version <= self._pools_version:
                    continue
                if version not in pool_documents:
                    continue
                self._pools_version = version
                out.append((r.kind, nodepools.from_document(pool_documents[version])))
            else:
                version = r.details.get("version")
                if version is None or version <= self._policy_version or version not in documents:
                    continue
                self._policy_version = version
                self.policy = load_policy(documents[version], "stored policy")
                out.append(("policy", self.policy))
        return out

    def _node_info(self, node: Node) -> NodeInfo:
        managed = self.autoscaler.nodes.get(node.name) if self.autoscaler else None
        if managed is None:
            return NodeInfo("config")
        inst = managed.instance
        return NodeInfo(
            "autoscaler",
            pool=managed.pool,
            price_per_hour=inst.price_per_hour,
            instance={"id": inst.id, "launched_at": self.unix(inst.launched_at)},
        )

    def _make_view(self, now: float, steps: int) -> View:
        b = self.backend
        assert self.loop is not None
        b.settle_positions()
        return View(
            now,
            self.loop.engine,
            tuple(b.nodes.values()),
            dict(b.node_info),
            dict(b.running),
            dict(b.pending),
            dict(b.waiting),
            steps,
        )

    def wait_steps(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Wait until the loop took ``count`` more steps (tests)."""
        target = self.view.steps + count
        deadline = time.monotonic() + timeout
        while self.view.steps < target and time.monotonic() < deadline:
            self._wakeup.set()
            time.sleep(0.005)
        return self.view.steps >= target

    # -- a follower's view -------------------------------------------------------------------

    def current_view(self) -> View:
        """The view for a read: the loop's latest on the leader; on a follower refreshed from
        the store first, so it shows every change committed before the call (a client that saw
        its workload admitted sees it in its team's usage). The view as it was when the store
        cannot be read."""
        if self.loop is None and self.mode != "loop":
            try:
                with self._refreshing:
                    self._refresh_follower()
            except Exception:
                log.warning("follower: could not read the store", exc_info=True)
        return self.view

    def _refresh_follower(self) -> None:
        """Publish a view read from the store: nodes, pending and admitted work, and the
        pending reasons as the leader last logged them. The first refresh reads every active
        row and node; later ones only the workloads named by events since the last (every
        change of a workload row commits with an event naming it, and event ids are in
        commit order), and the nodes again only after an event about no workload (a node
        joining or leaving, an admin's node operation, the autoscaler's log)."""
        f = self._follower
        w, e, pv = tables.workloads, tables.events, tables.policy_versions
        with self.store.read("follower-refresh") as conn:
            top = conn.execute(select(func.max(e.c.id))).scalar() or 0
            latest = conn.execute(
                select(pv.c.id, pv.c.document).order_by(pv.c.id.desc()).limit(1)
            ).first()
            changed_any = not hasattr(self, "view")
            if latest is not None and latest.id != f.policy_version:
                self.policy = load_policy(latest.document, "stored policy")
                f.engine = self._engine(self.policy)
                f.policy_version = latest.id
                changed_any = True
            columns = (w.c.id, w.c.name, w.c.state, w.c.pending_since, w.c.admitted_at)
            changed: list[Any] = []
            if f.rows_at == 0:
                nodes_changed = True
                changed = list(
                    conn.execute(
                        select(*columns, w.c.assignment)
                        .where(w.c.state.in_(ACTIVE))
                        .order_by(w.c.id)
                    )
                )
            elif top > f.rows_at:
                since = (e.c.id > f.rows_at) & (e.c.id <= top)
                names = list(
                    conn.execute(
                        select(e.c.workload).where(since, e.c.workload.is_not(None)).distinct()
                    ).scalars()
                )
                nodes_changed = (
                    conn.execute(
                        select(e.c.id).where(since, e.c.workload.is_(None)).limit(1)
                    ).first()
                    is not None
                )
                for i in range(0, len(names), _CHUNK):
                    chunk = names[i : i + _CHUNK]
                    changed.extend(
                        conn.execute(
                            select(*columns, w.c.assignment).where(named(conn, w.c.name, chunk))
                        )
                    )
            else:
                nodes_changed = False
            if nodes_changed:
                f.nodes = {}
                f.node_info = {}
                for r in conn.execute(select(tables.nodes).where(tables.nodes.c.left_at.is_(None))):
                    f.nodes[r.name] = node_from_row(dict(r._mapping))
                    f.node_info[r.name] = NodeInfo(r.source, r.pool, r.price_per_hour, r.instance)
            f.rows_at = max(f.rows_at, top)
            if len(self._prebuilt) > 100_000:  # entries never needed: rebuilt on use
                self._prebuilt.clear()
            missing = []
            for r in changed:
                if r.state not in ACTIVE or r.name in f.workloads:
                    continue
                built = self._prebuilt.pop(r.name, None)  # committed here: built already
                if built is None:
                    missing.append(r.name)
                else:
                    f.workloads[r.name] = built
            for i in range(0, len(missing), _CHUNK):
                query = select(w).where(named(conn, w.c.name, missing[i : i + _CHUNK]))
                for r in conn.execute(query):
                    f.workloads[r.name] = self._workload_from_row(dict(r._mapping), self.policy)
            f.place(changed, self.epoch)
            for r in conn.execute(
                select(e.c.id, e.c.workload, e.c.details)
                .where(e.c.id > f.cursor, e.c.id <= top, e.c.kind == "pending")
                .order_by(e.c.id)
            ):
                if r.workload in f.pending:  # else admitted or gone since
                    reason = pending_reason(r.details)
                    f.reasons[r.workload] = Waiting(reason, r.details["position"], reason)
                    changed_any = True
            # every event up to top is committed (ids in commit order): the next refresh
            # starts after it, not after the last ``pending`` event (with none for a while,
            # each refresh scanned every event since)
            f.cursor = max(f.cursor, top)
        if not (changed_any or changed or nodes_changed):  # the view as it was, at this time
            self.view = replace(self.view, now=self.clock.now(), steps=self.view.steps + 1)
            return
        engine = f.engine if f.engine is not None else self._engine(self.policy)
        f.engine = engine
        steps = self.view.steps + 1 if hasattr(self, "view") else 0
        self.view = View(
            self.clock.now(),
            engine,
            tuple(f.nodes.values()),
            f.node_info,
            dict(f.running),
            dict(f.pending),
            dict(f.reasons),
            steps,
        )

    # -- writing the loop's changes ------------------------------------------------------------

    @staticmethod
    def _event(
        conn: Connection,
        at: float,
        kind: str,
        workload: str | None,
        team: str | None,
        details: dict[str, Any],
    ) -> None:
        conn.execute(
            tables.events.insert().values(
                at=at, kind=kind, workload=workload, team=team, details=details
            )
        )

    def _store_policy(
        self,
        conn: Connection,
        policy: Policy,
        source_format: str,
        original: Any,
        actor: str,
        at: float,
    ) -> int:
        document = policy.model_dump(mode="json", exclude_defaults=True)
        result = conn.execute(
            tables.policy_versions.insert().values(
                created_at=at,
                source_format=source_format,
                document=document,
                original=original,
                author=actor,
            )
        )
        assert result.inserted_primary_key is not None
        version = int(result.inserted_primary_key[0])
        teams = [t.name for t in policy.teams]
        conn.execute(
            tables.audit_log.insert().values(
                at=at,
                actor=actor,
                action="policy-set" if actor != "config" else "policy-seeded",
                policy_version=version,
                details={"format": source_format, "teams": teams},
            )
        )
        self._event(conn, at, "policy", None, None, {"version": version, "teams": teams})
        return version

    # -- what the API asks -----------------------------------------------------------------

    def submit(self, spec: WorkloadSpec, principal: Principal) -> dict[str, Any]:
        """Commit a new workload (group-committed with concurrent submissions) and wake the
        loop; the row as stored (with its ``id``). Raises a :class:`ServiceError`."""
        item = self._commits.submit(self._submission(spec, principal))
        return self._submitted(item)

    async def submit_async(self, spec: WorkloadSpec, principal: Principal) -> dict[str, Any]:
        """:meth:`submit` from a coroutine (the event loop runs on while the batch commits)."""
        item = await self._commits.submit_async(self._submission(spec, principal))
        return self._submitted(item)

    def _submission(self, spec: WorkloadSpec, principal: Principal) -> _Submission:
        if not principal.can_write_workloads:
            raise Forbidden("a viewer token cannot submit workloads")
        try:
            workload = build_workload(spec, self.policy, "workload")
        except ScenarioError as exc:
            raise Invalid(str(exc)) from None
        if not principal.sees_team(workload.team):
            raise Forbidden(f"a {principal.scope} token submits to team {principal.team} only")
        return _Submission(
            workload, spec.model_dump(mode="json", exclude_defaults=True), principal.actor
        )

    def _submitted(self, item: _Submission) -> dict[str, Any]:
        if item.error is not None:
            raise item.error
        assert item.row is not None
        return item.row

    def _commit_submissions(self, batch: list[_Submission]) -> None:
        """One transaction for a batch of submissions: each a workload row and its ``submit``
        event; a name used before is refused (409) without failing the others; when the
        store fails, every one of them gets a 503."""
        try:
            self._commit_batch(batch)
            self.wake()
        except Exception as exc:
            log.warning("a batch of %d submissions failed", len(batch), exc_info=True)
            for item in batch:
                self._prebuilt.pop(item.workload.name, None)
                item.row = None
                if item.error is None:
                    item.error = Unavailable(f"the store refused the batch: {exc}")

    def _commit_batch(self, batch: list[_Submission]) -> None:
        firsts: dict[str, _Submission] = {}
        for item in batch:  # a name twice in one batch: the first wins
            if item.workload.name in firsts:
                item.error = self._taken(item.workload.name)
            else:
                firsts[item.workload.name] = item
        if not firsts:
            return
        if self.store.postgresql:  # one statement, one round trip (Store.write_at_once)
            at = self.unix(self.clock.now())
            rows = self._new_rows(firsts, at)
            details = [self._submit_details(item) for item in firsts.values()]
            self._accepted(firsts, rows, pg_writes.submit(self.store, rows, details), at)
            return
        w = tables.workloads
        with self.store.write("submit") as conn:
            at = self.unix(self.clock.now())
            rows = self._new_rows(firsts, at)
            taken = set(conn.execute(select(w.c.name).where(w.c.name.in_(firsts))).scalars())
            new = [row for row in rows if row["name"] not in taken]
            ids: dict[str, int] = {}
            if new:
                inserted = conn.execute(
                    w.insert().returning(w.c.id, sort_by_parameter_order=True), new
                ).scalars()
                ids = {row["name"]: int(i) for row, i in zip(new, inserted, strict=True)}
            ok = self._accepted(firsts, rows, ids, at)
            if ok:
                conn.execute(
                    tables.events.insert(),
                    [
                        {
                            "at": at,
                            "kind": "submit",
                            "workload": item.workload.name,
                            "team": item.workload.team,
                            "details": self._submit_details(item),
                        }
                        for item in ok
                    ],
                )

    @staticmethod
    def _new_rows(items: dict[str, _Submission], at: float) -> list[dict[str, Any]]:
        """The workload rows of new submissions (in the order given)."""
        return [
            {
                "name": name,
                "team": item.workload.team,
                "state": "pending",
                "spec": item.spec,
                "priority": item.workload.priority,
                "priority_class": item.workload.priority_class,
                "submitted_at": at,
                "pending_since": at,
                "preemptions": 0,
                "submitted_by": item.actor,
            }
            for name, item in items.items()
        ]

    @staticmethod
    def _submit_details(item: _Submission) -> dict[str, Any]:
        return {"pods": item.workload.pod_count, "by": item.actor}

    def _accepted(
        self,
        items: dict[str, _Submission],
        rows: list[dict[str, Any]],
        ids: dict[str, int],
        at: float,
    ) -> list[_Submission]:
        """Set each item's committed row (``ids``: those inserted; the others get a 409) and
        keep its workload built for the loop; the items inserted."""
        ok = []
        since = at - self.epoch
        for row, (name, item) in zip(rows, items.items(), strict=True):
            if name not in ids:
                item.error = self._taken(name)
                continue
            item.row = {**row, "id": ids[name], **_NOT_YET}
            # the loop (or a follower's view) takes this instead of rebuilding it
            self._prebuilt[name] = replace(item.workload, submit_time=since)
            ok.append(item)
        return ok

    @staticmethod
    def _taken(name: str) -> Conflict:
        return Conflict(f"a workload named {name!r} exists already")

    def cancel(self, name: str, principal: Principal) -> None:
        """Commit the cancellation of a pending or admitted workload and wake the loop."""
        w = tables.workloads
        with self.store.write("cancel") as conn:
            row = conn.execute(select(w.c.team, w.c.state).where(w.c.name == name)).first()
            if row is None or not principal.sees_team(row.team):
                raise NotFound(f"no workload {name!r}")
            if not principal.can_write_workloads:
                raise Forbidden("a viewer token cannot cancel workloads")
            if row.state not in ACTIVE:
                raise Conflict(f"workload {name!r} is {row.state} already")
            self.cancel_in(conn, name, row.team, principal.actor, self.unix(self.clock.now()))
        self.wake()

    def cancel_in(self, conn: Connection, name: str, team: str, actor: str, at: float) -> None:
        """Within the write transaction ``conn``: mark the active workload ``name``
        cancelled with its ``cancel`` event (the leader's loop drops it when it reads the
        event; call :meth:`wake` after the commit)."""
        w = tables.workloads
        conn.execute(w.update().where(w.c.name == name).values(state="cancelled", finished_at=at))
        self._event(conn, at, "cancel", name, team, {"by": actor})

    def wake(self) -> None:
        """Wake the loop (after committing a change it acts on): its thread, or in ``api``
        mode the loop process."""
        self._wakeup.set()
        if self.notify_loop is not None:
            self.notify_loop()

    def set_policy(
        self, policy: Policy, source_format: str, original: Any, principal: Principal
    ) -> int:
        """Commit a new policy version (with its audit row) and wake the loop; the version."""
        if not principal.admin:
            raise Forbidden("only an admin token may change the policy")
        w = tables.workloads
        with self.store.write("policy-write") as conn:
            active = set(
                conn.execute(select(w.c.team).where(w.c.state.in_(ACTIVE)).distinct()).scalars()
            )
            missing = sorted(active - {t.name for t in policy.teams})
            if missing:
                raise Conflict(
                    f"teams {', '.join(missing)} have pending or admitted workloads; "
                    "the new policy must keep them"
                )
            version = self._store_policy(
                conn,
                policy,
                source_format,
                original,
                principal.actor,
                self.unix(self.clock.now()),
            )
        self.policy = policy
        self.wake()
        return version

    def change_team(
        self, name: str, team: Mapping[str, Any] | None, principal: Principal
    ) -> tuple[int, bool]:
        """Add or replace the team ``name`` with the fleetshare ``team`` document (its
        ``name`` is ``name``), or remove it (None), in the policy in force: a new policy
        version, audited, read, changed and written in one store transaction (no change
        another replica made meanwhile is lost). The version, and whether the team is new.
        Raises :class:`Forbidden`, :class:`NotFound` (removing no such team),
        :class:`Conflict` (removing a team with pending or admitted work) or PolicyError."""
        if not principal.admin:
            raise Forbidden("only an admin token may change the policy")
        pv, w = tables.policy_versions, tables.workloads
        with self.store.write("policy-write") as conn:
            latest = conn.execute(
                select(pv.c.document).order_by(pv.c.id.desc()).limit(1)
            ).scalar_one_or_none()
            document = dict(
                latest
                if latest is not None
                else self.policy.model_dump(mode="json", exclude_defaults=True)
            )
            teams = [dict(t) for t in document.get("teams", [])]
            at = next((i for i, t in enumerate(teams) if t.get("name") == name), None)
            if team is None:
                if at is None:
                    raise NotFound(f"no team {name!r}")
                busy = conn.execute(
                    select(w.c.id).where(w.c.team == name, w.c.state.in_(ACTIVE)).limit(1)
                ).first()
                if busy is not None:
                    raise Conflict(f"team {name} has pending or admitted workloads")
                del teams[at]
            elif at is None:
                teams.append({**team, "name": name})
            else:
                teams[at] = {**team, "name": name}
            policy = load_policy({**document, "teams": teams}, "policy")
            compile_policy(policy, self.catalog)
            version = self._store_policy(
                conn, policy, "fleetshare", None, principal.actor, self.unix(self.clock.now())
            )
        self.policy = policy
        self.wake()
        return version, team is not None and at is None

    def pools_in_force(self) -> tuple[Any, list[NodePool]]:
        """The stored version in force (None: the config's pools) and its pools, read from
        the store (a follower's too)."""
        with self.store.read("nodepools-read") as conn:
            row = nodepools.latest(conn)
        if row is None:
            return None, list(self.config.spec.node_pools)
        return row, nodepools.from_document(row.document)

    def set_pools(self, pools: list[NodePool], principal: Principal) -> int:
        """Commit the node pools (checked against the catalog and the cloud; a new version,
        audited) and wake the loop; the version. Raises :class:`Forbidden`, or
        :class:`PoolProblems` naming each bad field."""
        if not principal.admin:
            raise Forbidden("only an admin token may change the node pools")
        found = nodepools.problems(pools, self.catalog, self.config.spec.cloud.zones)
        if found:
            raise PoolProblems(found)
        with self.store.write("nodepools-write") as conn:
            version = nodepools.save(conn, pools, principal.actor, self.unix(self.clock.now()))
        self.wake()
        return version

    def node_action(self, name: str, action: str, principal: Principal) -> bool:
        """Commit an admin's ``cordon`` (no new work on the node), ``uncordon`` or ``drain``
        (cordon, and its work is requeued) of a node in the cluster, audited, and wake the
        loop, which applies it; whether the node is cordoned now."""
        if not principal.admin:
            raise Forbidden("only an admin token may cordon, uncordon or drain nodes")
        n = tables.nodes
        cordoned = action != "uncordon"
        with self.store.write("node-action") as conn:
            row = conn.execute(
                select(n.c.draining).where(n.c.name == name, n.c.left_at.is_(None))
            ).first()
            if row is None:
                raise NotFound(f"no node {name!r}")
            draining = action == "drain" or (action == "cordon" and bool(row.draining))
            conn.execute(
                n.update().where(n.c.name == name).values(unschedulable=cordoned, draining=draining)
            )
            at = self.unix(self.clock.now())
            conn.execute(
                tables.audit_log.insert().values(
                    at=at, actor=principal.actor, action=f"node-{action}", details={"node": name}
                )
            )
            self._event(conn, at, action, None, None, {"node": name, "by": principal.actor})
        self.wake()
        return cordoned


class PoolProblems(ServiceError):
    """Node pools refused: ``problems`` is ``(loc, why)`` per bad field."""

    status = 422

    def __init__(self, problems: list[tuple[list[str | int], str]]) -> None:
        super().__init__("; ".join(why for _, why in problems))
        self.problems = problems


def _documents(conn: Connection, table: Any, rows: Sequence[Any], kind: str) -> dict[int, Any]:
    """The documents of the versions that ``kind`` events among ``rows`` name."""
    versions = [v for r in rows if r.kind == kind and (v := r.details.get("version"))]
    if not versions:
        return {}
    query = select(table.c.id, table.c.document).where(table.c.id.in_(versions))
    return {int(i): d for i, d in conn.execute(query).all()}


@dataclass(eq=False)
class _Submission:
    workload: Workload
    spec: dict[str, Any]
    actor: str
    row: dict[str, Any] | None = None
    """The row as committed (set by the commit)."""
    error: BaseException | None = None


_NOT_YET = {
    "admitted_at": None,
    "first_admitted_at": None,
    "finished_at": None,
    "assignment": None,
    "borrowed": None,
}
"""The columns of a new workload row that its submission leaves empty."""


@dataclass
class _FollowerState:
    """What a follower keeps between refreshes of its view, changed in place by each (the
    view gets copies)."""

    workloads: dict[str, Workload] = field(default_factory=dict)
    """The pending and admitted workloads, built once each."""
    ids: dict[str, int] = field(default_factory=dict)
    """Their submission order (row id)."""
    pending: dict[str, Workload] = field(default_factory=dict)
    """In submission order."""
    running: dict[str, Running] = field(default_factory=dict)
    """In the order the follower saw them admitted."""
    reasons: dict[str, Waiting] = field(default_factory=dict)
    rows_at: int = 0
    """The last event whose workload rows have been read."""
    nodes: dict[str, Node] = field(default_factory=dict)
    """The nodes in the cluster (replaced, never changed, when they are read again)."""
    node_info: dict[str, NodeInfo] = field(default_factory=dict)
    cursor: int = 0
    """The last event read for ``pending`` reasons."""
    policy_version: int = 0
    engine: Engine | None = None

    def place(self, rows: Sequence[Any], epoch: float) -> None:
        """Apply workload rows read since the last refresh (id, name, state, admitted_at,
        assignment; their workloads built already): a pending row joins the queue in
        submission order, an admitted one runs where its assignment says, an ended one
        leaves."""
        reorder = False
        for r in rows:
            name = r.name
            if r.state == "pending":
                self.running.pop(name, None)
                if name not in self.pending:
                    reorder = reorder or (bool(self.pending) and r.id < self._last_pending())
                    self.pending[name] = self.workloads[name]
                    self.ids[name] = r.id
            elif r.state == "admitted":
                self.pending.pop(name, None)
                self.reasons.pop(name, None)
                self.ids[name] = r.id
                assignment = assignment_from_json(r.assignment)
                self.running[name] = Running(
                    self.workloads[name], assignment, r.admitted_at - epoch
                )
            else:
                for held in (self.pending, self.running, self.reasons, self.workloads, self.ids):
                    held.pop(name, None)
        if reorder:  # a preempted workload is back in the queue at its place
            ids = self.ids
            self.pending = dict(sorted(self.pending.items(), key=lambda item: ids[item[0]]))

    def _last_pending(self) -> int:
        return self.ids[next(reversed(self.pending))]
