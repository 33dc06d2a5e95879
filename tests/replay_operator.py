"""Replay a scenario through the operator against the real API server, on a virtual clock.

The operator (:class:`~fleetshare.operator.controller.Operator`) runs on a
:class:`~fleetshare.control.clock.VirtualClock` in Unix seconds (``EPOCH`` plus the scenario's
time). The test plays the world: at each workload's submit time it creates the workload's
object, at its finish time it completes it, at a node event's time it cordons or uncordons
the node (``spec.unschedulable``, as an admin does) or turns its ``Ready`` condition False or
True (a node failing and recovering, as its kubelet reports it, with the not-ready taint the
node-lifecycle controller gives and takes), at a policy change's time it updates the objects
the operator governs from (the ClusterPolicy replaced, each Team replaced, added or deleted:
the operator reads no Kueue ClusterQueue or ResourceFlavor), and after each change it hands
the operator what a watch would have delivered (:func:`feed`: each changed object, in the API
server's order) and calls :meth:`Operator.reconcile` until a reconcile decides nothing more.

Where the operator must differ, and how the replay makes up for it:

- Its objects are JobSets (``jobset.x-k8s.io``: one replicated job per pod set, with the pod
  set's topology request as Kueue's template annotation), whose controller does not run here:
  admitting one is its unsuspension with each pod set's flavor node selector, and the
  placement is the one decided. A workload sent to a Kueue LocalQueue ``ns/name`` is a JobSet
  in namespace ``ns`` labelled with the queue's name (the namespace made if missing, with the
  scenario's labels, and kept, as Kueue's own test namespaces are); the others are in the
  replay's namespace, labelled with their team.
- With ``jobs`` (single pod set workloads), its objects are batch/v1 Jobs instead, run by the
  session's job controller, bound by kube-scheduler (the nodes offer room for pods) and run
  and finished by the fake kubelet, each in its own time: the replay waits for them on the
  wall clock at the same virtual instant (a finish: the Job's ``Complete`` condition; a
  preempted Job: until the operator, which keeps it out of the rest of the reconcile's cycles
  until the job controller has settled its suspension, takes it back). The cycles it runs
  meanwhile may admit other work into the room the preempted Job would have kept in its
  queue: the one way the streams may differ (``held_out`` in the test).
- The API server stamps an object's creation with its own wall clock, in whole seconds, and the
  operator takes that as the submit time. The replay runs faster than real time, so its client
  (:class:`VirtualTimeKube`) shows each object's ``creationTimestamp`` as its submit time on the
  virtual clock: only that field, only on the objects the replay created.
- Its writes are sent before its reconcile ends (``writes_in_flight=0``). Live, the loop counts
  an admission as soon as it hands the write to its writer and takes the answer at a later
  reconcile (write latency); in line, every answer is in before the clock moves on, which is
  what the simulator assumes. Live, the operator reconciles again when the watches bring its
  own writes back; the replay too reconciles again at the same instant, until a reconcile
  decides nothing more.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleetshare.control.changes import Admitted, Preempted
from fleetshare.control.clock import VirtualClock
from fleetshare.manifests.kinds.base import QUEUE_LABEL, TEAM_LABEL
from fleetshare.manifests.parse import FLEETSHARE_PRIORITY_LABEL
from fleetshare.model.node import Node
from fleetshare.model.workload import PodSet, Workload
from fleetshare.operator.controller import CLUSTER_POLICIES, TEAMS, Operator, Settings
from fleetshare.operator.crds import policy_objects
from fleetshare.operator.kinds import RESOURCES
from fleetshare.operator.kube import JOBS, NODES, PODS, Kube, KubeError, Resource
from fleetshare.operator.watch import Key, key_of
from fleetshare.policy.schema import Policy
from fleetshare.scenario.loader import Scenario
from fleetshare.scenario.schema import NodeEvent
from tests.decision_stream import Recorder
from tests.kube_harness import NAMESPACES, Harness, apply_policy, mark_ready

EPOCH = 1_800_000_000.0
"""The virtual clock's zero, in Unix seconds (whole: scenario times add to it exactly)."""
JOBSETS = RESOURCES["JobSet"]
OWNER = "fleetshare-test"
MAX_RECONCILES_PER_INSTANT = 20
JOB_CONTROLLER_SECONDS = 30.0
"""How long (wall clock) the replay waits for the job controller, kube-scheduler and the
fake kubelet to carry out an admission, a preemption or a finish of a batch/v1 Job."""
TOPOLOGY_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TOPOLOGY_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"


