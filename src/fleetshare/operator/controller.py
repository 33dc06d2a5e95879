"""The operator's main loop: install the CRDs, win the Lease, watch, reconcile.

One thread decides (this loop); one thread per watched kind feeds it (:mod:`.watch`). Each
turn drains what the watches saw into the :class:`~.watch.Store`, re-reads the policy from the
ClusterPolicy and Team objects when they changed, rebuilds the backend's view
(:meth:`KubeCluster.refresh`), runs the same :class:`~fleetshare.control.loop.ControlLoop` the
simulator and the service run, and writes each Team's status. It sleeps until something
changes, a guard expires (``wake``), a retry is due, or ``resync_seconds`` pass.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fleetshare.autoscaling.cloud import CloudProvider
from fleetshare.autoscaling.settings import AutoscalerSpec
from fleetshare.control.autoscaler import Autoscaler
from fleetshare.control.clock import Clock, WallClock
from fleetshare.control.loop import ControlLoop
from fleetshare.governance.admission import CycleCache, Engine
from fleetshare.model.catalog import Catalog, load_catalog
from fleetshare.operator.budget import WriteBudget
from fleetshare.operator.cluster import KubeCluster
from fleetshare.operator.crds import API_VERSION, DEFAULT_POLICY, crds, policy_from, pools_from
from fleetshare.operator.events import Events
from fleetshare.operator.kinds import OPTIONAL, RESOURCES
from fleetshare.operator.kube import (
    CRDS,
    JOBS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    PRIORITY_CLASSES,
    Kube,
    KubeError,
    Resource,
)
from fleetshare.operator.lease import LeaseElector
from fleetshare.operator.metrics import OperatorMetrics, summary
from fleetshare.operator.nodeclaims import NODE_CLAIMS, NODE_POOLS, NodeClaims
from fleetshare.operator.scaledobjects import SCALED_OBJECTS, ScaledObjects
from fleetshare.operator.status import status_patch, team_status
from fleetshare.operator.watch import Store, Watcher
from fleetshare.policy.schema import Policy, PolicyError

log = logging.getLogger("fleetshare.operator")

TEAMS = Resource("Team", API_VERSION, "teams", False)
CLUSTER_POLICIES = Resource("ClusterPolicy", API_VERSION, "clusterpolicies", False)


STANDBY_LOG_SECONDS = 300.0
"""A standby says so at start and then this often (else it looks like a hung process)."""


STALE_SECONDS = 60.0
"""The operator's loop goes round at least every 2.5 s (half the lease's renewal period)
when idle, standby or leader; one reconcile of 15,000 workloads takes a few seconds on 2
cores. Not gone round for this long, it is hung (:meth:`Operator.stalled`)."""


@dataclass
class Settings:
    """How the operator runs (``fleetshare operator`` options)."""

    namespaces: Sequence[str] = ()
    """Govern workloads in these namespaces only (empty: all)."""
    install_crds: bool = True
    leader_elect: bool = True
    lease_namespace: str = "default"
    identity: str = ""
    resync_seconds: float = 10.0
    retry_seconds: float = 1.0
    cloud: CloudProvider | None = None
    """Where the autoscaler launches nodes for the NodePool objects (None: no autoscaling)."""
    autoscaler: AutoscalerSpec | None = None
    """Batching, repair and disruption timing (default: the simulator's defaults)."""
    registration_timeout_seconds: float = 900.0
    """A NodeClaim whose node has not registered by then is deleted, its instance
    terminated (Karpenter: 15 minutes)."""
    status_interval_seconds: float = 5.0
    """A Team's status is written at most this often (a change sooner waits for the
    interval's end; Kueue refreshes its queues' pending status every 5 s by default)."""
    status_writes_per_second: float = 1.0
    """... and all Teams' status writes together at most this often on average (a burst of
    one per Team): with many Teams, each is refreshed less often, least recently written
    first, so status takes a bounded share of the client's requests."""
    event_queue: int = 1000
    """Events wait in a queue of this size for threads of their own (when it is full,
    similar ones are folded into one: :class:`~fleetshare.operator.events.Events`); 0 posts
    them in line."""
    writes_in_flight: int = 100
    """Admission writes sent in the background and not yet answered, at most: the loop
    counts a workload admitted as soon as its write is handed over and does not wait for the
    answer; while this many are outstanding it runs no admission cycle (the writer wakes it
    when half are answered). 100 is two seconds of a 50 requests/s client. 0: each cycle's
    writes are sent before its reconcile ends."""
    write_threads: int = 32
    """Admission writes sent at once."""
    incremental: bool = True
    """Follow the watches' changes (:meth:`KubeCluster.refresh`) and carry the engine's
    state between cycles; False reads every object at every reconcile (the plain path)."""
    scaled_objects: bool = True
    """Scale the Deployments of KEDA ScaledObjects (where their CRD is installed)."""
    stale_seconds: float = STALE_SECONDS
    """A loop that has not gone round for this long is hung: ``/healthz`` answers 503 and
    the kubelet's liveness probe restarts the operator (``--stale-seconds``)."""


SUMMARY_SECONDS = 1.0
"""The metrics' summary is refreshed at most this often (monotonic; no decision reads it)."""


def install_crds(kube: Kube, timeout: float = 30.0) -> None:
    """Create or update fleetshare's CRDs and wait until the API serves them."""
    for crd in crds():
        name = crd["metadata"]["name"]
        try:
            current = kube.get(CRDS, name)
        except KubeError as exc:
            if exc.status != 404:
                raise
            kube.create(CRDS, crd)
        else:
            if current.get("spec") != crd["spec"]:
                body = {**crd, "metadata": {**crd["metadata"],
                        "resourceVersion": current["metadata"]["resourceVersion"]}}  # fmt: skip
                kube.replace(CRDS, name, body)
    deadline = time.monotonic() + timeout
    for crd in crds():
        name = crd["metadata"]["name"]
        while True:
            status = kube.get(CRDS, name).get("status") or {}
            if any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in status.get("conditions") or ()):  # fmt: skip
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established after {timeout:g} s")
            time.sleep(0.1)


