"""The control plane: the control loop on the wall clock over the embedded backend, with
its state in the store.

Threads. One loop thread owns the :class:`~fleetshare.service.backend.EmbeddedCluster` and the
:class:`~fleetshare.control.loop.ControlLoop` (under :attr:`ControlPlane.lock`). API threads
never touch them: a submission, a cancellation or a policy change is committed to the store
first (that commit is what the API acknowledges), then put in the loop's inbox, and the loop
is woken. The loop thread sleeps until its inbox fills or its next timer (a finish, a node
becoming Ready, a guard expiring) is due; each time it wakes it applies the inbox and the
due timers, reconciles, writes everything the reconcile changed to the store in one
transaction, and publishes an immutable :class:`View` that the API reads for teams, reasons
and metrics.

Transactions. A submission is one transaction (the workload row and its ``submit`` event);
so is a cancellation and a policy change (the version, its audit row and the event). The
loop's writes are guarded by the state they expect (admit only a ``pending`` row, preempt or
finish only an ``admitted`` one), so a cancellation committed meanwhile always wins, and the
loop drops the workload when the cancellation reaches it through the inbox. Submissions,
cancellations and policy changes hold :attr:`ControlPlane.submit_lock` from their commit
until they are in the inbox, so the inbox is in commit order.

Restart. The store is the truth: the latest policy version, the nodes (the config's nodes
again; nodes the autoscaler had launched are gone with the simulated cloud, and their work is
requeued), and every pending and admitted workload in submit order. Admitted workloads are
put back on their nodes with their admission time, so they finish when they would have
(time kept running while the service was down); none is admitted again; work whose node is
gone is requeued with reason ``node-removed``. Loop time is seconds since the store's epoch,
so times written before the restart keep their meaning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import IntegrityError

from fleetshare.autoscaling.simulated_cloud import SimulatedCloud
from fleetshare.control.autoscaler import Autoscaler
from fleetshare.control.clock import WallClock
from fleetshare.control.loop import ControlLoop
from fleetshare.governance.admission import CycleCache, Engine
from fleetshare.governance.snapshot import Running
from fleetshare.model.catalog import Catalog
from fleetshare.model.node import Node
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import Policy, load_policy
from fleetshare.scenario.loader import Scenario, ScenarioError, build_workload
from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service import store as tables
from fleetshare.service.auth import Principal
from fleetshare.service.backend import (
    FINISH,
    JOIN,
    Change,
    EmbeddedCluster,
    NodeInfo,
    Waiting,
    assignment_from_json,
    node_row,
)
from fleetshare.service.store import Store

log = logging.getLogger("fleetshare.service")

ACTIVE = ("pending", "admitted")
IDLE_WAIT_SECONDS = 30.0
"""The loop wakes at least this often even with nothing to do."""


class ServiceError(Exception):
    """An operation refused; ``status`` is the HTTP status it maps to."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Forbidden(ServiceError):
    status = 403


