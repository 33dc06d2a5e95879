"""The operator's incremental view decides as the plain one does, without an API server.

Two operators watch the same world: one follows the watches' changes and carries the
engine's state between cycles (the default), the other reads every object at every
reconcile with a fresh engine state (``incremental=False``). A small deterministic world
reacts to each operator's writes: a job controller that creates a pod (and, once the Job is
suspended, deletes it and writes the start time back after the operator cleared it, as a
lagging controller can), a scheduler that binds it where it fits, a kubelet that finishes
it, a node going NotReady and coming back, Jobs with priorities that reclaim and preempt.
After every reconcile both worlds, views and pending reasons must be the same.
"""

from __future__ import annotations

import calendar
import copy
import json
import time
from typing import Any

from fleetshare.control.loop import ControlLoop
from fleetshare.governance.admission import CycleCache, Engine
from fleetshare.model.catalog import load_catalog
from fleetshare.operator.cluster import KubeCluster
from fleetshare.operator.events import Events
from fleetshare.operator.kube import KubeError, Resource
from fleetshare.operator.objects import ADMISSION
from fleetshare.operator.watch import Store
from fleetshare.policy.schema import Policy, load_policy

T0 = 1_800_000_000  # Unix seconds of the world's t = 0


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 + t))


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def _json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    for op in ops:
        *parents, last = _pointer(op["path"])
        where = obj
        for part in parents:
            where = where[part]
        if op["op"] == "test":
            if where.get(last) != op["value"]:
                raise KubeError(422, "Invalid", "test failed")
        elif op["op"] in ("add", "replace"):
            where[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del where[last]


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


class FakeKube:
    """Answers patches as the API server does (conditional on the resourceVersion; a
    spec change bumps the generation); objects live in the world's store."""

    def __init__(self, world: World) -> None:
        self.world = world

    def patch(self, res: Resource, name: str, body: Any, namespace: str | None = None,
              sub: str = "", **_: Any) -> dict[str, Any]:  # fmt: skip
        obj = copy.deepcopy(self.world.store.of(res.kind)[(namespace or "", name)])
        spec = copy.deepcopy(obj.get("spec"))
        if isinstance(body, list):
            _json_patch(obj, body)
        else:
            body = copy.deepcopy(body)
            version = (body.get("metadata") or {}).pop("resourceVersion", None)
            if version is not None and version != obj["metadata"]["resourceVersion"]:
                raise KubeError(409, "Conflict", "the object has been modified")
            _merge(obj, body)
        if obj.get("spec") != spec:
            obj["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
        return self.world.save(res.kind, obj)

    def create(self, *args: Any, **kwargs: Any) -> None:  # Events
        return None


class World:
    """One operator and the world it governs (see the module docstring)."""

    def __init__(self, policy: Policy, *, incremental: bool) -> None:
        self.store = Store()
        self.version = 0
        self.kube = FakeKube(self)
        self.cluster = KubeCluster(self.kube, self.store, Events(self.kube),  # type: ignore[arg-type]
                                   writes_in_flight=0, incremental=incremental)  # fmt: skip
        self.engine = Engine(policy, load_catalog())
        self.engine.cache = CycleCache() if incremental else None
        self.loop = ControlLoop(self.cluster, self.engine)
        self.durations: dict[str, float] = {}
        self.started: dict[str, str] = {}

    def save(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.store.put(kind, copy.deepcopy(obj))
        return obj

    def node(self, name: str, ready: bool) -> None:
        self.save("Node", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"u-{name}"},
            "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": str(ready)}]},
        })  # fmt: skip

    def job(self, name: str, team: str, cpu: int, priority: str, t: float, run: float) -> None:
        self.durations[name] = run
        self.save("Job", {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "generation": 1,
                         "creationTimestamp": _stamp(t),
                         "labels": {"fleetshare.io/team": team,
                                    "fleetshare.io/priority-class": priority}},
            "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "m", "image": "x",
                                "resources": {"requests": {"cpu": str(cpu)}}}],
            }}},
        })  # fmt: skip

    def controllers(self, t: float) -> None:
        """The job controller and the kubelet: pods for unsuspended Jobs on the admitted
        node, gone for suspended ones, done after their running time; Jobs complete."""
        pods = self.store.of("Pod")
        for (ns, name), job in list(self.store.of("Job").items()):
            status = job.get("status") or {}
            if any(c.get("type") == "Complete" for c in status.get("conditions") or ()):
                continue
            pod = pods.get((ns, f"{name}-pod"))
            if job["spec"]["suspend"]:  # as the real one: pods go, the start time stays
                if pod is not None:
                    self.store.remove("Pod", pod)
                if status.get("active"):
                    job = copy.deepcopy(job)
                    job["status"] = {"startTime": self.started[name], "conditions": [
                        {"type": "Suspended", "status": "True"}]}  # fmt: skip
                    self.save("Job", job)
                continue
            if pod is None:  # created now, bound by the scheduler at the next step
                self.save("Pod", {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-pod", "namespace": ns, "uid": f"u-{name}-pod",
                                 "creationTimestamp": _stamp(t),
                                 "ownerReferences": [{"kind": "Job", "uid": job["metadata"]["uid"],
                                                      "name": name}]},
                    "spec": {"containers": job["spec"]["template"]["spec"]["containers"]},
                    "status": {"phase": "Pending"},
                })  # fmt: skip
                job = copy.deepcopy(job)
                self.started[name] = _stamp(t)
                job["status"] = {"startTime": _stamp(t), "active": 1}
                self.save("Job", job)
            elif not pod["spec"].get("nodeName"):
                pod = copy.deepcopy(pod)
                pod["spec"]["nodeName"] = self._room(pod)
                pod["status"] = {"phase": "Running", "startTime": _stamp(t)}
                self.save("Pod", pod)
            elif pod["status"]["phase"] == "Running" and self._done(name, pod, t):
                pod = copy.deepcopy(pod)
                pod["status"]["phase"] = "Succeeded"
                self.save("Pod", pod)
                job = copy.deepcopy(job)
                job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
                self.save("Job", job)

    def _done(self, name: str, pod: dict[str, Any], t: float) -> bool:
        return t - _seconds(pod["status"]["startTime"]) >= self.durations[name]

    def _room(self, pod: dict[str, Any]) -> str:
        """The scheduler: the last Ready node (by name) with room for the pod, whatever
        node the admission planned (governance counts where pods really run)."""
        cpu = _cpu(pod)
        for node in sorted(self.store.of("Node").values(), key=lambda n: n["metadata"]["name"],
                           reverse=True):  # fmt: skip
            name = node["metadata"]["name"]
            used = sum(
                _cpu(p)
                for p in self.store.of("Pod").values()
                if p["spec"].get("nodeName") == name and p["status"]["phase"] == "Running"
            )
            ready = node["status"]["conditions"][0]["status"] == "True"
            if ready and used + cpu <= 8:
                return str(name)
        return "n0"

    def turn(self, t: float) -> dict[str, Any]:
        """One reconcile; what it decided and the view it left."""
        self.cluster.refresh(self.engine, t)
        self.loop.reconcile(t)
        last = self.loop.last_cycle
        assert last is not None
        jobs = {
            name: (
                job["spec"]["suspend"],
                (job["metadata"].get("annotations") or {}).get(ADMISSION),
            )
            for (_, name), job in self.store.of("Job").items()
        }
        return {
            "jobs": jobs,
            "pending": sorted(self.cluster.pending),
            "running": {n: (r.assignment, r.admitted_at) for n, r in self.cluster.running.items()},
            "reasons": {n: p.reason for n, p in last.pending.items()},
            "nodes": [(n.name, n.ready) for n in self.cluster.node_list()],
        }


