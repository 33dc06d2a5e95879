"""fleetshare governing Kueue's own Workload objects: the like-for-like mode of
``kueue_side_by_side.py`` (``--mode workloads``).

Kueue's scheduler-performance runner creates ClusterQueues, LocalQueues, a ResourceFlavor
and ``kueue.x-k8s.io/v1beta2`` Workloads, and finishes each admitted Workload its running
time after admission (it also completes an eviction by taking the quota reservation off);
its controller is a program it starts with ``--kubeconfig`` (``--minimalKueue``: Kueue's
minimalkueue). This module is such a program for fleetshare: the runner starts it in
minimalkueue's place, so the same runner creates and finishes the work, the same recorder
measures it (``summary.yaml``) and the API server carries the same objects for both tools.

What it does, as Kueue's scheduler and ClusterQueue controller do:

- the policy is what ``fleetshare import kueue`` makes of the ClusterQueues, LocalQueues and
  ResourceFlavors it watches (:func:`policy_of`; root cohorts kept apart, as in Kueue);
- each Workload is a fleetshare workload (:func:`workload_of`): its LocalQueue's team, its pod
  sets' counts and requests, ``spec.priority`` (order kept), the server's creation time;
- fleetshare's engine and control loop decide (the operator's: :class:`ControlLoop`, the
  incremental cycle cache) over the shared cluster state (:class:`WorkloadCluster` is a
  :class:`~fleetshare.control.state.ClusterState`, as the runner, the service and the
  operator are), on one node per flavor of the summed nominal quotas (Kueue admits by quota
  alone; fleetshare places pods, so the node never binds before the quota does);
- an admission is assumed until the reconcile is settled (one a later cycle of it preempts is
  forgotten: nothing written), then one status write (:func:`admission_status`:
  ``status.admission`` with each pod set's flavors and usage, ``QuotaReserved`` and
  ``Admitted`` True, ``Evicted`` and ``Preempted`` False again), sent in the background (the
  operator's :class:`~fleetshare.operator.writer.AdmissionWriter`), conditional on the
  resourceVersion the decision saw;
- a preemption is one status write (:func:`eviction_status`: ``Evicted`` and ``Preempted``
  True); the runner then takes the reservation off, and the workload waits again;
- each ClusterQueue's status (``flavorsReservation``, ``flavorsUsage``, pending, reserving
  and admitted counts, ``Active``: what the runner's recorder reads) is written when it
  changed (:func:`queue_status`), each at most once a second and all together within a
  budget of :data:`QUEUE_WRITES_PER_SECOND` (:func:`queues_due`).

The client is limited as minimalkueue's is (50 QPS, burst 100). SIGINT (the runner's stop)
or SIGTERM ends it.

    python bench/kueue_workloads.py --kubeconfig PATH
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import queue
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT / "src"), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from fleetshare.control.changes import Admitted, Change, Warned  # noqa: E402
from fleetshare.control.loop import ControlLoop  # noqa: E402
from fleetshare.control.state import ClusterState  # noqa: E402
from fleetshare.governance.admission import CycleCache, Engine  # noqa: E402
from fleetshare.governance.snapshot import Admission, CycleResult, Running  # noqa: E402
from fleetshare.manifests import ManifestError  # noqa: E402
from fleetshare.manifests.pods import read_pod_spec  # noqa: E402
from fleetshare.manifests.values import Fields  # noqa: E402
from fleetshare.model.node import Node  # noqa: E402
from fleetshare.model.quantity import MILLI, parse_quantity  # noqa: E402
from fleetshare.model.workload import PodSet, Workload  # noqa: E402
from fleetshare.operator.kube import Kube, KubeError, Resource  # noqa: E402
from fleetshare.operator.objects import timestamp  # noqa: E402
from fleetshare.operator.watch import Key, Store, Watcher, key_of  # noqa: E402
from fleetshare.operator.writer import AdmissionWriter, Answer  # noqa: E402
from fleetshare.policy.kueue import import_kueue  # noqa: E402
from fleetshare.policy.schema import Policy, load_policy  # noqa: E402
from fleetshare.traces.kueue_generator import cohorts_apart  # noqa: E402

log = logging.getLogger("fleetshare.kueue_workloads")
GV = "kueue.x-k8s.io/v1beta2"
WORKLOADS = Resource("Workload", GV, "workloads", True)
CLUSTER_QUEUES = Resource("ClusterQueue", GV, "clusterqueues", False)
LOCAL_QUEUES = Resource("LocalQueue", GV, "localqueues", True)
FLAVORS = Resource("ResourceFlavor", GV, "resourceflavors", False)
POLICY_KINDS = (CLUSTER_QUEUES, LOCAL_QUEUES, FLAVORS)
QUEUE_STATUS_SECONDS = 1.0
"""A ClusterQueue's status is written at most this often (when it changed)..."""
QUEUE_WRITES_PER_SECOND = 10.0
"""... and all ClusterQueues' together at most this often on average (a burst of as many):
a fifth of the client's 50 requests a second, whatever the number of queues (30 at full
scale: each written every 3 s while all change)."""
PREEMPTED_REASONS = {"priority": "InClusterQueue", "reclaim": "InCohortReclamation"}
"""fleetshare's preemption reasons as Kueue's ``Preempted`` condition reasons (others:
``InCohortReclaimWhileBorrowing``)."""