class Operator:
    """fleetshare governing a Kubernetes cluster (see the module docstring)."""

    def __init__(self, kube: Kube, settings: Settings | None = None,
                 catalog: Catalog | None = None, clock: Clock | None = None) -> None:  # fmt: skip
        """``clock`` gives the loop's time (default: the wall clock, as Unix seconds); a test
        replays on a :class:`~fleetshare.control.clock.VirtualClock`."""
        self.kube = kube
        self.settings = settings or Settings()
        self.identity = self.settings.identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.catalog = catalog or load_catalog()
        self.store = Store()
        self.events = Events(kube, self.identity, queue_size=self.settings.event_queue)
        self.elector = LeaseElector(kube, self.settings.lease_namespace, self.identity)
        self._inbox: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.cluster = KubeCluster(
            kube, self.store, self.events, may_act=self._may_act,
            write_concurrency=self.settings.write_threads,
            writes_in_flight=self.settings.writes_in_flight,
            wake=lambda: self._inbox.put(("wake", "", None)),
            incremental=self.settings.incremental,
        )  # fmt: skip
        self.cycle_cache = CycleCache() if self.settings.incremental else None
        """The engine's state carried from cycle to cycle (see :class:`Engine`)."""
        self.scalers = ScaledObjects(kube, self.events, may_act=self._may_act)
        self.clock: Clock = clock if clock is not None else WallClock(start=time.time())
        self.loop: ControlLoop | None = None
        self.policy: Policy | None = None
        self._policy_key: tuple[Any, ...] | None = None
        self.autoscaler: Autoscaler | None = None
        self.metrics = OperatorMetrics()
        self._summary_due = 0.0
        self._summary_stale = False
        """A reconcile ran since the last summary (it is written within a second)."""
        self._pools_key: tuple[Any, ...] | None = None
        self._status_written: dict[str, float] = {}
        """When each Team's status was last written (clock time)."""
        self._status_budget = WriteBudget(self.settings.status_writes_per_second, 1)
        self._status_stale = True
        """The view changed since the Teams' status was last computed."""
        self._status_next = 0.0
        """Not computed again before then (clock time)."""
        self.reconciles = 0
        self.ready = threading.Event()
        """Set once the first reconcile is done (tests wait on it)."""
        self.beat = time.monotonic()
        """When the loop last went round (standby, syncing or leading)."""

    def _may_act(self) -> bool:
        return not self.settings.leader_elect or self.elector.leading()

    def serving(self) -> bool:
        """Ready: a standby waiting for the lease, or a leader that reconciled once."""
        if self.settings.leader_elect and not self.elector.leading():
            return True
        return self.ready.is_set()

    def stalled(self) -> str | None:
        """Why the operator looks hung (None: its loop went round within
        :attr:`Settings.stale_seconds`)."""
        age = time.monotonic() - self.beat
        if age <= self.settings.stale_seconds:
            return None
        return f"the operator's loop has not gone round for {age:.0f} s (stopped or hung)"

    # -- running ---------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set (or leadership is lost)."""
        s = self.settings
        if s.install_crds:
            install_crds(self.kube)
        if s.leader_elect:
            told = -STANDBY_LOG_SECONDS
            while not stop.is_set() and not self.elector.try_acquire():
                self.beat = time.monotonic()
                if time.monotonic() - told >= STANDBY_LOG_SECONDS:  # a standby is not hung
                    told = time.monotonic()
                    log.info(
                        "standby: the lease %s/%s is held by %s; taking over when it lapses",
                        self.elector.namespace, self.elector.name, self.elector.holder or "?",
                    )  # fmt: skip
                stop.wait(min(2.0, self.elector.renew_seconds))
            if stop.is_set():
                log.info("stopped (standby)")
                return
        watch_stop = threading.Event()
        watchers = [
            Watcher(self.kube, NODES, self._inbox, watch_stop),
            Watcher(self.kube, TEAMS, self._inbox, watch_stop),
            Watcher(self.kube, CLUSTER_POLICIES, self._inbox, watch_stop),
            Watcher(self.kube, PRIORITY_CLASSES, self._inbox, watch_stop),
            Watcher(self.kube, NAMESPACES, self._inbox, watch_stop),
        ]
        if s.cloud is not None:
            watchers += [
                Watcher(self.kube, NODE_POOLS, self._inbox, watch_stop),
                Watcher(self.kube, NODE_CLAIMS, self._inbox, watch_stop),
            ]
        kinds = [PODS, JOBS, PDBS]
        optional = [RESOURCES[k.kind] for k in OPTIONAL]
        optional += [SCALED_OBJECTS] if s.scaled_objects else []
        for res in optional:  # JobSets, Kubeflow, Ray, ...: where their CRDs are installed
            if self.kube.served(res):
                kinds.append(res)
            else:
                log.info("%s not watched: its CRD is not installed", res.kind)
        for res in kinds:
            for ns in s.namespaces or (None,):
                watchers.append(Watcher(self.kube, res, self._inbox, watch_stop, namespace=ns))
        expected = {(w.res.kind, w.namespace) for w in watchers}
        synced: set[tuple[str, str | None]] = set()
        for w in watchers:
            w.start()
        try:
            while not stop.is_set() and not expected <= synced:
                self.beat = time.monotonic()
                try:
                    message = self._inbox.get(timeout=0.5)
                except queue.Empty:
                    continue
                self._apply(message)
                if message[0] == "sync":
                    synced.add((message[1], message[2][0]))
            deadline = 0.0
            while not stop.is_set():
                self.beat = time.monotonic()
                lost = s.leader_elect and self.elector.due() and not self.elector.try_acquire()
                if lost and not self.elector.leading():
                    log.error("leadership lost: stopping")
                    return
                wake = min(deadline, self._summary_due) if self._summary_stale else deadline
                changed = self._drain(max(0.0, wake - time.monotonic()))
                if stop.is_set():
                    break
                if changed or time.monotonic() >= deadline:
                    deadline = self.reconcile()
                elif self._summary_stale and time.monotonic() >= self._summary_due:
                    self._summarize()  # the last reconcile's view, a second on at the latest
        finally:
            watch_stop.set()
            self.cluster.close()
            self.events.close()
            self.scalers.close()
            if s.leader_elect:
                self.elector.release()
            log.info("stopped%s", " (lease released)" if s.leader_elect else "")

    def _drain(self, timeout: float) -> bool:
        """Apply what the watches posted, waiting up to ``timeout`` for the first message."""
        changed = False
        wait = min(timeout, self.elector.renew_seconds / 2)
        try:
            message = self._inbox.get(timeout=wait) if wait > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return False
        while True:
            changed = bool(self._apply(message)) or changed
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return changed

    def _apply(self, message: tuple[str, str, Any]) -> set[tuple[str, str | None]]:
        what, kind, payload = message
        if what == "wake":  # admission writes answered: take the answers
            return {("wake", None)}
        if what == "sync":
            namespace, items = payload
            self.store.resync(kind, namespace, items)
            return {(kind, namespace)}
        event_type, obj = payload
        return {(kind, None)} if self.store.apply(kind, event_type, obj) else set()

    # -- one turn --------------------------------------------------------------------------------

    def reconcile(self) -> float:
        """Decide and act once; returns the monotonic time of the next turn."""
        now = self.clock.now()
        engine = self._engine()
        s = self.settings
        next_in = s.resync_seconds
        if engine is not None and self._may_act():
            assert self.loop is not None
            cluster = self.cluster
            cluster.wake_at = None
            cluster.refresh(engine, now)
            if self._autoscale(now):
                cluster.changed = True
            if cluster.changed:
                self.loop.world_changed()
            self.loop.reconcile(now)
            status_due = self._write_status(engine, now)
            if status_due is not None:
                next_in = min(next_in, max(0.05, status_due - now))
            if cluster.retry_soon or cluster.blocked:
                next_in = min(next_in, s.retry_seconds)
            if cluster.wake_at is not None:
                next_in = min(next_in, max(0.05, cluster.wake_at - now))
            self.reconciles += 1
            self.ready.set()
        if self._may_act():
            due = self.scalers.sync(list(self.store.of(SCALED_OBJECTS.kind).values()), now)
            if due is not None:
                next_in = min(next_in, max(0.05, due - now))
        clock = time.monotonic()
        self._summary_stale = True
        if clock >= self._summary_due:
            self._summarize()
        return clock + next_in

    def _summarize(self) -> None:
        """What the metrics show, refreshed after a reconcile at most every
        :data:`SUMMARY_SECONDS` and at the latest that long after one (the loop wakes for it
        without reconciling). It walks every pending workload: with a thousand
        pending and dozens of reconciles a second, refreshing it before every pause (almost
        every reconcile) took a fifth of the operator's CPU (bench/kueue_perf_api.py)."""
        self._summary_due = time.monotonic() + SUMMARY_SECONDS
        self._summary_stale = False
        cluster, scaler = self.cluster, self.autoscaler
        live = scaler.live() if scaler is not None else []
        engine = self.loop.engine if self.loop is not None else None
        self.metrics.latest = summary(
            [t.name for t in engine.policy.teams] if engine is not None else [],
            [(w.team, cluster.considered(n)) for n, w in cluster.pending.items()],
            [r.workload.team for n, r in cluster.running.items()
             if cluster.tracked.get(n) is not None and cluster.tracked[n].admitted is not None],
            [(m.pool, m.joined) for m in live],
            leader=self._may_act(),
            reconciles=self.reconciles,
        )  # fmt: skip

    def _autoscale(self, now: float) -> bool:
        """Keep the autoscaler's pools those of the NodePool objects and its NodeClaims in step
        with the Nodes; True when a node joined or left its view."""
        s = self.settings
        if s.cloud is None or self.loop is None:
            return False
        objects = list(self.store.of("NodePool").values())
        key = tuple(sorted((o["metadata"]["name"], o["metadata"].get("generation"))
                           for o in objects))  # fmt: skip
        if key != self._pools_key:
            self._pools_key = key
            try:
                pools = pools_from(objects, self.catalog)
            except ValueError as exc:
                log.error("node pools not valid, keeping the last ones: %s", exc)
                self._pool_status(objects, str(exc))
                return False
            if self.autoscaler is None:
                spec = (s.autoscaler or AutoscalerSpec()).model_copy(
                    update={"clock_start": datetime.fromtimestamp(0, UTC)}  # the clock: Unix time
                )
                self.autoscaler = Autoscaler(pools, s.cloud, self.catalog, spec)
                self.loop.autoscaler = self.autoscaler
                self.cluster.claims = NodeClaims(
                    self.kube, self.store, self.events, self.autoscaler,
                    registration_timeout=s.registration_timeout_seconds, may_act=self._may_act,
                )  # fmt: skip
            else:
                self.autoscaler.set_pools(pools)
            self._pool_status(objects, "")
        if self.autoscaler is None or self.cluster.claims is None:
            return False
        self.autoscaler.pdbs = list(self.cluster.pdbs)
        changed = self.cluster.claims.sync(self.loop, now)
        self._pool_status(objects, None)
        return changed

    def _pool_status(self, objects: list[dict[str, Any]], problem: str | None) -> None:
        """Each NodePool's status: its live node count and (when ``problem`` is given) a
        ``PoolValid`` condition ("" for valid)."""
        live = [m.pool for m in self.autoscaler.live()] if self.autoscaler else []
        for obj in objects:
            name = obj["metadata"]["name"]
            old = obj.get("status") or {}
            status: dict[str, Any] = {"nodes": live.count(name)}
            if problem is not None:
                status["conditions"] = [{
                    "type": "PoolValid", "status": "False" if problem else "True",
                    "reason": "Invalid" if problem else "Valid", "message": problem[:2000],
                    "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }]  # fmt: skip
                same = [(c.get("status"), c.get("message")) for c in old.get("conditions") or ()]
                if same == [(status["conditions"][0]["status"], problem[:2000])]:
                    del status["conditions"]
            if all(old.get(k) == v for k, v in status.items()):
                continue
            try:
                self.store.put("NodePool", self.kube.patch(NODE_POOLS, name, {"status": status},
                                                           sub="status"))  # fmt: skip
            except KubeError as exc:
                log.debug("node pool status not written: %s", exc)

    def _engine(self) -> Engine | None:
        """The engine of the current policy (rebuilt when the objects change); None while
        no valid policy exists (nothing is admitted then)."""
        policies = self.store.of("ClusterPolicy")
        chosen = policies.get(("", DEFAULT_POLICY))
        if chosen is None and len(policies) == 1:
            chosen = next(iter(policies.values()))
        teams = list(self.store.of("Team").values())
        key = (
            (chosen or {}).get("metadata", {}).get("resourceVersion"),
            tuple(sorted((t["metadata"]["name"], t["metadata"].get("generation")) for t in teams)),
        )
        if key != self._policy_key:
            self._policy_key = key
            try:
                policy = policy_from(chosen, teams)
                engine = Engine(policy, self.catalog)
                engine.cache = self.cycle_cache
            except (PolicyError, ValueError) as exc:
                log.error("policy not valid, keeping the last one: %s", exc)
                self._policy_condition(chosen, False, str(exc))
                return self.loop.engine if self.loop else None
            self.policy = policy
            self._policy_condition(chosen, True, f"{len(policy.teams)} teams")
            if self.loop is None:
                self.loop = ControlLoop(self.cluster, engine)
            else:
                self.loop.set_engine(engine)
        return self.loop.engine if self.loop else None

    def _policy_condition(self, obj: dict[str, Any] | None, ok: bool, message: str) -> None:
        if obj is None or not self._may_act():
            return
        condition = {
            "type": "PolicyValid", "status": "True" if ok else "False",
            "reason": "Valid" if ok else "Invalid", "message": message[:2000],
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }  # fmt: skip
        teams = len(self.store.of("Team"))
        status = {"conditions": [condition], "teams": teams}
        old = obj.get("status") or {}
        if old.get("teams") == teams and [
            {k: c.get(k) for k in ("status", "message")} for c in old.get("conditions") or ()
        ] == [{"status": condition["status"], "message": condition["message"]}]:
            return
        try:
            out = self.kube.patch(CLUSTER_POLICIES, obj["metadata"]["name"],
                                  {"status": status}, sub="status")  # fmt: skip
            self.store.put("ClusterPolicy", out)
        except KubeError as exc:
            log.debug("policy status not written: %s", exc)

    def _write_status(self, engine: Engine, now: float) -> float | None:
        """Write the status of each Team whose status changed: each at most every
        ``status_interval_seconds``, all within ``status_writes_per_second``, least recently
        written first. Computed only when the view changed, at most once per interval per
        Team, and at most once a second. Returns when the next deferred write is due (None:
        none)."""
        cluster = self.cluster
        self._status_stale = self._status_stale or cluster.changed
        if not self._status_stale:
            return None
        if now < self._status_next:
            return self._status_next
        statuses = team_status(engine, cluster.node_list(), list(cluster.running.values()),
                               list(cluster.pending.values()), now)  # fmt: skip
        interval = self.settings.status_interval_seconds
        budget = self._status_budget
        budget.burst = max(1, len(statuses))
        budget.refill(now)
        due: float | None = None
        changed: list[tuple[float, str, dict[str, Any]]] = []
        for (_, name), team in self.store.of("Team").items():
            status = statuses.get(name)
            if status is None:
                continue
            old = team.get("status") or {}
            if all(old.get(k) == v for k, v in status.items()):
                continue
            last = self._status_written.get(name)
            if last is not None and now < last + interval:
                due = last + interval if due is None else min(due, last + interval)
                continue
            changed.append((-1.0 if last is None else last, name, status_patch(old, status)))
        changed.sort(key=lambda item: item[0])  # least recently written first (stable)
        for _, name, status in changed:
            if not budget.take():
                at = budget.next_at()
                if at is not None:
                    due = at if due is None else min(due, at)
                break
            try:
                out = self.kube.patch(TEAMS, name, {"status": status}, sub="status")
                self.store.put("Team", out)
                self._status_written[name] = now
            except KubeError as exc:
                log.debug("team status not written: %s", exc)
        self._status_stale = due is not None
        self._status_next = max(due, now + 1.0) if due is not None else now
        return self._status_next if due is not None else None