def _seconds(stamp: str) -> float:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - T0


COMPLETE = {"type": "Complete", "status": "True"}


def _cpu(pod: dict[str, Any]) -> int:
    return int(pod["spec"]["containers"][0]["resources"]["requests"]["cpu"])


POLICY = {
    "cluster": {"priority_classes": [{"name": "low", "weight": 10}, {"name": "high", "weight": 20}],
                "fair_share": False},
    "teams": [
        {"name": "a", "quota": [{"resources": {"cpu": 8}}], "borrow_limits": [{"absolute": 8}]},
        {"name": "b", "quota": [{"resources": {"cpu": 8}}], "borrow_limits": [{"absolute": 8}]},
    ],
}  # fmt: skip


def test_incremental_view_decides_as_the_plain_view() -> None:
    policy = load_policy(POLICY)
    worlds = [World(policy, incremental=True), World(policy, incremental=False)]
    for w in worlds:
        w.node("n0", True)
        w.node("n1", True)
    arrivals = [  # (time, name, team, cpu, priority, running time)
        (0, "a-1", "a", 4, "low", 20), (0, "a-2", "a", 4, "low", 20), (1, "a-3", "a", 6, "low", 6),
        (2, "a-4", "a", 2, "low", 3), (3, "b-1", "b", 6, "high", 5), (3, "b-2", "b", 2, "low", 4),
        (5, "a-5", "a", 2, "high", 2), (8, "b-3", "b", 4, "high", 3), (9, "a-6", "a", 8, "low", 2),
        (12, "b-4", "b", 2, "low", 1), (12, "b-5", "b", 2, "low", 1), (20, "a-7", "a", 4, "low", 1),
    ]  # fmt: skip
    seen_admitted, seen_preempted = set(), False
    for t in range(60):
        for w in worlds:
            for at, name, team, cpu, priority, run in arrivals:
                if at == t:
                    w.job(name, team, cpu, priority, float(t), float(run))
            if t == 10:
                w.node("n1", False)  # its work is evicted and queued again
            if t == 16:
                w.node("n1", True)
            w.controllers(float(t))
        fast, plain = (w.turn(float(t)) for w in worlds)
        assert fast == plain, f"t={t}"
        seen_admitted |= {n for n, (suspended, _) in fast["jobs"].items() if not suspended}
        seen_preempted = seen_preempted or any(
            "last-eviction" in json.dumps(j) for j in worlds[0].store.of("Job").values()
        )
    assert seen_admitted == {name for _, name, *_ in arrivals}  # every job ran
    assert seen_preempted  # the node failure (and priorities) made the view requeue work
    for w in worlds:  # every job completed, none left behind (a suspended one stuck)
        assert not w.cluster.pending and not w.cluster.running
        assert all((j.get("status") or {}).get("conditions") == [COMPLETE]
                   for j in w.store.of("Job").values())  # fmt: skip