# -- the policy and the workloads (pure) ------------------------------------------------------


def policy_of(objects: Sequence[Mapping[str, Any]]) -> Policy:
    """The policy ``fleetshare import kueue`` makes of the watched ClusterQueues, LocalQueues
    and ResourceFlavors (their spec as written; status and bookkeeping left out), each root
    cohort kept apart (Kueue's cohorts without a parent share nothing)."""
    docs = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        keep = {k: meta[k] for k in ("name", "namespace", "labels") if meta.get(k)}
        docs.append({"apiVersion": GV, "kind": obj.get("kind"), "metadata": keep,
                     "spec": obj.get("spec") or {}})  # fmt: skip
    policy = import_kueue(docs).model_dump(mode="json")
    return load_policy(cohorts_apart(policy))


def policy_key(objects: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str, str, Any], ...]:
    """What the policy is made of: each object's kind, namespace, name and generation (a
    status write changes none of them)."""
    return tuple(sorted(
        (str(o.get("kind")), *key_of(o), (o.get("metadata") or {}).get("generation"))
        for o in objects
    ))  # fmt: skip


def conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in (obj.get("status") or {}).get("conditions") or ()}


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    return (conditions(obj).get(kind) or {}).get("status") == "True"


Phase = str
"""``pending``, ``admitted`` (quota reserved), ``evicting`` (evicted, its reservation not yet
taken off by the runner: waits) or ``finished``."""


def phase_of(obj: Mapping[str, Any]) -> Phase:
    """Where a Workload stands, from its conditions."""
    if is_true(obj, "Finished") or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "finished"
    if is_true(obj, "QuotaReserved"):
        return "evicting" if is_true(obj, "Evicted") else "admitted"
    return "pending"