def rfc3339(unix: float) -> str:
    """Unix seconds as Kubernetes writes a time (microseconds when not whole)."""
    moment = datetime.fromtimestamp(unix, UTC)
    if moment.microsecond:
        return moment.isoformat().replace("+00:00", "Z")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class VirtualTimeKube(Kube):
    """An API client showing the objects in :attr:`created` (by namespace and name) with
    their creation time on the virtual clock instead of the API server's wall clock."""

    def __init__(self, api: Any) -> None:
        super().__init__(api)
        self.created: dict[Key, str] = {}

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        out = super().request(method, path, **kwargs)
        if isinstance(out, dict):
            for obj in out.get("items") or (out,):
                self._stamp(obj)
        return out

    def _stamp(self, obj: Any) -> None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if isinstance(meta, dict):
            stamp = self.created.get(key_of(obj))
            if stamp is not None:
                meta["creationTimestamp"] = stamp


@dataclass
class World:
    """One scenario on the API server: its namespace, its nodes' names there, and the
    operator replaying it."""

    harness: Harness
    namespace: str
    queues: tuple[str, ...]
    """The namespaces of the LocalQueues the scenario's workloads are sent to."""
    kube: VirtualTimeKube
    operator: Operator
    clock: VirtualClock
    durations: dict[str, float | None] = field(default_factory=dict)
    """Each workload's run time (the scenario's: the objects do not say it)."""
    recorder: Recorder | None = None
    finish_at: dict[str, float] = field(default_factory=dict)
    """When each running workload finishes (virtual clock), by its scenario name."""
    where: dict[str, str] = field(default_factory=dict)
    """Each workload's namespace, by its scenario name."""
    jobs: bool = False
    """The workloads are batch/v1 Jobs (else JobSets)."""

    @property
    def kind(self) -> tuple[str, Resource]:
        """The kind of the workloads' objects and its resource."""
        return ("Job", JOBS) if self.jobs else ("JobSet", JOBSETS)

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Where the scenario's objects are (the operator watches these)."""
        return (self.namespace, *self.queues)

    def rename(self, name: str) -> str:
        """A workload's or node's name in the scenario's words (the operator names a Job's
        workload ``ns/name``, a JobSet's ``ns/JobSet/name``)."""
        namespace, _, short = name.partition("/")
        if namespace in self.namespaces:
            return short.removeprefix("JobSet/") if not self.jobs else short
        return name.removeprefix(f"{self.namespace}-")

    def node_name(self, node: str) -> str:
        return f"{self.namespace}-{node}"

    def namespace_of(self, wl: Workload) -> str:
        """Where the workload's JobSet is: its LocalQueue's namespace, or the replay's."""
        return wl.namespace or self.namespace


def node_object(node: Node, name: str, owner: str) -> dict[str, Any]:
    labels = {**node.all_labels(), OWNER: owner}
    if node.capacity_type != "on-demand":
        labels["karpenter.sh/capacity-type"] = node.capacity_type
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints, "unschedulable": node.unschedulable},
    }  # fmt: skip


def node_status(node: Node, pods: bool = False) -> dict[str, Any]:
    """Its allocatable (as the scenario has it: no ``pods``, unless ``pods``: room for 110
    pods, for kube-scheduler to bind a Job's pods) and its Ready condition."""
    now = rfc3339(EPOCH)
    allocatable = {r: f"{v}m" for r, v in node.allocatable.items()}
    if pods:
        allocatable["pods"] = "110"
    return {
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if node.ready else "False",
                            "reason": "KubeletReady", "lastHeartbeatTime": now,
                            "lastTransitionTime": now}],
        }
    }  # fmt: skip


def podset_job(podset: PodSet) -> dict[str, Any]:
    """A replicated job of one pod set: its pods, requests, node selector, tolerations and
    topology request (Kueue's pod template annotations)."""
    requests = {r: f"{v}m" for r, v in podset.requests.items()}
    extended = {r: q for r, q in requests.items() if "/" in r}
    container = {"name": "main", "image": "registry.example/train:1",
                 "resources": {"requests": requests, "limits": extended}}  # fmt: skip
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if podset.node_selector:
        pod["nodeSelector"] = dict(podset.node_selector)
    if podset.tolerations:
        pod["tolerations"] = [
            {k: v for k, v in (("key", t.key), ("operator", t.operator), ("value", t.value),
                               ("effect", t.effect)) if v}
            for t in podset.tolerations
        ]  # fmt: skip
    template: dict[str, Any] = {"spec": pod}
    topology = {TOPOLOGY_REQUIRED: podset.required_topology,
                TOPOLOGY_PREFERRED: podset.preferred_topology}  # fmt: skip
    if any(topology.values()):
        template["metadata"] = {"annotations": {k: v for k, v in topology.items() if v}}
    return {
        "name": podset.name, "replicas": 1,
        "template": {"spec": {"parallelism": podset.count, "completions": podset.count,
                              "template": template}},
    }  # fmt: skip


