"""The Kubernetes API as a :class:`~fleetshare.control.cluster.Cluster`: the control loop's
live backend in the operator.

:class:`KubeCluster` is the shared :class:`~fleetshare.control.state.ClusterState` (nodes,
running work, the pending book, why work waits; each rule there once: bind and forget, settle,
requeue on eviction, a lost node's work evicted, a pending reason said when it changed in
substance, the autoscaler's note once) with a feeder and a sink over the API server.

The feeder, :meth:`KubeCluster.refresh`, reads the watched objects (a
:class:`~fleetshare.operator.watch.Store`) into the state before each reconcile: nodes from
Node objects, governed workloads from Jobs and bare pods (pod groups), each pending, admitted
or finished as the objects themselves say (:mod:`.objects`). Nothing else is remembered between
reconciles but the creation order and the writes not answered yet, so a restarted operator
sees what the last one left. Workloads on a node that turned NotReady or went away are evicted
(``node-failure``, :meth:`~fleetshare.control.state.ClusterState.evict_from`) and requeued
before the cycle, as the simulator does when a node fails.

The sink and the acts (what only the operator has stays here):

- An admission (``bind``) is assumed by the state at once; once the reconcile is settled the
  sink turns each ``Admitted`` into its write: a Job (or another kind admitted by suspension:
  the registry, :mod:`fleetshare.manifests.kinds`) is run with each pod set's flavor node
  selector where its pods get it (Kueue's ``RunWithPodSetsInfo``); pods (bare, of a pod group,
  of a Deployment, StatefulSet or LeaderWorkerSet) lose the ``fleetshare.io/admission``
  scheduling gate and gain the node selector, and kube-scheduler binds them. The admission is
  recorded on the object in the same write (annotation ``operator.fleetshare.io/admission``),
  made conditional on the resourceVersion the decision saw, so a stale view can never admit
  twice. The writes go out in the background (:mod:`.writer`), and the answers are taken at
  the next refresh: a refusal puts the workload back to pending
  (:meth:`~fleetshare.control.state.ClusterState.unbind`), blocked until a later reconcile.
- ``evict`` preempts: a Job is suspended again (the job controller deletes its pods) and
  queued again by the shared rule, unless it finished since the view the decision read (it
  keeps its admission record and leaves the view); pods are evicted through the Eviction API
  (PodDisruptionBudgets apply) and, being bare pods nobody recreates, leave. The reason goes to
  an Event, an annotation and, for pods, a status condition.
- A pending reason the state says changed in substance is written as an annotation within a
  write budget (:class:`~fleetshare.operator.budget.WriteBudget`), oldest first; the
  autoscaler's note is an annotation of its own.
- ``join_node`` writes the NodeClaim of a node the autoscaler launched (:mod:`.nodeclaims`);
  ``remove_node`` drains a node through the Eviction API (:mod:`.drain`), refusing
  (:class:`~fleetshare.control.cluster.RemovalRefused`) when a PodDisruptionBudget forbids it.
- The operator keeps no timers: ``wake`` sets :attr:`KubeCluster.wake_at`, when the
  controller reconciles next.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetshare.autoscaling.settings import PdbSpec
from fleetshare.control import changes as ch
from fleetshare.control.changes import AutoscalerNote
from fleetshare.control.cluster import RemovalRefused
from fleetshare.control.state import ClusterState
from fleetshare.governance.admission import Engine
from fleetshare.governance.queues import reason_of
from fleetshare.governance.snapshot import Admission, Assignment, CycleResult, Pending, Running
from fleetshare.manifests import (
    ManifestError,
    PodPriorityClass,
    pod_priority_class,
    resolve_priority,
)
from fleetshare.manifests.kinds import SuspendedKind
from fleetshare.manifests.pods import read_pod_spec
from fleetshare.manifests.values import Fields
from fleetshare.model.node import INSTANCE_TYPE_LABEL, Node
from fleetshare.model.reason import PendingReason, Reason
from fleetshare.model.workload import Workload
from fleetshare.operator.budget import WriteBudget
from fleetshare.operator.drain import cordon, evict_all, pods_on, refusal
from fleetshare.operator.events import Events, camel
from fleetshare.operator.kinds import (
    JOB,
    RESOURCES,
    SUSPENDED,
    admission_ops,
    annotation_ops,
)
from fleetshare.operator.kube import (
    EVENTS,
    JOBS,
    JSON_PATCH,
    NODES,
    PODS,
    Kube,
    KubeError,
    Resource,
)
from fleetshare.operator.objects import (
    ADMISSION,
    AUTOSCALER_NOTE,
    EVICTION,
    GATE,
    INJECTED,
    PENDING_REASON,
    POD_COUNTS,
    Admitted,
    Phase,
    admission_of,
    bound_placement,
    creation_key,
    eviction_record,
    governed,
    group_complete,
    injected_by_podset,
    job_phase,
    job_started,
    node_from_object,
    owned,
    parse_job,
    parse_pods,
    pdb_spec,
    pod_done,
    pod_gated,
    pod_group,
    pods_phase,
    suspension_settled,
    timestamp,
    written_counts,
)
from fleetshare.operator.owners import OwnerIndex, Ref
from fleetshare.operator.watch import Key, Store, key_of
from fleetshare.operator.writer import AdmissionWriter, Answer, Send, send_now

if TYPE_CHECKING:
    from fleetshare.operator.nodeclaims import NodeClaims
from fleetshare.policy.schema import DEFAULT_FLAVOR, Policy

log = logging.getLogger("fleetshare.operator")
NODE_FAILURE = "node-failure"
FORCED = frozenset({"spot-interruption", "repair"})
"""Removal reasons a drain cannot refuse: the instance goes anyway (Karpenter's forceful
disruption)."""


def _annotation(key: str, text: str) -> dict[str, Any]:
    """A merge patch setting annotation ``key`` to at most 1,000 characters of ``text``."""
    return {"metadata": {"annotations": {key: text[:1000]}}}


@dataclass
class Tracked:
    """A governed workload and the objects it is made of."""

    name: str
    kind: str  # "Pod", or a kind admitted by suspension ("Job", "JobSet", ...: SUSPENDED)
    namespace: str
    objects: list[dict[str, Any]]
    workload: Workload
    phase: Phase
    admitted: Admitted | None
    pod_podset: dict[str, int] = field(default_factory=dict)


@dataclass
class Assumed:
    """An admission handed to the writer and not yet answered: the view counts its workload
    as admitted with ``admitted`` (quota reserved, not pending) until the answer is taken."""

    kind: str
    admitted: Admitted
    evicted: tuple[str, str, str] | None = None
    """Preempted while its write was being sent: (by, reason, message), carried out once
    the write's answer says it landed."""