def workload_of(obj: Mapping[str, Any], policy: Policy, created: int) -> Workload:
    """A Workload as fleetshare's workload ``namespace/name``: its LocalQueue's team, its pod
    sets, ``spec.priority`` as its priority (Kueue's values; only their order matters to the
    engine), the server's creation time. Raises KeyError (an unknown queue) or
    :class:`ManifestError`."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    ns, name = str(meta.get("namespace", "")), str(meta["name"])
    team = policy.team_for(f"{ns}/{spec.get('queueName', '')}")
    fields = Fields(f"Workload {ns}/{name}")
    podsets = []
    for i, ps in enumerate(spec.get("podSets") or ()):
        where = f"spec.podSets[{i}].template.spec"
        shape = read_pod_spec(fields, (ps.get("template") or {}).get("spec"), where)
        podsets.append(PodSet(str(ps.get("name", "main")), int(ps.get("count", 1)),
                              dict(shape.requests)))  # fmt: skip
    if not podsets:
        raise fields.error("spec.podSets", "lists no pod set")
    return Workload(
        name=f"{ns}/{name}", team=team, podsets=tuple(podsets),
        submit_time=timestamp(meta.get("creationTimestamp")),
        priority=int(spec.get("priority") or 0), labels=dict(meta.get("labels") or {}),
        created=created,
    )  # fmt: skip


def quantity(milli: int) -> str:
    """An exact Kubernetes quantity of ``milli`` thousandths."""
    return str(milli // MILLI) if milli % MILLI == 0 else f"{milli}m"


def condition(kind: str, status: bool, reason: str, message: str, now: str,
              generation: Any) -> dict[str, Any]:  # fmt: skip
    out = {"type": kind, "status": "True" if status else "False", "reason": reason,
           "message": message[:1000], "lastTransitionTime": now}  # fmt: skip
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def with_conditions(obj: Mapping[str, Any], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``obj``'s conditions with ``new`` set (a condition whose status does not change keeps
    its transition time, as ``apimeta.SetStatusCondition`` does)."""
    out = {k: dict(v) for k, v in conditions(obj).items()}
    for c in new:
        old = out.get(c["type"])
        if old is not None and old.get("status") == c["status"]:
            c = {**c, "lastTransitionTime": old.get("lastTransitionTime", c["lastTransitionTime"])}
        out[c["type"]] = c
    return list(out.values())


def admission_status(obj: Mapping[str, Any], admission: Admission, cluster_queue: str,
                     now: str) -> dict[str, Any]:  # fmt: skip
    """The status write admitting ``obj`` (Kueue's ``SetQuotaReservation`` and
    ``SyncAdmittedCondition`` with no admission checks): ``status.admission`` (per pod set:
    the flavor of each resource, the resources it uses, its count), ``QuotaReserved`` and
    ``Admitted`` True, and an ``Evicted`` or ``Preempted`` condition that was True turned
    False; conditional on the resourceVersion the decision saw."""
    meta = obj["metadata"]
    generation = meta.get("generation")
    assignment = admission.assignment
    sets = []
    for i, ps in enumerate(admission.workload.podsets):
        count = assignment.counts[i] if assignment.counts else ps.count
        flavor = assignment.flavors[i]
        sets.append({
            "name": ps.name,
            "flavors": {r: flavor for r in sorted(ps.requests)},
            "resourceUsage": {r: quantity(v * count) for r, v in sorted(ps.requests.items())},
            "count": count,
        })  # fmt: skip
    new = [
        condition("QuotaReserved", True, "QuotaReserved",
                  f"Quota reserved in ClusterQueue {cluster_queue}", now, generation),
        condition("Admitted", True, "Admitted",
                  "The workload is admitted", now, generation),
    ]  # fmt: skip
    for kind in ("Evicted", "Preempted"):
        old = conditions(obj).get(kind)
        if old is not None and old.get("status") == "True":
            message = f"Previously: {old.get('message', '')}"
            new.append(condition(kind, False, "QuotaReserved", message, now, generation))
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "status": {
            "admission": {"clusterQueue": cluster_queue, "podSetAssignments": sets},
            "conditions": with_conditions(obj, new),
        },
    }