def governing_labels(wl: Workload) -> dict[str, str]:
    """Its LocalQueue's name (Kueue's label) or its team (fleetshare's), its priority class."""
    local = wl.queue.partition("/")[2] if wl.queue is not None else ""
    labels = {QUEUE_LABEL: local} if local else {TEAM_LABEL: wl.team}
    if wl.priority_class is not None:
        labels[FLEETSHARE_PRIORITY_LABEL] = wl.priority_class
    return labels


def batch_job(wl: Workload, namespace: str) -> dict[str, Any]:
    """The workload (one pod set) as a suspended batch/v1 Job in ``namespace``."""
    (podset,) = wl.podsets
    spec = podset_job(podset)["template"]["spec"]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": wl.name, "namespace": namespace, "labels": governing_labels(wl)},
        "spec": {**spec, "suspend": True},
    }  # fmt: skip


def jobset(wl: Workload, namespace: str) -> dict[str, Any]:
    """The workload's JobSet in ``namespace``: sent to its LocalQueue, or to its team."""
    labels = governing_labels(wl)
    return {
        "apiVersion": JOBSETS.group_version, "kind": "JobSet",
        "metadata": {"name": wl.name, "namespace": namespace, "labels": labels},
        "spec": {"suspend": True, "replicatedJobs": [podset_job(ps) for ps in wl.podsets]},
    }  # fmt: skip


def _version(obj: Mapping[str, Any]) -> int:
    return int(str((obj.get("metadata") or {}).get("resourceVersion") or 0))


def feed(world: World, kind: str, res: Resource, **query: Any) -> None:
    """What a watch of ``res`` would deliver to the operator's store now: each object added,
    changed or deleted since it was last fed, in the API server's order (the objects the
    replay created in the order it created them)."""
    store = world.operator.store
    namespaces = world.namespaces if res.namespaced else (None,)
    items = [i for ns in namespaces for i in world.kube.list(res, ns, **query)[0]]
    if kind == "Namespace":
        items = [i for i in items if i["metadata"]["name"] in world.namespaces]
    known = store.of(kind)
    fresh = {key_of(i): i for i in items}
    for key in [k for k in known if k not in fresh]:
        store.apply(kind, "DELETED", known[key])
    # a watch delivers each object's ADDED in creation order (the job controller's later
    # status writes may have changed their resource versions' order)
    created = {k: i for i, k in enumerate(world.kube.created)}
    for item in sorted(items, key=lambda i: (created.get(key_of(i), -1), _version(i))):
        old = known.get(key_of(item))
        if old is None or _version(old) < _version(item):
            store.apply(kind, "ADDED" if old is None else "MODIFIED", item)


def feed_all(world: World) -> None:
    """Everything the operator watches that a replay changes."""
    feed(world, "Node", NODES, labelSelector=f"{OWNER}={world.namespace}")
    feed(world, "Namespace", NAMESPACES)
    feed(world, "ClusterPolicy", CLUSTER_POLICIES)
    feed(world, "Team", TEAMS)
    feed_work(world)


def feed_work(world: World) -> None:
    """The workloads' objects (and a Job's pods)."""
    feed(world, *world.kind)
    if world.jobs:
        feed(world, "Pod", PODS)


def label_namespace(harness: Harness, name: str, labels: Mapping[str, str]) -> None:
    """Namespace ``name`` made if missing, with ``labels`` (the scenario's) and no others
    but the API server's own (what a namespace selector matches; another scenario or test
    may use the same namespace later)."""
    harness.ensure_namespace(name)
    old = harness.kube.get(NAMESPACES, name)["metadata"].get("labels") or {}
    gone = {k: None for k in old if k not in labels and not k.startswith("kubernetes.io/")}
    harness.kube.patch(NAMESPACES, name, {"metadata": {"labels": {**gone, **labels}}})