class KubeCluster(ClusterState):
    """The control loop's backend over the API server: the shared cluster state, fed by
    :meth:`refresh` and carried out by its sink (see the module docstring)."""

    def __init__(
        self,
        kube: Kube,
        store: Store,
        events: Events,
        *,
        may_act: Callable[[], bool] = lambda: True,
        write_concurrency: int = 8,
        writes_in_flight: int = 100,
        wake: Callable[[], None] = lambda: None,
        pending_writes: int = 50,
        pending_writes_per_second: float = 2.0,
        incremental: bool = True,
    ) -> None:
        super().__init__(self._sink)
        self.when = _rfc3339  # loop times here are Unix times
        self.kube = kube
        self.store = store
        self.events = events
        self.may_act = may_act
        """False once leadership is lost: nothing more is written."""
        self.engine: Engine | None = None
        self.policy: Policy | None = None
        self.tracked: dict[str, Tracked] = {}
        self.retry_soon = False
        self.wake_at: float | None = None
        self.warnings: list[str] = []
        self._order: dict[str, int] = {}
        self._parsed: dict[str, tuple[tuple[Any, ...], Any]] = {}
        self._parse_used: set[str] = set()
        self._owners = OwnerIndex(store, [*SUSPENDED, "Pod"])
        self._groups: dict[GroupKey, dict[Key, dict[str, Any]]] = {}
        """Governed bare pods by group: a pod group, or one pod alone."""
        self._group_of: dict[Key, GroupKey] = {}
        self.incremental = incremental
        """Follow the store's changes (:meth:`refresh`); False: read it all every time."""
        self._built = False
        self._problems: dict[str, str] = {}
        self.claims: NodeClaims | None = None
        """The NodeClaims of the autoscaler's nodes (None without an autoscaler)."""
        self.pdbs: list[PdbSpec] = []
        """The cluster's PodDisruptionBudgets over governed work, for disruption decisions."""
        self.changed = False
        """Set by :meth:`refresh` when the world moved (submission, finish, node change)."""
        self._signature: tuple[Any, ...] = ()
        self.writer = (
            AdmissionWriter(threads=max(1, write_concurrency), limit=writes_in_flight,
                            may_send=may_act, wake=wake)
            if writes_in_flight > 0 else None
        )  # fmt: skip
        """Admission writes in the background, at most ``writes_in_flight`` unanswered
        (:mod:`.writer`); None: each cycle's writes are sent before :meth:`bind_all` returns."""
        self._writing: dict[str, Assumed] = {}
        """Admissions handed to the writer whose answer was not taken yet, by workload."""
        self._sends: list[tuple[str, Send]] = []
        """The admission writes of the reconcile being settled, in order (:meth:`settle`)."""
        self._refused: list[str] = []
        self._deferred_evictions: list[tuple[str, tuple[str, str, str]]] = []
        self.reason_budget = WriteBudget(pending_writes_per_second, pending_writes)
        """Pending-reason annotations: ``pending_writes`` at once, ``pending_writes_per_second``
        on average (4 % of a 50 requests/s client), so they hardly hold admissions back."""
        self._unsaid: dict[str, None] = {}
        """Workloads whose pending reason changed in substance and was not written yet,
        oldest first (an ordered set; each reason is looked up afresh when its write may
        follow)."""
        self._reasons: Mapping[str, Pending] = {}
        """The last cycle's pending result: where the reasons of :attr:`_unsaid` are read."""
        self.notes = (
            AdmissionWriter(threads=2, limit=pending_writes, may_send=may_act)
            if self.writer is not None else None
        )  # fmt: skip
        """Pending-reason writes in the background (with the admission writer; None: in line),
        so a slow API server holds up no admission cycle."""
        self._noting: dict[str, PendingReason] = {}
        """Pending reasons handed to :attr:`notes` and not answered yet, by workload."""

    # -- reading the objects ---------------------------------------------------------------------

    def refresh(self, engine: Engine, now: float) -> None:
        """Bring the loop's view up to date with the store; evict work on lost nodes.

        Incremental (``incremental``, the default): only the objects the watches changed since
        the last refresh are read again (:meth:`Store.take_changes`), and nodes and workloads
        that did not change keep their objects, so the engine's cache carries its state and
        pending order over; a new engine (policy) reads everything again. Else every object
        is read (:meth:`rebuild`): the plain path the incremental one must agree with.

        First the admission writes answered since the last refresh are taken
        (:meth:`_take_answers`): what they wrote goes to the store, so it is read below."""
        if self.writer is not None:
            self._take_answers(self.writer.take())
        if self.notes is not None:
            self._take_notes(self.notes.take())
        changes = self.store.take_changes()
        if (
            not self.incremental
            or engine is not self.engine
            or not self._built
            or any(kind == "PriorityClass" for kind, _ in changes)  # priorities may move
        ):
            self.rebuild(engine, now)
            return
        self._begin(engine)
        nodes_changed = False
        jobs: dict[Ref, None] = {}
        groups: dict[GroupKey, None] = {}
        for kind, key in changes:
            if kind == "Node":
                nodes_changed = True
            elif kind in self._owners.kinds:
                obj = self.store.of(kind).get(key)
                before = self._owners.owners_of(kind, key)
                self._owners.update(kind, key, obj)
                for ref in (*before, *self._owners.owners_of(kind, key)):
                    if ref[0] != "Pod":
                        jobs[ref] = None
                if kind == "Pod":
                    self._regroup(key, obj, groups)
                else:
                    jobs[(kind, key)] = None
        started: list[str] = []
        for ref, obj in self._in_creation_order(jobs):
            sk = SUSPENDED[ref[0]]
            name = _job_name(sk, *ref[1])
            retry, self.retry_soon = self.retry_soon, False
            t = self._suspendable(obj, sk, now) if obj is not None else None
            self._place(name, t, started, [ref], retry, gone=obj is None)
        for (ns, ident), pods in self._groups_in_creation_order(groups):
            name = f"{ns}/{ident.partition(':')[2]}"
            refs = [("Pod", key_of(p)) for p in pods]
            retry, self.retry_soon = self.retry_soon, False
            t = self._pods(ns, ident, pods, now) if pods else None
            self._place(name, t, started, refs, retry, gone=not pods)
        if nodes_changed:
            self._take_nodes(self._read_nodes())
        self._requeue_lost(now, None if nodes_changed else started)
        if changes and self.store.of("PodDisruptionBudget"):
            self.pdbs = self._pdbs()
        self._settle_answers(now)
        self._end()

    def rebuild(self, engine: Engine, now: float) -> None:
        """Read the whole store into the loop's view (see :meth:`refresh`)."""
        self._begin(engine)
        self._take_nodes(self._read_nodes())
        self._owners = OwnerIndex.build(self.store, [*SUSPENDED, "Pod"])
        tracked: dict[str, Tracked] = {}
        objects = [(o, kind) for kind in SUSPENDED.values()
                   for o in self.store.of(kind.kind).values()]  # fmt: skip
        for obj, kind in sorted(objects, key=lambda pair: self._creation(pair[1].kind, pair[0])):
            t = self._suspendable(obj, kind, now)
            if t is not None:
                tracked[t.name] = t
        self._groups, self._group_of = {}, {}
        every_pod = self.store.of("Pod").items()
        for key, pod in sorted(every_pod, key=lambda kv: self._creation("Pod", kv[1])):
            self._regroup(key, pod, {})
        for (ns, ident), pods in self._groups.items():
            t = self._pods(ns, ident, list(pods.values()), now)
            if t is not None:
                tracked[t.name] = t
        self.tracked = tracked
        self._parsed = {k: v for k, v in self._parsed.items() if k in self._parse_used}
        self._parse_used = set()
        running = {
            name: self._running(t)
            for name, t in tracked.items()
            if t.phase in ("admitted", "outside")
        }
        self.read(running, (t.workload for t in tracked.values() if t.phase == "pending"))
        self._requeue_lost(now)
        self.pdbs = self._pdbs()
        self._built = True
        self._settle_answers(now)
        self._end()

    def _begin(self, engine: Engine) -> None:
        self.engine, self.policy = engine, engine.policy
        self.blocked.clear()
        # preempted while their write was being sent: not admitted again before its answer
        self.blocked.update(n for n, a in self._writing.items() if a.evicted is not None)
        self.retry_soon = False

    def _end(self) -> None:
        signature = (
            tuple((n.name, n.schedulable) for n in self.nodes.values()),
            frozenset(self.pending),
            frozenset(self.running),
        )
        self.changed = signature != self._signature
        self._signature = signature
        self._parse_used.clear()

    def _take_nodes(self, nodes: tuple[Node, ...]) -> None:
        """The Nodes as read (by name): the state's nodes replaced when one differs (else
        they are kept, the same objects: the engine's cache sees at a glance they hold)."""
        if len(nodes) != len(self.nodes) or any(
            a != b for a, b in zip(nodes, self.nodes.values(), strict=True)
        ):
            self.nodes = {n.name: n for n in nodes}

    def _read_nodes(self) -> tuple[Node, ...]:
        return tuple(
            sorted((node_from_object(o) for o in self.store.of("Node").values()),
                   key=lambda n: n.name)
        )  # fmt: skip

    def _regroup(self, key: Key, pod: dict[str, Any] | None, dirty: dict[GroupKey, None]) -> None:
        """Keep the governed bare pods' groups (a pod group, or a pod alone) current."""
        old = self._group_of.pop(key, None)
        if old is not None:
            members = self._groups[old]
            members.pop(key, None)
            if not members:
                del self._groups[old]
            dirty[old] = None
        if pod is None or not governed(pod) or owned(pod):
            return
        group = pod_group(pod)
        ident = (key[0], f"group:{group}") if group else (key[0], f"pod:{key[1]}")
        self._groups.setdefault(ident, {})[key] = pod
        self._group_of[key] = ident
        dirty[ident] = None

    def _in_creation_order(
        self, refs: Mapping[Ref, None]
    ) -> list[tuple[Ref, dict[str, Any] | None]]:
        """The objects at ``refs`` (None: gone), gone ones first, then by creation."""
        found = [(ref, self.store.of(ref[0]).get(ref[1])) for ref in refs]
        gone = [(ref, obj) for ref, obj in found if obj is None]
        kept = [(ref, obj) for ref, obj in found if obj is not None]
        return gone + sorted(kept, key=lambda pair: self._creation(pair[0][0], pair[1] or {}))

    def _groups_in_creation_order(
        self, groups: Mapping[GroupKey, None]
    ) -> list[tuple[GroupKey, list[dict[str, Any]]]]:
        found = [(g, self._sorted(self._groups.get(g, {}).values(), "Pod")) for g in groups]
        return sorted(
            found, key=lambda pair: self._creation("Pod", pair[1][0]) if pair[1] else (0.0, 0)
        )

    def _place(
        self,
        name: str,
        t: Tracked | None,
        started: list[str],
        refs: list[Ref],
        retry: bool,
        *,
        gone: bool,
    ) -> None:
        """Put workload ``name``, derived again from its objects ``refs`` (None: not
        governed, finished or gone), in the view; it keeps its :class:`Workload` and
        :class:`Running` objects when they come out the same. ``retry_soon`` set while
        deriving it (not settled, a write failed) reads it again at the next refresh;
        ``retry`` is the flag as it was before."""
        if self.retry_soon:
            self.store.changes.update(dict.fromkeys(refs))
        self.retry_soon = self.retry_soon or retry
        if gone:
            self._parsed.pop(name, None)
        old = self.tracked.get(name)
        if t is None or t.phase not in ("pending", "admitted", "outside"):
            self.tracked.pop(name, None)
            self.cancel(name)
            return
        if old is not None and old.workload == t.workload:
            t.workload = old.workload
        self.tracked[name] = t
        if t.phase == "pending":
            if name in self.running:
                self.cancel(name)
            if self.pending.get(name) is not t.workload:
                self.pending.take(name)  # a new object waits at the end, as a new arrival
                self.pending.put(t.workload)
            return
        running = self._running(t)
        if self.running.get(name) != running:
            self.resume(running, None)
            started.append(name)

    def _pdbs(self) -> list[PdbSpec]:
        budgets = self.store.of("PodDisruptionBudget")
        if not budgets:
            return []
        pods = {
            name: t.objects if t.kind == "Pod" else self._job_pods(t)
            for name, t in self.tracked.items()
        }
        specs = (pdb_spec(b, pods) for b in budgets.values())
        return [spec for spec in specs if spec is not None]

    def _creation(self, kind: str, obj: Mapping[str, Any]) -> tuple[float, int]:
        """``obj``'s place in submission order (:func:`~fleetshare.operator.objects.creation_key`
        with the store's first-seen order)."""
        return creation_key(obj, self.store.position.get((kind, key_of(obj)), 0))

    def _sorted(self, objects: Any, kind: str) -> list[dict[str, Any]]:
        return sorted(objects, key=lambda obj: self._creation(kind, obj))

    def _created(self, name: str) -> int:
        if name not in self._order:
            self._order[name] = len(self._order)
        return self._order[name]

    def _resolve(self, name: str, obj: dict[str, Any], parsed: Any) -> tuple[str, int] | None:
        """Team and priority of a parsed object, or None (an Event says why, once)."""
        assert self.policy is not None
        if parsed.queue is None:
            return None
        try:
            team = self.policy.team_for(parsed.queue)
        except KeyError as exc:
            self._problem(name, obj, f"{parsed.queue_field}: {exc.args[0]}")
            return None
        try:
            priority = resolve_priority(
                parsed.priority_source, parsed.priority_class, self.policy.priority_of,
                self.policy.default_priority(), self.pod_classes,
            )  # fmt: skip
        except KeyError as exc:
            self._problem(name, obj, f"{parsed.priority_field}: {exc.args[0]}")
            return None
        self._problems.pop(name, None)
        return team, priority

    def _local_queue(self, queue: str) -> str | None:
        """The LocalQueue (``namespace/name``) a workload naming ``queue`` is sent to."""
        return self.policy.local_queue_of(queue) if self.policy is not None else None

    @property
    def pod_classes(self) -> dict[str, PodPriorityClass]:
        """The cluster's PriorityClasses (``scheduling.k8s.io/v1``), by name."""
        found = (pod_priority_class(o) for o in self.store.of("PriorityClass").values())
        return {c.name: c for c in found if c is not None}

    def _problem(self, name: str, obj: dict[str, Any], message: str) -> None:
        if self._problems.get(name) != message and self.may_act():
            self._problems[name] = message
            self.events.post(obj, "Warning", "NotGoverned", message)

    def _parse(self, name: str, key: tuple[Any, ...], parse: Callable[[], Any]) -> Any:
        """``parse()`` of workload ``name``, kept while its objects' ``key`` (uids,
        generations) stays the same and it is watched (:meth:`rebuild` drops the entries it
        did not use; the incremental path those of objects gone)."""
        self._parse_used.add(name)
        kept = self._parsed.get(name)
        if kept is not None and kept[0] == key:
            return kept[1]
        try:
            parsed = parse()
        except ManifestError as exc:
            parsed = exc
        self._parsed[name] = (key, parsed)
        return parsed

    def _suspendable(self, job: dict[str, Any], kind: SuspendedKind, now: float) -> Tracked | None:
        """A Job (or JobSet, PyTorchJob, RayCluster, RayJob) admitted by suspension."""
        if not governed(job) or owned(job):
            return None
        meta = job["metadata"]
        ns, jname = str(meta.get("namespace", "")), str(meta["name"])
        name = _job_name(kind, ns, jname)
        key = (kind.kind, meta.get("uid"), meta.get("generation"),
               (meta.get("annotations") or {}).get(INJECTED))  # fmt: skip
        parsed = self._parse(name, key, lambda: parse_job(job, kind))
        if isinstance(parsed, ManifestError):
            self._problem(name, job, str(parsed))
            return None
        resolved = self._resolve(name, job, parsed)
        if resolved is None:
            return None
        phase = job_phase(job, kind, self._owners.pods_of(str(meta.get("uid")), ns))
        if phase == "finished":
            return None
        if phase == "pending" and not kind.suspended(job) and self.may_act():
            self._suspend_new(job, kind)  # created unsuspended: hold it until admitted
        if phase == "pending" and kind is JOB and job_started(job):
            if suspension_settled(job) and self.may_act():
                self._reset_start(job)  # the job controller leaves it: Kueue resets it too
            self.retry_soon = True  # not admissible before the start time is reset
            return None
        if (
            phase == "pending"
            and kind.suspended(job)
            and injected_by_podset(job)
            and (kind is not JOB or suspension_settled(job))
            and self.may_act()
        ):
            self._release(job, kind)  # preempted: its owner's template again (Kueue's way)
        team, priority = resolved
        workload = Workload(
            name=name, team=team, podsets=parsed.podsets,
            submit_time=timestamp(meta.get("creationTimestamp")), priority=priority,
            priority_class=parsed.priority_class, labels=dict(parsed.labels),
            created=self._created(name), queue=self._local_queue(parsed.queue),
        )  # fmt: skip
        return self._assume(Tracked(name, kind.kind, ns, [job], workload, phase,
                                    admission_of(job)))  # fmt: skip

    def _pods(self, ns: str, ident: str, pods: list[dict[str, Any]], now: float) -> Tracked | None:
        kind, _, base = ident.partition(":")
        name = f"{ns}/{base}"
        if kind == "group" and not group_complete(pods):
            return None  # Kueue waits for every pod of the group
        key = ("Pod", *sorted((p["metadata"].get("uid"), p["metadata"].get("generation"))
                              for p in pods))  # fmt: skip
        parsed = self._parse(name, key, lambda: parse_pods(pods))
        if isinstance(parsed, ManifestError):
            self._problem(name, pods[0], str(parsed))
            return None
        resolved = self._resolve(name, pods[0], parsed)
        if resolved is None:
            return None
        team, priority = resolved
        live = [p for p in pods if not pod_done(p)]
        admitted = next((a for a in map(admission_of, live) if a is not None), None)
        phase = pods_phase(pods)
        if admitted is not None and phase == "pending":
            phase = "admitted"  # an admission interrupted half-way: finish it below
        if phase == "finished":
            return None
        submit = max(timestamp(p["metadata"].get("creationTimestamp")) for p in pods)
        workload = Workload(
            name=name, team=team, podsets=parsed.podsets, submit_time=submit,
            priority=priority, priority_class=parsed.priority_class,
            labels=dict(parsed.labels), created=self._created(name),
            queue=self._local_queue(parsed.queue),
        )  # fmt: skip
        t = self._assume(Tracked(name, "Pod", ns, pods, workload, phase, admitted))
        t.pod_podset = self._pod_podsets(t)
        if phase == "outside" and self.may_act():
            self._gate_late(t)
        elif (
            admitted is not None
            and name not in self._writing  # its own write is still being sent
            and any(pod_gated(p) for p in live)
            and self.may_act()
        ):
            self._finish_ungating(t, admitted)
        return t

    def _finish_ungating(self, t: Tracked, admitted: Admitted) -> None:
        """An admission of pods interrupted half-way (a crash, a refused write): ungate the
        rest as the admission record says."""
        written: list[dict[str, Any]] = []
        try:
            self._ungate(t, admitted, self._selectors_of(t, admitted), written)
        except KubeError as exc:
            log.warning("admission of %s not finished: %s", t.name, exc)
            self.retry_soon = True
        for pod in written:
            self.store.put("Pod", pod)

    def _assume(self, t: Tracked) -> Tracked:
        """``t`` as the loop counts it: admitted while an admission write for it is
        outstanding (the objects still say pending until the write lands), unless it was
        preempted meanwhile."""
        assumed = self._writing.get(t.name)
        if assumed is not None and assumed.evicted is None and t.phase == "pending":
            t.phase, t.admitted = "admitted", assumed.admitted
        return t

    def _pod_podsets(self, t: Tracked) -> dict[str, int]:
        """Each pod's pod set (by its request; a pod group's pod sets are its shapes)."""
        out: dict[str, int] = {}
        podsets = t.workload.podsets
        for pod in t.objects:
            pname = str(pod["metadata"]["name"])
            if len(podsets) == 1:
                out[pname] = 0
                continue
            try:
                shape = read_pod_spec(Fields(pname), pod.get("spec"), "spec")
            except ManifestError:
                out[pname] = 0
                continue
            out[pname] = next(
                (i for i, ps in enumerate(podsets) if dict(ps.requests) == dict(shape.requests)),
                0,
            )
        return out

    def _running(self, t: Tracked) -> Running:
        podsets = t.workload.podsets
        pods = t.objects if t.kind == "Pod" else self._job_pods(t)
        actual = bound_placement(pods, podsets, t.pod_podset) if pods else None
        counts = t.admitted.counts if t.admitted is not None else ()
        pods_admitted = sum(counts) if counts else t.workload.pod_count
        if actual is not None and sum(c for ps in actual for _, c in ps) < pods_admitted:
            actual = None  # not every pod exists yet: keep the planned placement
        if t.admitted is not None:
            placement = actual if actual is not None else t.admitted.placement
            flavors = t.admitted.flavors
            at = t.admitted.at
        else:  # running outside the operator: where its pods are
            placement = actual or tuple(() for _ in podsets)
            flavors = tuple(self._flavor_of_nodes(ps) for ps in placement)
            at = t.workload.submit_time
        return Running(t.workload, Assignment(flavors, placement, counts=counts), at)

    def _job_pods(self, t: Tracked) -> list[dict[str, Any]]:
        """The pods of a workload admitted by suspension: owned by it, or by an object it
        owns (a JobSet's Jobs, a RayJob's RayCluster), in the store's order."""
        return self._owners.pods_of(str(t.objects[0]["metadata"].get("uid")), t.namespace)

    def _flavor_of_nodes(self, placement: Sequence[tuple[str, int]]) -> str:
        assert self.engine is not None
        nodes = self.nodes
        for node_name, _ in placement:
            node = nodes.get(node_name)
            if node is not None:
                return self.engine.model.flavor_of(node) or DEFAULT_FLAVOR
        return DEFAULT_FLAVOR

    def _requeue_lost(self, now: float, names: Sequence[str] | None = None) -> None:
        """The work of each node that is gone or NotReady is evicted and queued again, node
        by node in name order (:meth:`~ClusterState.evict_from`): only the nodes of the
        workloads ``names`` are looked at, when given (the others' nodes did not change)."""
        nodes = self.nodes
        candidates = (
            list(self.running.values())
            if names is None
            else [self.running[n] for n in names if n in self.running]
        )
        lost = {n for r in candidates for n in r.assignment.nodes
                if n not in nodes or not nodes[n].ready}  # fmt: skip
        for node in sorted(lost):
            state = "deleted" if node not in nodes else "NotReady"
            self.evict_from(node, NODE_FAILURE, f"node {node} is {state}", now)

    # -- the Cluster protocol: observe ------------------------------------------------------------

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        """The watched Namespaces' labels (what namespace selectors match)."""
        out: dict[str, dict[str, str]] = {}
        for (_, name), obj in self.store.of("Namespace").items():
            labels = (obj.get("metadata") or {}).get("labels") or {}
            out[name] = {str(k): str(v) for k, v in labels.items()}
        return out

    # -- ... and act --------------------------------------------------------------------------

    def _selectors_of(self, t: Tracked, admitted: Admitted) -> list[dict[str, str]]:
        """Per pod set, the node labels its flavor stands for."""
        assert self.engine is not None
        model = self.engine.model
        nodes = self.nodes
        out = []
        for flavor, placement in zip(admitted.flavors, admitted.placement, strict=False):
            explicit = next((f for f in model.flavors if f.name == flavor), None)
            if not model.implicit_flavors and explicit is not None:
                out.append(dict(explicit.node_labels))
            elif flavor == DEFAULT_FLAVOR:
                out.append({})
            else:
                node = next((nodes[n] for n, _ in placement if n in nodes), None)
                label = node.all_labels().get(INSTANCE_TYPE_LABEL) if node else None
                out.append({INSTANCE_TYPE_LABEL: label or flavor})
        return out

    def admitting(self) -> bool:
        """False while ``writes_in_flight`` admission writes are outstanding: the loop runs
        no admission cycle until answers free room (the writer wakes it)."""
        return self.writer is None or self.writer.room() > len(self.assumed())

    def bind_all(self, admissions: Sequence[Admission], now: float) -> None:
        """Admit one cycle's workloads, in the cycle's order.

        Each is *assumed* at once (:meth:`~ClusterState.bind`: counted as admitted, its quota
        reserved, no longer pending) and its admission written when the reconcile is settled
        (:meth:`settle`; a later cycle of the reconcile that preempts it forgets it,
        :meth:`forget`: nothing is written): the sink hands the write to the background
        writer (:mod:`.writer`), which sends the writes in this order, up to
        ``write_concurrency`` at a time; the reconcile does not wait for them. The answers
        are taken at the next refresh: a landed write confirms the assumption, a refused one
        puts the workload back to pending (:meth:`~ClusterState.unbind`), retried at a later
        reconcile. Beyond the writer's room (``writes_in_flight`` outstanding) the rest of the
        cycle's admissions are not carried out now: they stay pending, decided again at a later
        reconcile. Without a writer (``writes_in_flight=0``) the writes are sent at
        :meth:`settle`, in order, before it returns."""
        if not admissions:
            return
        if not self.may_act():
            self.blocked.update(a.workload.name for a in admissions)
            return
        room = (
            max(0, self.writer.room() - len(self.assumed())) if self.writer is not None
            else len(admissions)
        )  # fmt: skip
        for admission in admissions[room:]:  # no room left: decided again later
            self.blocked.add(admission.workload.name)
        if len(admissions) > room and self.writer is not None:
            log.info("%d admissions left for a later reconcile: %d writes outstanding",
                     len(admissions) - room, self.writer.outstanding())  # fmt: skip
            self.writer.full()
        for admission in admissions[:room]:
            name = admission.workload.name
            self.bind(admission, now)
            t = self.tracked[name]
            t.phase, t.admitted = "admitted", _record(admission, now)
            if self.notes is not None and name in self._noting and self.notes.cancel(name):
                del self._noting[name]  # its pending reason, not sent yet, would only move
                # the object under the admission's write (a conflict, read and sent again)

    def forget(self, workload: Workload, now: float) -> None:
        """Undo an admission of this reconcile not written yet (the shared rule): the
        workload is pending again (decided again by the cycles that follow)."""
        super().forget(workload, now)
        t = self.tracked[workload.name]
        t.phase, t.admitted = "pending", None
        log.info("admission of %s undone before it was written", workload.name)

    def settle(self, now: float) -> None:
        """Carry the reconcile's admissions out (the shared rule: its changes go to the sink,
        in order; the pending reasons among them are written as the budget allows), then
        hand their writes to the writer, in order (without a writer: send them here, in
        order, and take their answers)."""
        super().settle(now)
        if self.may_act():  # the reasons the sink queued as the reconcile was settled
            self._write_reasons()
        sends, self._sends = self._sends, []
        if self.writer is not None:
            for name, send in sends:
                self.writer.submit(name, send)
            return
        if sends:
            self._take_answers([send_now(name, send) for name, send in sends])
            self._settle_answers(now)  # blocks the refused until a later reconcile

    def _sink(self, change: ch.Change) -> None:
        """The operator's sink: an admission becomes its write (sent by :meth:`settle`), a
        pending reason changed in substance waits for the reason budget
        (:meth:`report_pending`), a warning is logged; evictions were written by
        :meth:`evict`, and nodes come and go in the API server (NodeClaims, drains)."""
        match change:
            case ch.Admitted(workload=workload):
                name = workload.name
                t = self.tracked[name]
                admitted = t.admitted
                assert admitted is not None
                send = functools.partial(
                    self._write_admission,
                    dataclasses.replace(t, objects=list(t.objects)),  # the writer's own copy
                    admitted,
                    self._selectors_of(t, admitted),
                )
                self._writing[name] = Assumed(t.kind, admitted)
                self._sends.append((name, send))
            case ch.PendingReasonChanged():
                self._unsaid[change.workload] = None
            case ch.Warned():
                if self.keep_warning(self.warnings, change.message):
                    log.warning("%s", change.message)
            case ch.AutoscalerEvent():
                log.debug("%s %s", change.event, dict(change.details))
            case _:
                pass

    def _take_answers(self, answers: Sequence[Answer]) -> None:
        """Apply the writer's answers to the view: what landed goes to the store (the
        refresh reads it); an assumption whose write was refused is undone (the workload is
        pending again, its quota free; :meth:`_settle_answers` blocks it until a later
        reconcile); a workload preempted while its write was sent is evicted now if it
        landed."""
        for answer in answers:
            name = answer.name
            assumed = self._writing.pop(name, None)
            if assumed is None:
                continue
            t = self.tracked.get(name)
            for obj in answer.written:
                if self.store.put(assumed.kind, obj) and t is not None:
                    key = key_of(obj)
                    t.objects = [obj if key_of(o) == key else o for o in t.objects]
            if answer.error is None:
                log.info("admitted %s (team %s, flavor %s)", name, assumed.admitted.team,
                         ",".join(dict.fromkeys(assumed.admitted.flavors)))  # fmt: skip
                if assumed.evicted is not None:
                    self._deferred_evictions.append((name, assumed.evicted))
                continue
            log.info("admission of %s not written (%s): retried", name, answer.error)
            if assumed.evicted is not None:
                if answer.written:  # a gang partly ungated: evict what landed
                    self._deferred_evictions.append((name, assumed.evicted))
                continue
            self._refused.append(name)
            if t is not None:
                self.store.changes.update(dict.fromkeys((t.kind, key_of(o)) for o in t.objects))
                if t.admitted is assumed.admitted:  # still the assumption: undo it
                    t.phase, t.admitted = "pending", None
                    self.unbind(t.workload)

    def _settle_answers(self, now: float) -> None:
        """What the answers taken leave to do once the view is read: refused workloads wait
        for a later reconcile; preempted ones whose write landed are evicted."""
        if self._refused:
            self.blocked.update(self._refused)
            self.retry_soon = True
            self._refused = []
        evictions, self._deferred_evictions = self._deferred_evictions, []
        for name, (by, reason, message) in evictions:
            t = self.tracked.get(name)
            if t is not None and t.phase == "admitted":
                self.evict(t.workload, by, reason, message, now)

    def close(self) -> None:
        """Stop the writer: writes not sent yet are dropped (their workloads stay pending in
        the API server; pending reasons are said again by the next leader)."""
        for writer in (self.writer, self.notes):
            if writer is not None:
                writer.close()

    def _write_admission(
        self,
        t: Tracked,
        admitted: Admitted,
        selectors: list[dict[str, str]],
        written: list[dict[str, Any]],
    ) -> None:
        """Write one admission (appending what the API answered to ``written``) and post its
        Event; raises the API's refusal. Runs in the writer's threads: it reads only ``t``
        (the writer's copy) and never touches the store."""
        if t.kind in SUSPENDED:
            self._admit_suspended(t, admitted, selectors, written)
        else:
            self._ungate(t, admitted, selectors, written)
        borrowed = ", ".join(f"{k}={v / 1000:g}" for k, v in sorted(admitted.borrowed.items()))
        flavors = ",".join(dict.fromkeys(admitted.flavors))
        self.events.post(
            t.objects[0], "Normal", "Admitted",
            f"admitted by team {admitted.team} on flavor {flavors}"
            + (f", borrowing {borrowed}" if borrowed else ""),
        )  # fmt: skip

    def _admit_suspended(
        self,
        t: Tracked,
        admitted: Admitted,
        selectors: list[dict[str, str]],
        written: list[dict[str, Any]],
    ) -> None:
        """Unsuspend with each pod set's node selector in its template (Kueue's way)."""
        kind = SUSPENDED[t.kind]
        by_podset = {ps.name: sel for ps, sel in zip(t.workload.podsets, selectors, strict=False)}
        annotations: dict[str, str | None] = {
            ADMISSION: admitted.to_json(), PENDING_REASON: None, AUTOSCALER_NOTE: None,
            POD_COUNTS: None,
        }  # fmt: skip
        counts: dict[str, int] = {}
        if admitted.counts:  # partial admission: run with fewer pods, say how many were asked
            names = [ps.name for ps in t.workload.podsets]
            counts = dict(zip(names, admitted.counts, strict=True))
            asked = {ps.name: ps.count for ps in t.workload.podsets}
            annotations[POD_COUNTS] = json.dumps(asked, sort_keys=True)

        def patch(obj: dict[str, Any]) -> list[dict[str, Any]]:
            old = injected_by_podset(obj)
            injected = kind.injected(obj, by_podset, old)  # per pod set, as Kueue's podSetInfo
            noted = {
                **annotations,
                INJECTED: json.dumps(injected, sort_keys=True) if injected else None,
            }
            return admission_ops(obj, kind, by_podset, old, noted, counts)

        obj = t.objects[0]
        name = str(obj["metadata"]["name"])
        written.append(self._conditional(RESOURCES[kind.kind], name, t.namespace, obj, patch))
        if kind is JOB:
            self._readmitted(obj, t.namespace)

    def _readmitted(self, job: dict[str, Any], namespace: str) -> None:
        """A Job admitted again after an eviction: its ``Evicted`` condition turns False
        (Kueue sets it False when quota is reserved again); it stayed True before."""
        conditions = (job.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Evicted" and c.get("status") == "True" for c in conditions):
            return
        now = _now_rfc3339()
        cleared = [
            {**c, "status": "False", "reason": "QuotaReserved", "message": "admitted again",
             "lastTransitionTime": now, "lastProbeTime": now}
            if c.get("type") == "Evicted" else c
            for c in conditions
        ]  # fmt: skip
        try:
            self.store.put(JOB.kind, self.kube.patch(
                JOBS, str(job["metadata"]["name"]), {"status": {"conditions": cleared}},
                namespace, sub="status",
            ))  # fmt: skip
        except KubeError as exc:  # the admission stands; the condition is a courtesy
            log.debug("Evicted condition of %s not cleared: %s", job["metadata"]["name"], exc)

    def _conditional(
        self,
        res: Resource,
        name: str,
        namespace: str,
        seen: dict[str, Any],
        body: dict[str, Any] | Callable[[dict[str, Any]], list[dict[str, Any]]],
    ) -> dict[str, Any]:
        """Patch on condition that the object is as the decision saw it: a merge patch
        carrying its resourceVersion (409 when it moved), or a JSON patch made from the object
        by ``body`` whose ``test`` of the resourceVersion fails (422). A conflict caused by a
        write that changed nothing the decision read (a controller's or the scheduler's status
        updates) is retried once on the fresh object; any other change leaves the admission
        to the next reconcile."""

        def send(obj: dict[str, Any]) -> dict[str, Any]:
            if callable(body):
                return self.kube.patch(res, name, body(obj), namespace, content_type=JSON_PATCH)
            body["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            return self.kube.patch(res, name, body, namespace)

        try:
            return send(seen)
        except KubeError as exc:
            if exc.status not in (409, 422):
                raise
            fresh = self.kube.get(res, name, namespace)
            if not _same_decision_inputs(seen, fresh):
                raise
            return send(fresh)

    def _ungate(
        self,
        t: Tracked,
        admitted: Admitted,
        selectors: list[dict[str, str]],
        written: list[dict[str, Any]],
    ) -> None:
        """Remove the gate from each gated pod, adding its pod set's node selector (the keys
        it adds recorded, so the pod is read as its owner wrote it: a pod group's later pods
        have the same shape as its admitted ones), appending each pod as the API answered to
        ``written``."""
        for pod in t.objects:
            if pod_done(pod) or not pod_gated(pod):
                continue
            spec = pod.get("spec") or {}
            index = t.pod_podset.get(str(pod["metadata"]["name"]), 0)
            selector = selectors[index] if index < len(selectors) else {}
            gates = [g for g in spec.get("schedulingGates") or () if g.get("name") != GATE]
            own = spec.get("nodeSelector") or {}
            injected = sorted(k for k, v in selector.items() if own.get(k) != v)
            body: dict[str, Any] = {
                "metadata": {
                    "resourceVersion": pod["metadata"]["resourceVersion"],
                    "annotations": {
                        ADMISSION: admitted.to_json(),
                        INJECTED: json.dumps(injected) if injected else None,
                        PENDING_REASON: None,
                        AUTOSCALER_NOTE: None,
                    },
                },
                "spec": {"schedulingGates": gates or None},
            }
            if selector:
                body["spec"]["nodeSelector"] = selector
            name = str(pod["metadata"]["name"])
            written.append(self._conditional(PODS, name, t.namespace, pod, body))

    def evict(self, workload: Workload, by: str, reason: str, message: str, now: float) -> None:
        """Preempt ``workload`` (see the module docstring): its object is written, then the
        shared rule requeues it (:meth:`~ClusterState.evict`). One admitted at this reconcile
        is forgotten (nothing was written, nothing to undo). One whose admission write is
        outstanding is pending again at once: its write is withdrawn if not sent yet; if it
        is being sent, the eviction is carried out when its answer says it landed
        (:meth:`_take_answers`). One that finished meanwhile, bare pods (nobody recreates
        them) and one whose eviction failed leave the view instead (read again later)."""
        name = workload.name
        t = self.tracked.get(name)
        if t is None or not self.may_act():
            self.cancel(name)
            return
        if name in self.assumed():  # not written yet: nothing to undo
            self.forget(workload, now)
            return
        assumed = self._writing.get(name)
        if assumed is not None:
            if self.writer is not None and self.writer.cancel(name):
                del self._writing[name]
            else:
                assumed.evicted = (by, reason, message)
            t.phase, t.admitted = "pending", None
            super().evict(workload, by, reason, message, now)
            self.blocked.add(name)
            log.info("evicted %s before its admission was written: %s (by %s)",
                     name, reason, by)  # fmt: skip
            return
        text = message or reason
        requeued = False
        try:
            kind = SUSPENDED.get(t.kind)
            if kind is not None:
                if not self._suspend(
                    t, kind, lambda job: eviction_record(job, reason, by, text, now)
                ):
                    log.info("%s finished before its eviction (%s, by %s): left as it is",
                             name, reason, by)  # fmt: skip
                    t.phase = "finished"
                    self.cancel(name)
                    return
                t.phase, t.admitted = "pending", None
                super().evict(workload, by, reason, message, now)
                requeued = True
                if kind is JOB:
                    self._job_condition(t, reason, text)
                    self.blocked.add(name)  # the job controller settles it first
                # other kinds wait in their place at once, as in the simulator: their next
                # admission's patch replaces the node selector this one injected
            else:
                for pod in t.objects:
                    if pod_done(pod):
                        continue
                    self._pod_condition(pod, reason, text)
                    pname = str(pod["metadata"]["name"])
                    try:
                        self.kube.evict(t.namespace, pname)
                    except KubeError as exc:
                        if exc.status == 429:  # a PodDisruptionBudget says not now
                            self.warn(now, f"eviction of pod {t.namespace}/{pname}: {exc}")
                        elif exc.status != 404:
                            raise
                t.phase = "finished"
        except KubeError as exc:
            log.warning("eviction of %s failed: %s", name, exc)
            self.retry_soon = True
        if not requeued:
            self.cancel(name)
        event = "Preempted" if reason not in (NODE_FAILURE,) else "Evicted"
        self.events.post(t.objects[0], "Warning", event, f"{reason}: {text} (by {by})")
        log.info("evicted %s: %s (%s, by %s)", name, reason, text, by)

    def _suspend(
        self, t: Tracked, kind: SuspendedKind, record: Callable[[dict[str, Any]], str]
    ) -> bool:
        """Suspend ``t``'s object for an eviction (its admission record off, the eviction
        record, ``record`` of the object, on: it keeps the admission it ended; the counts a
        partial admission lowered given back), unless it finished
        meanwhile: its pods may have succeeded after the view the decision read (the watches
        lag), and a finished workload keeps its admission record. The patch is conditional on
        the newest object the store has (a JSON patch ``test`` of its resourceVersion); when it
        moved (the job controller counted the pods' successes, say) the object is read again
        and, unless it has finished, suspended as it is now. False: finished, nothing
        written."""
        key = key_of(t.objects[0])
        seen = self.store.of(kind.kind).get(key) or t.objects[0]
        pods = [self.store.of("Pod").get(key_of(p)) or p for p in self._job_pods(t)]
        if kind.finished(seen, pods):
            self.store.changes[(kind.kind, key)] = None  # read again at the next refresh
            return False
        res, name = RESOURCES[kind.kind], key[1]

        def ops(job: dict[str, Any]) -> list[dict[str, Any]]:
            version = job["metadata"].get("resourceVersion")
            return [
                {"op": "test", "path": "/metadata/resourceVersion", "value": version},
                *annotation_ops(job, {ADMISSION: None, EVICTION: record(job), POD_COUNTS: None}),
                *kind.suspend_ops(job, True),
                *kind.resize_ops(job, written_counts(job)),
            ]

        try:
            written = self.kube.patch(res, name, ops(seen), t.namespace, content_type=JSON_PATCH)
        except KubeError as exc:
            if exc.status not in (409, 422):
                raise
            fresh = self.kube.get(res, name, t.namespace)
            self.store.put(kind.kind, fresh)
            if kind.finished(fresh, ()):
                self.store.changes[(kind.kind, key)] = None
                return False
            written = self.kube.patch(res, name, ops(fresh), t.namespace, content_type=JSON_PATCH)
        self.store.put(kind.kind, written)
        t.objects = [written, *t.objects[1:]]
        return True

    def _job_condition(self, t: Tracked, reason: str, message: str) -> None:
        condition = {
            "type": "Evicted", "status": "True", "reason": camel(reason),
            "message": message[:1000], "lastTransitionTime": _now_rfc3339(),
            "lastProbeTime": _now_rfc3339(),
        }  # fmt: skip
        job = t.objects[0]
        conditions = [c for c in (job.get("status") or {}).get("conditions") or ()
                      if c.get("type") != "Evicted"]  # fmt: skip
        status = {"conditions": [*conditions, condition], "startTime": None}
        try:  # the start time reset in the same write: the job can be admitted again
            self.store.put(JOB.kind, self.kube.patch(
                JOBS, str(job["metadata"]["name"]), {"status": status}, t.namespace, sub="status",
            ))  # fmt: skip
        except KubeError as exc:  # the Event and the annotation still say it
            log.debug("job condition not written: %s", exc)

    def _release(self, job: dict[str, Any], kind: SuspendedKind) -> None:
        """Take the node selector injected at admission off a suspended job's templates
        once the API server lets them change (a Job: its pods gone and its start time
        reset); the annotation that named the keys goes with it."""
        meta = job["metadata"]
        ops = [
            *kind.restore_ops(job, injected_by_podset(job)),
            *annotation_ops(job, {INJECTED: None}),
        ]
        try:
            self.store.put(kind.kind, self.kube.patch(
                RESOURCES[kind.kind], str(meta["name"]), ops, str(meta["namespace"]),
                content_type=JSON_PATCH,
            ))  # fmt: skip
        except KubeError as exc:  # the next admission replaces the keys anyway
            log.debug("injected node selector of %s not taken off: %s", meta["name"], exc)

    def _reset_start(self, job: dict[str, Any]) -> None:
        """Clear a suspended Job's ``status.startTime`` (its pod template may change again
        and it may be admitted again)."""
        meta = job["metadata"]
        try:
            self.store.put(JOB.kind, self.kube.patch(
                JOBS, str(meta["name"]), {"status": {"startTime": None}}, str(meta["namespace"]),
                sub="status",
            ))  # fmt: skip
        except KubeError as exc:
            log.debug("start time of %s not reset: %s", meta["name"], exc)

    def _pod_condition(self, pod: dict[str, Any], reason: str, message: str) -> None:
        body = {"status": {"conditions": [{
            "type": "fleetshare.io/Preempted", "status": "True", "reason": camel(reason),
            "message": message[:1000], "lastTransitionTime": _now_rfc3339(),
        }]}}  # fmt: skip
        try:
            self.kube.patch(
                PODS, str(pod["metadata"]["name"]), body,
                str(pod["metadata"]["namespace"]), sub="status", content_type=STRATEGIC_POD,
            )  # fmt: skip
        except KubeError as exc:
            log.debug("pod condition not written: %s", exc)

    def _suspend_new(self, job: dict[str, Any], kind: SuspendedKind) -> None:
        """A governed Job (or JobSet, ...) created unsuspended (no webhook): suspend it until
        admitted."""
        try:
            ops = kind.suspend_ops(job, True)
            meta = job["metadata"]
            out = self.kube.patch(RESOURCES[kind.kind], meta["name"], ops, meta["namespace"],
                                  content_type=JSON_PATCH)  # fmt: skip
            self.store.put(kind.kind, out)
            self.events.post(job, "Normal", "Suspended", "suspended until fleetshare admits it")
        except KubeError as exc:
            log.warning("could not suspend %s: %s", job["metadata"]["name"], exc)

    def _gate_late(self, t: Tracked) -> None:
        """Pods created without the gate (no webhook in front of the API): a pod not yet
        bound is replaced by a gated copy (a gate cannot be added to an existing pod); one
        already bound runs outside the operator and is only counted."""
        for pod in t.objects:
            spec = pod.get("spec") or {}
            meta = pod["metadata"]
            if pod_done(pod) or spec.get("nodeName") or meta.get("ownerReferences"):
                continue
            copy = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {k: v for k, v in meta.items()
                             if k in ("name", "namespace", "labels", "annotations")},
                "spec": {**spec, "schedulingGates": [*(spec.get("schedulingGates") or ()),
                                                     {"name": GATE}]},
            }  # fmt: skip
            try:
                self.kube.delete(PODS, meta["name"], meta["namespace"], gracePeriodSeconds=0)
                self._wait_gone(str(meta["namespace"]), str(meta["name"]))
                self.store.put("Pod", self.kube.create(PODS, copy, str(meta["namespace"])))
                log.info("pod %s/%s recreated behind the gate", meta["namespace"], meta["name"])
            except KubeError as exc:
                log.warning("could not gate pod %s: %s", meta["name"], exc)
                self.retry_soon = True

    def _wait_gone(self, namespace: str, name: str, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.kube.get(PODS, name, namespace)
            except KubeError as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(0.05)

    def considered(self, name: str) -> bool:
        """An admission cycle left the pending workload waiting with a reason (its object
        carries the reason annotation)."""
        t = self.tracked.get(name)
        if t is None or not t.objects:
            return False
        return bool((t.objects[0]["metadata"].get("annotations") or {}).get(PENDING_REASON))

    def report_pending(self, result: CycleResult, now: float) -> None:
        """Keep why each pending workload waits (the shared rule: a reason changed in
        substance goes to the sink, which queues it), then write what the budget allows (a
        token bucket: ``pending_writes`` at once, refilled at ``pending_writes_per_second``;
        oldest first), each reason read afresh from the last cycle: with thousands waiting,
        the reasons catch up over the next reconciles instead of taking the client's requests
        from admissions (Kueue updates the pending condition only of the queue heads it
        tried). A reason the object already shows is not written again (a restart)."""
        if not self.may_act():
            return
        self.reason_budget.refill(now)
        super().report_pending(result, now)
        self._reasons = result.pending
        self._write_reasons()

    def _write_reasons(self) -> None:
        """Write the queued pending reasons the budget allows, oldest first (see
        :meth:`report_pending`)."""
        notes = self.notes
        while self._unsaid and self.reason_budget.tokens >= 1:
            name = next(iter(self._unsaid))
            if notes is not None and (name in self._noting or not notes.room()):
                break  # its last reason (or the writer's room) is not answered yet: it waits
            del self._unsaid[name]
            t = self.tracked.get(name)
            reason = reason_of(self._reasons, name)
            if t is None or name not in self.pending or reason is None:
                continue
            obj = t.objects[0]
            if (obj["metadata"].get("annotations") or {}).get(PENDING_REASON) == reason[:1000]:
                continue
            self.reason_budget.take()
            if notes is None:
                self._annotate(t, PENDING_REASON, reason)
                continue
            self._noting[name] = reason
            notes.submit(name, self._note_write(t, obj, reason))

    def _note_write(self, t: Tracked, seen: dict[str, Any], reason: PendingReason) -> Send:
        """The background write of a pending reason, on condition that the object is as
        ``seen`` (a merge patch carrying its resourceVersion): sent after the workload was
        admitted it would put a stale reason on admitted work; refused instead (409)."""
        meta = seen["metadata"]
        body = _annotation(PENDING_REASON, reason)
        body["metadata"]["resourceVersion"] = meta["resourceVersion"]
        res, name, namespace = _res(t), str(meta["name"]), t.namespace

        def send(written: list[dict[str, Any]]) -> None:
            written.append(self.kube.patch(res, name, body, namespace))

        return send

    def _take_notes(self, answers: list[Answer]) -> None:
        """The pending-reason writes answered since the last refresh: a landed one goes to
        the store; a refused one is queued again while its workload waits (its reason is read
        afresh when its turn comes)."""
        for answer in answers:
            self._noting.pop(answer.name, None)
            t = self.tracked.get(answer.name)
            if answer.written and t is not None:
                self._keep(t, answer.written[0])
            elif answer.error is not None:
                log.debug("pending reason not written for %s: %s", answer.name, answer.error)
                if answer.name in self.pending:
                    self._unsaid.setdefault(answer.name, None)

    def _keep(self, t: Tracked, out: dict[str, Any]) -> None:
        """The API's answer to a write of ``t``'s first object: kept in the store and in
        ``t`` (a later write in the same reconcile starts from it)."""
        if self.store.put(t.kind, out):
            t.objects[0] = out

    def note_pending(self, workload: str, note: AutoscalerNote) -> None:
        """What the autoscaler does for a pending workload: the annotation
        ``operator.fleetshare.io/autoscaler``, written when the note says something new in
        substance (the shared rule, :meth:`~ClusterState.noted`), its times as timestamps."""
        t = self.tracked.get(workload)
        if t is not None and self.may_act() and self.noted(workload, note):
            self._annotate(t, AUTOSCALER_NOTE, note.message(self.when))

    def _annotate(self, t: Tracked, key: str, text: str) -> None:
        """Write annotation ``key`` (at most 1,000 characters of ``text``) on ``t``'s first
        object now, keeping the answer; a refusal is logged (the note is said again when it
        changes)."""
        try:
            name = str(t.objects[0]["metadata"]["name"])
            self._keep(t, self.kube.patch(_res(t), name, _annotation(key, text), t.namespace))
        except KubeError as exc:
            log.debug("%s not written for %s: %s", key, t.name, exc)

    def join_node(self, node: Node, at: float) -> None:
        """The autoscaler launched ``node``: its NodeClaim records it; the node joins when
        its kubelet registers it (:meth:`NodeClaims.sync`)."""
        if self.claims is not None:
            self.claims.launched(node.name)

    def remove_node(self, name: str, reason: Reason, now: float) -> bool:
        """Drain the node through the Eviction API (:mod:`.drain`): refused as a whole when a
        PodDisruptionBudget forbids one eviction; else its governed work is evicted and
        requeued, its other pods evicted, and its Node and NodeClaim deleted. A node that goes
        whatever is decided (:data:`FORCED`: a spot interruption, a repair) is not refused:
        pods a budget protects are deleted."""
        if not self.may_act():
            raise RemovalRefused("not the leader")
        pods = pods_on(self.store, name)
        forced = reason.category in FORCED
        try:
            if pods:
                cordon(self.kube, name)
                blocked = None if forced else refusal(self.kube, pods)
                if blocked is not None:
                    cordon(self.kube, name, on=False)
                    node = self.store.of("Node").get(("", name)) or {"metadata": {"name": name}}
                    self.events.post({**node, "kind": "Node", "apiVersion": "v1"}, "Warning",
                                     "DrainRefused", f"{reason.message}: {blocked}")  # fmt: skip
                    raise RemovalRefused(blocked)
        except KubeError as exc:
            raise RemovalRefused(f"drain of {name} failed: {exc}") from exc
        evicted = self.evict_from(name, reason.category, reason.details, now)
        for problem in evict_all(self.kube, pods_on(self.store, name), force=forced):
            self.warn(now, f"draining {name}: {problem}")
        if self.claims is not None:
            self.claims.delete(name, node_too=True)
        else:
            with contextlib.suppress(KubeError):
                self.kube.delete(NODES, name)
        log.info("node %s removed: %s", name, reason.message)
        return evicted

    def wake(self, at: float, now: float, *, unless_sooner: bool = False) -> None:
        """The operator keeps no timers: the controller sleeps until :attr:`wake_at`, the
        soonest wake-up asked for since the last reconcile (a sooner one wins anyway)."""
        if at > now and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at


GroupKey = tuple[str, str]
"""(namespace, "group:NAME" or "pod:NAME"): governed bare pods admitted together."""


def _record(admission: Admission, now: float) -> Admitted:
    """The admission record written on a workload's object (its borrowing above zero)."""
    assignment = admission.assignment
    borrowed = {k: v for k, v in admission.borrowed.items() if v}
    return Admitted(assignment.flavors, assignment.placement, now, admission.workload.team,
                    borrowed, assignment.counts)  # fmt: skip


def _job_name(kind: SuspendedKind, namespace: str, name: str) -> str:
    """The workload name of a Job (``ns/name``) or another suspendable kind
    (``ns/Kind/name``)."""
    return f"{namespace}/{name}" if kind is JOB else f"{namespace}/{kind.kind}/{name}"


def _res(t: Tracked) -> Resource:
    return RESOURCES.get(t.kind, PODS)


def _same_decision_inputs(seen: Mapping[str, Any], fresh: Mapping[str, Any]) -> bool:
    """The same spec (generation; for pods, which have none, the spec itself), labels and
    annotations (but the operator's notes, :data:`NOTES`): only status or notes moved."""
    a, b = seen.get("metadata") or {}, fresh.get("metadata") or {}
    if a.get("uid") != b.get("uid") or b.get("deletionTimestamp"):
        return False
    if a.get("labels") != b.get("labels") or _inputs(a) != _inputs(b):
        return False
    if a.get("generation") is not None:
        return bool(a.get("generation") == b.get("generation"))
    return bool(seen.get("spec") == fresh.get("spec"))


NOTES = frozenset({PENDING_REASON, AUTOSCALER_NOTE})
"""Annotations the operator writes that no decision reads."""


def _inputs(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (meta.get("annotations") or {}).items() if k not in NOTES}


STRATEGIC_POD = "application/strategic-merge-patch+json"
"""Pod conditions merge by type in a strategic merge patch (a merge patch would replace the
list the scheduler and the kubelet write)."""


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _rfc3339(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


__all__ = ["EVENTS", "NODE_FAILURE", "KubeCluster", "Tracked"]