def eviction_status(obj: Mapping[str, Any], reason: str, message: str, now: str) -> dict[str, Any]:
    """The status write preempting ``obj``: ``Evicted`` True (reason ``Preempted``) and
    ``Preempted`` True with Kueue's reason for fleetshare's ``reason``; the runner takes the
    quota reservation off after it (as Kueue's job integration does)."""
    generation = obj["metadata"].get("generation")
    new = [
        condition("Evicted", True, "Preempted", message, now, generation),
        condition("Preempted", True, PREEMPTED_REASONS.get(reason, "InCohortReclaimWhileBorrowing"),
                  message, now, generation),
    ]  # fmt: skip
    return {"status": {"conditions": with_conditions(obj, new)}}


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One ClusterQueue as its status tells it."""

    used: tuple[tuple[str, str, int], ...]
    """(flavor, resource, milli) reserved by its admitted workloads."""
    pending: int
    reserving: int


def queue_figures(running: Sequence[Running], pending: int) -> QueueFigures:
    """A ClusterQueue's figures from its team's admitted workloads and pending count."""
    used: dict[tuple[str, str], int] = {}
    for r in running:
        counts = r.assignment.counts
        for i, ps in enumerate(r.workload.podsets):
            n = counts[i] if counts else ps.count
            for res, v in ps.requests.items():
                k = (r.assignment.flavors[i], res)
                used[k] = used.get(k, 0) + v * n
    return QueueFigures(tuple(sorted((f, r, v) for (f, r), v in used.items())), pending,
                        len(running))  # fmt: skip


def queue_status(cq: Mapping[str, Any], figures: QueueFigures, now: str) -> dict[str, Any]:
    """The ClusterQueue status write: reservation and usage per flavor and resource of its
    quota (0 where nothing is used; no admission checks, so usage = reservation), pending,
    reserving and admitted counts, ``Active`` True."""
    used = {(f, r): v for f, r, v in figures.used}
    flavors = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or ():
        for fq in group.get("flavors") or ():
            fname = str(fq.get("name"))
            resources = [{"name": str(rq.get("name")),
                          "total": quantity(used.get((fname, str(rq.get("name"))), 0)),
                          "borrowed": "0"}
                         for rq in fq.get("resources") or ()]  # fmt: skip
            flavors.append({"name": fname, "resources": resources})
    active = condition("Active", True, "Ready", "Can admit new workloads", now, None)
    return {
        "status": {
            "flavorsReservation": flavors,
            "flavorsUsage": flavors,
            "pendingWorkloads": figures.pending,
            "reservingWorkloads": figures.reserving,
            "admittedWorkloads": figures.reserving,
            "conditions": with_conditions(cq, [active]),
        }
    }


def queues_due(
    last: Mapping[str, float], clock: float, room: int
) -> tuple[list[str], float | None]:
    """Of the ClusterQueues whose status changed (name -> monotonic time of its last write),
    those to write at ``clock``: each at most every :data:`QUEUE_STATUS_SECONDS`, at most
    ``room``, least recently written first (then by name); and when the next of the others
    may be written (None: none waits for its time; the budget may still hold them)."""
    ready = sorted((at, name) for name, at in last.items() if clock >= at + QUEUE_STATUS_SECONDS)
    waiting = [at + QUEUE_STATUS_SECONDS for at in last.values()
               if clock < at + QUEUE_STATUS_SECONDS]  # fmt: skip
    return [name for _, name in ready[: max(room, 0)]], min(waiting, default=None)


def quota_nodes(policy: Policy) -> list[Node]:
    """One node per flavor offering the sum of every team's nominal quota of it: Kueue admits
    by quota alone, so placement never binds before the quota does."""
    totals: dict[str, dict[str, int]] = {}
    for team in policy.teams:
        for entry in team.quota:
            for res, amount in entry.resources.items():
                flavor = totals.setdefault(entry.flavor, {})
                flavor[res] = flavor.get(res, 0) + parse_quantity(amount)
    nodes = []
    for flavor, amounts in sorted(totals.items()):
        labels = {}
        explicit = next((f for f in policy.cluster.flavors if f.name == flavor), None)
        if explicit is not None:
            labels = dict(explicit.node_labels)
        nodes.append(Node(name=f"quota-{flavor or 'default'}", allocatable=amounts,
                          labels=labels))  # fmt: skip
    return nodes


def rfc3339(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


# -- the backend (I/O) -------------------------------------------------------------------------


@dataclass
class Tracked:
    obj: dict[str, Any]
    workload: Workload
    phase: Phase


class WorkloadCluster(ClusterState):
    """The :class:`~fleetshare.control.cluster.Cluster` over Kueue's Workloads: the shared
    :class:`~fleetshare.control.state.ClusterState` (bind and forget, settle, requeue), fed by
    :meth:`refresh` from the watched Workloads, its sink turning each ``Admitted`` into a
    status write when the reconcile is settled; evictions are status writes of their own."""

    def __init__(self, kube: Kube, store: Store, writer: AdmissionWriter) -> None:
        super().__init__(self._sink)
        self.kube = kube
        self.store = store
        self.writer = writer
        self.policy: Policy | None = None
        self.tracked: dict[str, Tracked] = {}
        self.writing: dict[str, Running] = {}
        """Admissions handed to the writer whose answer was not taken yet."""
        self.evict_after: dict[str, tuple[str, str]] = {}
        self.evictions_waiting: list[tuple[str, Tracked, str, str]] = []
        """Evictions decided while the writer was full, in order: written before any
        admission."""
        self.evicting: set[str] = set()
        """Evicted: out of the view until their object says so (``Evicted`` True, or the
        runner took the reservation off), whatever older versions the watch still brings."""
        self.wake_at: float | None = None
        self.order = itertools.count()
        self.created: dict[str, int] = {}
        self.admissions = 0
        self.evictions = 0
        self.refused = 0

    def name_of(self, key: Key) -> str:
        return f"{key[0]}/{key[1]}"

    def room(self) -> int:
        """How many more writes may be handed over, the assumed admissions' counted."""
        return max(0, self.writer.room() - len(self.assumed()))

    def refresh(self, policy: Policy, rebuild: bool) -> bool:
        """Take the writes' answers, then read the Workloads the watches changed (all of
        them when ``rebuild``: a new policy); True when some Workload changed."""
        self.blocked.clear()
        for answer in self.writer.take():
            self._answer(answer)
        self.policy = policy
        changes = self.store.take_changes()
        keys = (list(self.store.of("Workload")) if rebuild
                else [k for kind, k in changes if kind == "Workload"])  # fmt: skip
        for key in keys:
            self._read(key)
        self.blocked.update(n for n in self.writing if n in self.evict_after)
        return bool(keys)

    def _read(self, key: Key) -> None:
        name = self.name_of(key)
        obj = self.store.of("Workload").get(key)
        if name in self.writing:  # its admission write is outstanding: it stays admitted
            if obj is not None:
                self.tracked[name].obj = obj
            return
        phase = "finished" if obj is None else phase_of(obj)
        if obj is None or phase == "finished":
            self.tracked.pop(name, None)
            self.evicting.discard(name)
            self.cancel(name)
            return
        if name in self.evicting:
            if phase == "admitted":  # the watch has not brought the eviction yet
                self.cancel(name)
                return
            self.evicting.discard(name)
        assert self.policy is not None
        old = self.tracked.get(name)
        try:
            workload = workload_of(
                obj, self.policy, self.created.setdefault(name, next(self.order))
            )
        except (KeyError, ManifestError) as exc:
            log.debug("%s not governed: %s", name, exc)
            self.tracked.pop(name, None)
            self.cancel(name)
            return
        if old is not None and old.workload == workload:
            workload = old.workload
        t = Tracked(obj, workload, phase)
        self.tracked[name] = t
        if t.phase == "admitted":
            running = self._running(t)
            if self.running.get(name) != running:
                self.resume(running, None)
        elif t.phase == "pending":
            if name in self.running:
                self.cancel(name)
            if self.pending.get(name) is not workload:
                self.pending.take(name)
                self.pending.put(workload)
        else:  # evicting: the runner takes the reservation off; not counted, not admitted yet
            self.cancel(name)

    def _running(self, t: Tracked) -> Running:
        from fleetshare.governance.snapshot import Assignment

        admission = (t.obj.get("status") or {}).get("admission") or {}
        sets = admission.get("podSetAssignments") or ()
        flavors = tuple(
            str(next(iter((s.get("flavors") or {}).values()), "")) for s in sets
        ) or tuple("" for _ in t.workload.podsets)
        placement = tuple(
            ((self._node_of(f), ps.count),) for f, ps in zip(flavors, t.workload.podsets,
                                                             strict=False)
        )  # fmt: skip
        at = timestamp((conditions(t.obj).get("QuotaReserved") or {}).get("lastTransitionTime"))
        return Running(t.workload, Assignment(flavors, placement), at)

    def _node_of(self, flavor: str) -> str:
        name = f"quota-{flavor or 'default'}"
        return name if name in self.nodes else next(iter(self.nodes), name)

    def _answer(self, answer: Answer) -> None:
        name = answer.name
        running = self.writing.pop(name, None)
        for obj in answer.written:
            self.store.put("Workload", obj)
        if answer.error is not None:
            if running is None:  # an eviction's write: read the Workload again
                log.info("eviction of %s not written: %s", name, answer.error)
                workload = name.removesuffix("#evict")
                self.evicting.discard(workload)
                t = self.tracked.get(workload)
                if t is not None:
                    self.store.changes[("Workload", key_of(t.obj))] = None
                return
            self.refused += 1
            log.info("admission of %s not written (%s): decided again", name, answer.error)
            self.evict_after.pop(name, None)
            t = self.tracked.get(name)
            if t is None:
                self.cancel(name)
            else:
                self.unbind(t.workload)
                self.store.changes[("Workload", key_of(t.obj))] = None
            self.blocked.add(name)
            return
        if running is not None and name in self.evict_after:
            reason, message = self.evict_after.pop(name)
            t = self.tracked.get(name)
            if t is not None and answer.written:
                t.obj = answer.written[-1]
                self._send_eviction(name, t, reason, message)

    # observe (the rest: ClusterState)
    def admitting(self) -> bool:
        return self.room() > 0

    # act
    def bind_all(self, admissions: Sequence[Admission], now: float) -> None:
        """Assume the admissions the writer has room for (:meth:`ClusterState.bind`; written
        when the reconcile is settled, by :meth:`_sink`); the rest are decided again later."""
        while self.evictions_waiting and self.room() > 0:
            waiting = self.evictions_waiting.pop(0)
            self._send_eviction(*waiting)
        room = self.room()
        for admission in admissions[room:]:
            self.blocked.add(admission.workload.name)
        if len(admissions) > room:
            self.writer.full()
        for admission in admissions[:room]:
            self.bind(admission, now)

    def _sink(self, change: Change) -> None:
        """An admission carried out is its status write, handed to the writer; the rest
        (preemptions, written by :meth:`evict`; pending reasons, warnings) is not written."""
        match change:
            case Admitted(workload=workload):
                name = workload.name
                t = self.tracked[name]
                self.writing[name] = Running(workload, change.assignment, change.at)
                self.admissions += 1
                cq = self._cluster_queue(workload.team)
                admission = Admission(workload, change.assignment, change.borrowed)
                body = admission_status(t.obj, admission, cq, rfc3339(time.time()))
                ns, wname = key_of(t.obj)
                self.writer.submit(name, self._patch(ns, wname, body))
            case Warned():
                log.debug("%s", change.message)
            case _:
                pass

    def _cluster_queue(self, team: str) -> str:
        return team  # fleetshare import kueue names each ClusterQueue's team after it

    def _patch(self, ns: str, name: str, body: dict[str, Any]) -> Any:
        def send(written: list[dict[str, Any]]) -> None:
            written.append(self.kube.patch(WORKLOADS, name, body, ns, sub="status"))

        return send

    def evict(self, workload: Workload, by: str, reason: str, message: str, now: float) -> None:
        """Preempt a workload admitted at an earlier reconcile: its eviction written (it
        leaves the view until the runner takes its reservation off); one whose admission
        write is outstanding waits again at once when the write is withdrawn, else is
        evicted once the write's answer is taken."""
        name = workload.name
        t = self.tracked.get(name)
        if t is None:
            self.cancel(name)
            return
        self.evictions += 1
        text = f"Preempted to accommodate {by}: {message or reason}"
        if name in self.writing:  # its admission is outstanding
            if self.writer.cancel(name):
                del self.writing[name]
                super().evict(workload, by, reason, message, now)  # waits again
            else:
                self.cancel(name)
                self.evict_after[name] = (reason, text)
            self.blocked.add(name)
            return
        self.cancel(name)
        t.phase = "evicting"
        self._send_eviction(name, t, reason, text)

    def _send_eviction(self, name: str, t: Tracked, reason: str, text: str) -> None:
        if name in self.evicting or any(w[0] == name for w in self.evictions_waiting):
            return  # its eviction is written or waiting already
        if self.room() <= 0:  # decided: written as soon as the writer has room
            self.evictions_waiting.append((name, t, reason, text))
            self.writer.full()
            return
        self.evicting.add(name)
        ns, wname = key_of(t.obj)
        body = eviction_status(t.obj, reason, text, rfc3339(time.time()))
        self.writer.submit(f"{name}#evict", self._patch(ns, wname, body))

    def report_pending(self, result: CycleResult, now: float) -> None:
        """No pending reason is kept or written (the runner's recorder reads none)."""
        return None

    def wake(self, at: float, now: float, *, unless_sooner: bool = False) -> None:
        """No timers here: the governor reconciles next at :attr:`wake_at` at the latest."""
        self.wake_at = at if self.wake_at is None else min(self.wake_at, at)