@contextlib.contextmanager
def world_for(harness: Harness, scenario: Scenario, jobs: bool = False) -> Iterator[World]:
    """The scenario's policy, nodes and namespace on the API server, and an operator for it
    (no leader election, writes in line); all of it removed at the end."""
    harness.delete_cluster_objects()
    namespace = harness.new_namespace("agree")
    queues = tuple(sorted({ns for ns in (w.namespace for w in scenario.workloads) if ns}))
    labelled = {n.name: n.labels for n in scenario.spec.cluster.namespaces}
    for queue_namespace in queues:
        label_namespace(harness, queue_namespace, labelled.get(queue_namespace, {}))
    kube = VirtualTimeKube(harness.kube.api)  # the harness's connections, set up once
    clock = VirtualClock(EPOCH)
    settings = Settings(namespaces=(namespace, *queues), install_crds=False, leader_elect=False,
                        writes_in_flight=0, scaled_objects=False)  # fmt: skip
    operator = Operator(kube, settings, scenario.catalog, clock=clock)
    world = World(harness, namespace, queues, kube, operator, clock, jobs=jobs)
    try:
        apply_policy(harness, scenario.policy)
        for node in scenario.nodes:
            name = world.node_name(node.name)
            body = node_object(node, name, namespace)
            harness.kube.create(NODES, body)
            harness.kube.patch(NODES, name, node_status(node, jobs), sub="status")
            # the API server tainted it not-ready at creation (it had no Ready condition);
            # the node-lifecycle controller, not run here, would take the taint off
            harness.kube.patch(NODES, name, {"spec": {"taints": body["spec"]["taints"]}})
        yield world
    finally:
        operator.cluster.close()
        operator.events.close()
        harness.delete_nodes(namespace)
        for ns in world.namespaces:  # the queues' kept, unlabelled: the objects go
            for res in (JOBSETS, JOBS):
                for item in harness.kube.list(res, ns)[0]:
                    with contextlib.suppress(KubeError):
                        harness.kube.delete(res, item["metadata"]["name"], ns,
                                            propagationPolicy="Background")  # fmt: skip
        for queue_namespace in queues:
            label_namespace(harness, queue_namespace, {})
        with contextlib.suppress(KubeError):
            harness.kube.delete(NAMESPACES, namespace)
        harness.delete_cluster_objects()


def settle(world: World) -> None:
    """Reconcile at this instant until a reconcile decides nothing more and nothing waits
    for a later one (a preempted Job whose suspension must settle, a refused write)."""
    operator = world.operator
    deadline = time.monotonic() + JOB_CONTROLLER_SECONDS
    reconciles = 0
    while reconciles < MAX_RECONCILES_PER_INSTANT:
        feed_work(world)
        recorder = world.recorder
        before = len(recorder.changes) if recorder is not None else 0
        operator.reconcile()
        if recorder is None:
            return
        new = recorder.changes[before:]
        for change in new:
            if isinstance(change, Admitted):
                duration = world.durations[world.rename(change.workload.name)]
                if duration is not None:
                    world.finish_at[world.rename(change.workload.name)] = change.at + duration
            elif isinstance(change, Preempted):
                world.finish_at.pop(world.rename(change.workload), None)
        cluster = operator.cluster
        if not new and not cluster.blocked and not cluster.retry_soon:
            return
        if world.jobs and not new and cluster.blocked and time.monotonic() < deadline:
            time.sleep(0.1)  # a preempted Job: the job controller settles its suspension
            continue
        reconciles += 1
    raise AssertionError(f"t={world.clock.now() - EPOCH:g}: still deciding after "
                         f"{MAX_RECONCILES_PER_INSTANT} reconciles")  # fmt: skip


def complete(world: World, name: str) -> None:
    """The JobSet of workload ``name`` finished (its ``Completed`` condition); a Job's pods
    succeed (the fake kubelet, once they run) and the job controller completes it."""
    if world.jobs:
        finish_job(world, name)
        return
    now = rfc3339(world.clock.now())
    condition = {"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                 "message": "jobset completed successfully", "lastTransitionTime": now}  # fmt: skip
    world.kube.patch(JOBSETS, name, {"status": {"conditions": [condition]}},
                     world.where[name], sub="status")  # fmt: skip


def finish_job(world: World, name: str) -> None:
    """Job ``name``'s pods succeed once they run; wait until the job controller says so."""
    harness, namespace = world.harness, world.where[name]
    deadline = time.monotonic() + JOB_CONTROLLER_SECONDS
    told = False
    while time.monotonic() < deadline:
        job = harness.kube.get(JOBS, name, namespace)
        status = job.get("status") or {}
        if any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in status.get("conditions") or ()):  # fmt: skip
            return
        wanted = job["spec"].get("parallelism", 1)
        if not told and status.get("active") == wanted and status.get("ready") == wanted:
            told = harness.kubelet.finish_job(namespace, name) == wanted
        time.sleep(0.1)
    raise AssertionError(f"Job {name} did not complete in {JOB_CONTROLLER_SECONDS:g} s")