class Invalid(ServiceError):
    status = 422


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

    def __init__(self, config: Scenario, store: Store) -> None:
        if config.workloads or config.events or config.policy_changes:
            raise ScenarioError(
                "a service config holds the cluster, policy and node pools only: submit "
                "workloads through the API (workloads, cluster.events and policy_changes "
                "are scenario features)"
            )
        self.config = config
        self.catalog: Catalog = config.catalog
        self.store = store
        self.epoch = store.create()
        self.clock = WallClock(time.time() - self.epoch)
        self.lock = threading.Lock()
        """Held by the loop thread while it works on the backend and the loop."""
        self.submit_lock = threading.Lock()
        """Held from an API change's commit until it is in the inbox (commit order)."""
        self.backend = EmbeddedCluster()
        self.cache = CycleCache()
        self.cloud: SimulatedCloud | None = None
        self.autoscaler: Autoscaler | None = None
        self._inbox: deque[tuple[str, Any]] = deque()
        self._wakeup = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failed: str | None = None
        """Why the loop stopped, when it failed (the store and memory may then differ: the
        service must be restarted, and rebuilds from the store)."""
        self.on_step: Callable[[float], None] | None = None
        """Called with each reconcile's duration in seconds (metrics)."""
        self.policy: Policy = self._rebuild()
        self.loop: ControlLoop
        self.view: View = self._make_view(self.clock.now(), 0)

    # -- time ------------------------------------------------------------------------------

    def unix(self, t: float) -> float:
        """Loop time ``t`` as Unix seconds."""
        return self.epoch + t

    def datetime(self, unix: float | None) -> str | None:
        """Unix seconds as ISO 8601 UTC."""
        if unix is None:
            return None
        return datetime.fromtimestamp(unix, UTC).isoformat().replace("+00:00", "Z")

    # -- start-up and restart ------------------------------------------------------------------

    def _engine(self, policy: Policy) -> Engine:
        engine = Engine(policy, self.catalog)
        engine.cache = self.cache
        return engine

    def _rebuild(self) -> Policy:
        """Load the store into memory (see the module docstring); seed an empty store from
        the config."""
        now = self.clock.now()
        at = self.unix(now)
        backend = self.backend
        with self.store.write() as conn:
            row = conn.execute(
                select(tables.policy_versions.c.document)
                .order_by(tables.policy_versions.c.id.desc())
                .limit(1)
            ).first()
            if row is None:
                policy = self.config.policy
                self._store_policy(conn, policy, "fleetshare", None, "config", at)
            else:
                policy = load_policy(row.document, "stored policy")
            self._restore_nodes(conn, now)
            rows = conn.execute(
                select(tables.workloads)
                .where(tables.workloads.c.state.in_(ACTIVE))
                .order_by(tables.workloads.c.id)
            ).all()
        self.policy = policy
        spec = self.config.spec
        if spec.node_pools:
            self.cloud = SimulatedCloud(spec.cloud.config(self.catalog))
            settings = spec.autoscaler.model_copy(
                update={"clock_start": datetime.fromtimestamp(self.epoch, UTC)}
            )
            self.autoscaler = Autoscaler(
                spec.node_pools,
                self.cloud,
                self.catalog,
                settings,
                pdbs=spec.pdbs,
                do_not_disrupt=spec.do_not_disrupt,
            )
        self.loop = ControlLoop(backend, self._engine(policy), self.autoscaler)
        gone: set[str] = set()
        for r in rows:
            workload = self._workload_from_row(dict(r._mapping), policy)
            if r.state == "pending":
                backend.add_pending(workload, r.pending_since - self.epoch)
                continue
            assignment = assignment_from_json(r.assignment)
            backend.restore_running(Running(workload, assignment, r.admitted_at - self.epoch))
            gone.update(n for ps in assignment.placement for n, _ in ps if n not in backend.nodes)
        for name in sorted(gone):
            backend.evict_from(name, "node-removed", "the node is gone after a restart", now)
        return policy

    def _restore_nodes(self, conn: Connection, now: float) -> None:
        """The config's nodes join (again); stored nodes that are not among them leave."""
        at = self.unix(now)
        nodes_t = tables.nodes
        stored = {
            r.name: r for r in conn.execute(select(nodes_t).where(nodes_t.c.left_at.is_(None)))
        }
        config = {n.name: n for n in self.config.nodes}
        for node in self.config.nodes:
            item = self.catalog.get(node.instance_type) if node.instance_type else None
            info = NodeInfo("config", price_per_hour=item.price_per_hour if item else None)
            self.backend.add_node(node, info, now, log=False)
            if node.name not in stored:
                self._upsert_node(conn, node, info, at)
                self._event(conn, at, "node", None, None, {"action": "join", "node": node.name})
        for name, row in stored.items():
            if name in config:
                continue
            why = (
                "not in the config any more"
                if row.source == "config"
                else "the simulated cloud does not survive a restart"
            )
            conn.execute(
                nodes_t.update().where(nodes_t.c.name == name).values(left_at=at, leave_reason=why)
            )
            self._event(
                conn, at, "node", None, None, {"action": "leave", "node": name, "reason": why}
            )

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
        """Start the loop thread (it reconciles at once)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="fleetshare-loop", daemon=True)
        self._wakeup.set()
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop thread and wait for it."""
        self._stop.set()
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                due = self.backend.next_timer()
            timeout = IDLE_WAIT_SECONDS
            if due is not None:
                timeout = min(timeout, max(0.0, due - self.clock.now()))
            self._wakeup.wait(timeout)
            self._wakeup.clear()
            if self._stop.is_set():
                break
            try:
                self.step()
            except Exception as exc:  # the store and memory may differ now: stop deciding
                log.exception("control loop failed; restart the service")
                self.failed = f"{type(exc).__name__}: {exc}"
                break

    def step(self) -> None:
        """Apply the inbox and due timers, reconcile, write the changes, publish a view."""
        with self.lock:
            now = self.clock.now()
            backend, loop = self.backend, self.loop
            acted = self.view.steps == 0
            while self._inbox:
                action, payload = self._inbox.popleft()
                acted = True
                loop.world_changed()
                if action == "submit":
                    backend.add_pending(payload, payload.submit_time)
                elif action == "cancel":
                    backend.cancel(payload)
                elif action == "policy":
                    loop.set_engine(self._engine(payload))
            for at, timer, item in backend.due(now):
                acted = True
                if timer == FINISH:
                    if backend.finish_due(at, item):
                        loop.world_changed()
                elif timer == JOIN and loop.node_ready(item.name):
                    backend.add_node(item, self._node_info(item), at)
                    loop.world_changed()
            seconds = 0.0
            if acted:
                started = time.perf_counter()
                loop.reconcile(now)
                seconds = time.perf_counter() - started
            changes, backend.changes = backend.changes, []
            if changes:
                with self.store.write() as conn:
                    for change in changes:
                        self._write(conn, change)
            self.view = self._make_view(now, self.view.steps + 1)
        if acted and self.on_step is not None:
            self.on_step(seconds)

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

    # -- writing the loop's changes ------------------------------------------------------------

    def _write(self, conn: Connection, change: Change) -> None:
        w = tables.workloads
        at = self.unix(change.at)
        data = change.data
        kind = change.kind
        if kind == "admit":
            updated = conn.execute(
                w.update()
                .where(w.c.name == data["workload"], w.c.state == "pending")
                .values(
                    state="admitted",
                    admitted_at=at,
                    first_admitted_at=func.coalesce(w.c.first_admitted_at, at),
                    assignment=data["assignment"],
                    borrowed=data["borrowed"],
                )
            ).rowcount
            if updated:
                assignment = data["assignment"]
                details = {
                    "flavors": list(dict.fromkeys(assignment["flavors"])),
                    "nodes": sorted({n for ps in assignment["placement"] for n, _ in ps}),
                    "borrowed": data["borrowed"],
                }
                self._event(conn, at, "admit", data["workload"], data["team"], details)
        elif kind == "preempt":
            updated = conn.execute(
                w.update()
                .where(w.c.name == data["workload"], w.c.state == "admitted")
                .values(
                    state="pending",
                    pending_since=at,
                    admitted_at=None,
                    assignment=None,
                    borrowed=None,
                    preemptions=w.c.preemptions + 1,
                )
            ).rowcount
            if updated:
                details = {k: data[k] for k in ("by", "by_team", "reason", "message")}
                self._event(conn, at, "preempt", data["workload"], data["team"], details)
        elif kind == "finish":
            team = conn.execute(
                w.update()
                .where(w.c.name == data["workload"], w.c.state == "admitted")
                .values(state="finished", finished_at=at)
                .returning(w.c.team)
            ).scalar()
            if team is not None:
                self._event(conn, at, "finish", data["workload"], team, {})
        elif kind == "pending":
            details = {"reason": data["reason"], "position": data["position"]}
            self._event(conn, at, "pending", data["workload"], data["team"], details)
        elif kind == "node-join":
            name = data["node"]
            self._upsert_node(conn, self.backend.nodes[name], self.backend.node_info[name], at)
            self._event(conn, at, "node", None, None, {"action": "join", "node": name})
        elif kind == "node-leave":
            conn.execute(
                tables.nodes.update()
                .where(tables.nodes.c.name == data["node"], tables.nodes.c.left_at.is_(None))
                .values(left_at=at, leave_reason=data["reason"])
            )
            details = {"action": "leave", "node": data["node"], "reason": data["reason"]}
            self._event(conn, at, "node", None, None, details)
        elif kind == "warning":
            self._event(conn, at, "warning", None, None, {"message": data["message"]})
        else:  # the autoscaler's log: launch, autoscaler, node
            details = dict(data)
            self._event(conn, at, str(details.pop("event")), None, None, details)

    def _upsert_node(self, conn: Connection, node: Node, info: NodeInfo, at: float) -> None:
        row = node_row(node, info)
        values = {**row, "joined_at": at, "left_at": None, "leave_reason": None}
        t = tables.nodes
        if not conn.execute(t.update().where(t.c.name == node.name).values(values)).rowcount:
            conn.execute(t.insert().values(values))

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

    def _post(self, kind: str, payload: Any) -> None:
        self._inbox.append((kind, payload))
        self._wakeup.set()

    def submit(self, spec: WorkloadSpec, principal: Principal) -> int:
        """Commit a new workload and queue it; its row id. Raises a :class:`ServiceError`."""
        if not principal.can_write_workloads:
            raise Forbidden("a viewer token cannot submit workloads")
        with self.submit_lock:
            try:
                workload = build_workload(spec, self.policy, "workload")
            except ScenarioError as exc:
                raise Invalid(str(exc)) from None
            if not principal.sees_team(workload.team):
                raise Forbidden(f"a {principal.scope} token submits to team {principal.team} only")
            now = self.clock.now()
            at = self.unix(now)
            workload = replace(workload, submit_time=now)
            w = tables.workloads
            try:
                with self.store.write() as conn:
                    result = conn.execute(
                        w.insert().values(
                            name=workload.name,
                            team=workload.team,
                            state="pending",
                            spec=spec.model_dump(mode="json", exclude_defaults=True),
                            priority=workload.priority,
                            priority_class=workload.priority_class,
                            submitted_at=at,
                            pending_since=at,
                            preemptions=0,
                            submitted_by=principal.actor,
                        )
                    )
                    assert result.inserted_primary_key is not None
                    row_id = int(result.inserted_primary_key[0])
                    details = {"pods": workload.pod_count, "by": principal.actor}
                    self._event(conn, at, "submit", workload.name, workload.team, details)
            except IntegrityError:
                raise Conflict(f"a workload named {workload.name!r} exists already") from None
            self._post("submit", workload)
        return row_id

    def cancel(self, name: str, principal: Principal) -> None:
        """Commit the cancellation of a pending or admitted workload and queue it."""
        w = tables.workloads
        with self.submit_lock:
            with self.store.write() as conn:
                row = conn.execute(select(w.c.team, w.c.state).where(w.c.name == name)).first()
                if row is None or not principal.sees_team(row.team):
                    raise NotFound(f"no workload {name!r}")
                if not principal.can_write_workloads:
                    raise Forbidden("a viewer token cannot cancel workloads")
                if row.state not in ACTIVE:
                    raise Conflict(f"workload {name!r} is {row.state} already")
                at = self.unix(self.clock.now())
                conn.execute(
                    w.update().where(w.c.name == name).values(state="cancelled", finished_at=at)
                )
                self._event(conn, at, "cancel", name, row.team, {"by": principal.actor})
            self._post("cancel", name)

    def set_policy(
        self, policy: Policy, source_format: str, original: Any, principal: Principal
    ) -> int:
        """Commit a new policy version (with its audit row) and queue it; the version."""
        if not principal.admin:
            raise Forbidden("only an admin token may change the policy")
        w = tables.workloads
        with self.submit_lock:
            with self.store.write() as conn:
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
            self._post("policy", policy)
        return version