class Governor:
    """The watches, the loop and the ClusterQueue status writes (see the module docstring)."""

    def __init__(self, kube: Kube) -> None:
        from fleetshare.model.catalog import load_catalog
        from fleetshare.operator.budget import WriteBudget

        self.budget = WriteBudget(QUEUE_WRITES_PER_SECOND, int(QUEUE_WRITES_PER_SECOND))

        self.kube = kube
        self.store = Store()
        self.inbox: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.writer = AdmissionWriter(threads=32, limit=100,
                                      wake=lambda: self.inbox.put(("wake", "", None)))  # fmt: skip
        self.cluster = WorkloadCluster(kube, self.store, self.writer)
        self.catalog = load_catalog()
        self.cache = CycleCache()
        self.loop: ControlLoop | None = None
        self._policy_key: Any = None
        self._written: dict[str, QueueFigures] = {}
        self._last_write: dict[str, float] = {}
        self._queues_at = 0.0
        """The ClusterQueues' figures are not looked at again before this (monotonic)."""
        self.reconciles = 0

    def _engine(self) -> tuple[Engine | None, bool]:
        objects = [o for res in POLICY_KINDS for o in self.store.of(res.kind).values()]
        key = policy_key(objects)
        if key == self._policy_key and self.loop is not None:
            return self.loop.engine, False
        self._policy_key = key
        if not self.store.of("ClusterQueue") or not self.store.of("LocalQueue"):
            return None, False
        try:
            policy = policy_of(objects)
        except Exception as exc:  # a half-created set of queues: wait for the rest
            log.info("policy not ready: %s", exc)
            return (self.loop.engine if self.loop else None), False
        engine = Engine(policy, self.catalog)
        engine.cache = self.cache
        self.cluster.nodes = {n.name: n for n in quota_nodes(policy)}
        if self.loop is None:
            self.loop = ControlLoop(self.cluster, engine)
        else:
            self.loop.set_engine(engine)
        return engine, True

    def reconcile(self) -> float:
        """One turn; the monotonic time of the next."""
        engine, new = self._engine()
        clock = time.monotonic()
        if engine is None or self.loop is None:
            self.store.take_changes()
            return clock + 1.0
        self.cluster.wake_at = None
        now = time.time()
        if self.cluster.refresh(engine.policy, new):
            self.loop.world_changed()  # a submission, a finish: preempted work may try again
        self.loop.reconcile(now)
        self.reconciles += 1
        due = self._write_queues(clock)
        next_at = clock + 5.0
        if due is not None:
            next_at = min(next_at, due)
        if self.cluster.blocked:
            next_at = min(next_at, clock + 0.1)
        if self.cluster.wake_at is not None:
            next_at = min(next_at, clock + max(0.05, self.cluster.wake_at - now))
        return next_at

    def _write_queues(self, clock: float) -> float | None:
        """Write the ClusterQueues' status that changed, each at most every
        :data:`QUEUE_STATUS_SECONDS`, within :attr:`budget` (least recently written first);
        when the next one is due (None: none waits). The queues' figures walk every workload:
        they are looked at no more than ten times a second (and when a write falls due)."""
        if clock < self._queues_at:
            return self._queues_at
        by_team: dict[str, list[Running]] = {}
        for r in self.cluster.running.values():
            by_team.setdefault(r.workload.team, []).append(r)
        waiting: dict[str, int] = {}
        for w in self.cluster.pending.values():
            waiting[w.team] = waiting.get(w.team, 0) + 1
        changed = {}
        for (_, name), cq in self.store.of("ClusterQueue").items():
            figures = queue_figures(by_team.get(name, []), waiting.get(name, 0))
            if self._written.get(name) != figures:
                changed[name] = (cq, figures)
        self.budget.refill(clock)
        last = {name: self._last_write.get(name, -QUEUE_STATUS_SECONDS) for name in changed}
        room = int(self.budget.tokens)
        now_due, due = queues_due(last, clock, room)
        more = len(now_due) == room and len(queues_due(last, clock, room + 1)[0]) > room
        for name in now_due:
            cq, figures = changed[name]
            self.budget.take()
            try:
                self.store.put("ClusterQueue", self.kube.patch(
                    CLUSTER_QUEUES, name, queue_status(cq, figures, rfc3339(time.time())),
                    sub="status"))  # fmt: skip
                self._written[name] = figures
            except KubeError as exc:
                log.info("status of ClusterQueue %s not written: %s", name, exc)
            self._last_write[name] = clock
        after = self.budget.next_at() if more else None  # a ready one waits for the budget
        if after is not None:
            due = after if due is None else min(due, after)
        self._queues_at = clock + 0.1 if due is None else max(due, clock + 0.1)
        return due

    def run(self, stop: threading.Event) -> None:
        watch_stop = threading.Event()
        for res in (WORKLOADS, *POLICY_KINDS):
            Watcher(self.kube, res, self.inbox, watch_stop).start()
        deadline = 0.0
        try:
            while not stop.is_set():
                changed = self._drain(max(0.0, deadline - time.monotonic()))
                if changed or time.monotonic() >= deadline:
                    deadline = self.reconcile()
        finally:
            watch_stop.set()
            self.writer.close()

    def _drain(self, timeout: float) -> bool:
        try:
            message = self.inbox.get(timeout=min(timeout, 0.5)) if timeout > 0 \
                else self.inbox.get_nowait()  # fmt: skip
        except queue.Empty:
            return False
        changed = False
        while True:
            what, kind, payload = message
            if what == "wake":
                changed = True
            elif what == "sync":
                self.store.resync(kind, payload[0], payload[1])
                changed = True
            else:
                changed = self.store.apply(kind, *payload) or changed
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--qps", type=float, default=50.0, help="client limit (minimalkueue's)")
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--stats", type=Path, help="write the governor's counts here at the end")
    args, _ = parser.parse_known_args(argv)  # the runner's other flags are minimalkueue's
    logging.basicConfig(level=logging.WARNING)
    from fleetshare.operator.kube import load_client
    from kueue_perf_api import throttled

    kube = throttled(Kube(load_client(args.kubeconfig)), args.qps, args.burst)
    governor = Governor(kube)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    governor.run(stop)
    if args.stats:
        c = governor.cluster
        args.stats.write_text(json.dumps({
            "reconciles": governor.reconciles, "admissions": c.admissions,
            "evictions": c.evictions, "refused_writes": c.refused,
            "requests": dict(kube.counts.most_common()),
        }) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