def test_jobs_created_in_the_same_second_go_in_the_order_they_were_created() -> None:
    """creationTimestamp counts whole seconds: of two Jobs made in one second, the one the
    API server created first (the watch's order; after a restart, the list's by
    resourceVersion) is admitted first, whatever their names and uids."""
    policy = load_policy(POLICY)
    for incremental in (True, False):
        world = World(policy, incremental=incremental)
        world.node("n0", True)
        world.job("z-first", "a", 8, "low", 0.0, 10.0)  # u-z-first: also the later uid
        world.job("a-second", "a", 8, "low", 0.0, 10.0)
        jobs = world.turn(0.0)["jobs"]
        assert (jobs["z-first"][0], jobs["a-second"][0]) == (False, True)

    # a restarted operator lists them (in name order) and keeps creation order
    world = World(policy, incremental=True)
    world.node("n0", True)
    world.job("z-first", "a", 8, "low", 0.0, 10.0)
    world.job("a-second", "a", 8, "low", 0.0, 10.0)
    listed = sorted(world.store.of("Job").values(), key=lambda j: j["metadata"]["name"])
    world.store = Store()
    world.cluster.store = world.store
    world.store.replace("Node", [])
    world.node("n0", True)
    world.store.replace("Job", listed)
    jobs = world.turn(0.0)["jobs"]
    assert (jobs["z-first"][0], jobs["a-second"][0]) == (False, True)