def node_event(world: World, event: NodeEvent) -> None:
    """An admin cordons or uncordons the event's nodes; or they fail or recover (their
    kubelets report ``Ready`` False or True, and the not-ready taint comes and goes as the
    node-lifecycle controller, not run here, would have it). Nothing else is replayed."""
    for node in event.nodes:
        name = world.node_name(node)
        if event.action in ("cordon", "uncordon"):
            body = {"spec": {"unschedulable": event.action == "cordon"}}
            world.harness.kube.patch(NODES, name, body)
        elif event.action in ("fail", "recover"):
            mark_ready(world.harness.kube, name, event.action == "recover")
        else:
            raise ValueError(f"the replay cordons, uncordons, fails and recovers nodes, "
                             f"not {event.action!r}")  # fmt: skip


def change_policy(world: World, policy: Policy) -> None:
    """An admin applies ``policy``: the ClusterPolicy and each Team replaced (as ``kubectl
    replace`` does), the new Teams created and the Teams it no longer has deleted."""
    kube = world.harness.kube
    teams = {t["metadata"]["name"]: t for t in kube.list(TEAMS)[0]}
    for obj in policy_objects(policy):
        res = CLUSTER_POLICIES if obj["kind"] == "ClusterPolicy" else TEAMS
        name = obj["metadata"]["name"]
        old = teams.pop(name, None) if res is TEAMS else kube.get(CLUSTER_POLICIES, name)
        if old is None:
            kube.create(res, obj)
        else:
            version = old["metadata"]["resourceVersion"]
            kube.replace(res, name, {**obj, "metadata": {"name": name, "resourceVersion": version}})
    for name in teams:
        kube.delete(TEAMS, name)
    feed(world, "ClusterPolicy", CLUSTER_POLICIES)
    feed(world, "Team", TEAMS)


def replay(harness: Harness, scenario: Scenario, until: float, jobs: bool = False) -> World:
    """Replay ``scenario``'s workloads (as batch/v1 Jobs with ``jobs``) up to ``until`` (see
    the module docstring); the world, its recorder holding what the operator's loop
    decided."""
    with world_for(harness, scenario, jobs) as world:
        feed_all(world)
        world.operator.reconcile()  # the loop is made with the policy: nothing to decide yet
        assert world.operator.loop is not None, "the policy objects are not valid"
        world.recorder = Recorder.attach(world.operator.loop, world.clock.now)
        world.durations = {w.name: w.duration for w in scenario.workloads}
        order = sorted(range(len(scenario.workloads)),
                       key=lambda i: (scenario.workloads[i].submit_time, i))  # fmt: skip
        queue = [scenario.workloads[i] for i in order]
        # at one instant, as the runner: node events, then policy changes, in their order
        events: list[tuple[float, NodeEvent | Policy]] = sorted(
            [*((e.at, e) for e in scenario.events), *scenario.policy_changes],
            key=lambda item: (item[0], isinstance(item[1], Policy)),
        )
        while True:
            now = world.clock.now()
            times = [t for t in world.finish_at.values()]
            wake = world.operator.cluster.wake_at
            if wake is not None and wake > now:
                times.append(wake)
            if queue:
                times.append(EPOCH + queue[0].submit_time)
            if events:
                times.append(EPOCH + events[0][0])
            if not times or min(times) - EPOCH > until:
                break
            now = max(min(times), now)
            world.clock.advance_to(now)
            for name, at in sorted(world.finish_at.items(), key=lambda item: item[1]):
                if at <= now:
                    del world.finish_at[name]
                    complete(world, name)
            if events and EPOCH + events[0][0] <= now:
                while events and EPOCH + events[0][0] <= now:
                    _, event = events.pop(0)
                    if isinstance(event, Policy):
                        change_policy(world, event)
                    else:
                        node_event(world, event)
                feed(world, "Node", NODES, labelSelector=f"{OWNER}={world.namespace}")
            while queue and EPOCH + queue[0].submit_time <= now:
                wl = queue.pop(0)
                namespace = world.where[wl.name] = world.namespace_of(wl)
                world.kube.created[(namespace, wl.name)] = rfc3339(EPOCH + wl.submit_time)
                res = world.kind[1]
                body = batch_job(wl, namespace) if world.jobs else jobset(wl, namespace)
                harness.kube.create(res, body, namespace)
            settle(world)
        return world
