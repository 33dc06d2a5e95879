"""How the operator spends its writes at scale, without an API server: pending reasons are
written within a budget (a burst, then a rate), oldest first, and catch up over the next
reconciles."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from fleetshare.control.loop import ControlLoop
from fleetshare.governance.admission import Engine
from fleetshare.model.catalog import load_catalog
from fleetshare.operator.cluster import KubeCluster
from fleetshare.operator.events import Events
from fleetshare.operator.objects import PENDING_REASON
from fleetshare.operator.watch import Store
from fleetshare.policy.schema import load_policy


class RecordingKube:
    """Answers merge patches as the API server would (annotations merged, version bumped)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.patched: list[str] = []
        self.version = 100

    def patch(self, res: Any, name: str, body: dict[str, Any], namespace: str | None = None,
              **_: Any) -> dict[str, Any]:  # fmt: skip
        self.patched.append(name)
        obj = dict(self.store.of("Job")[(namespace or "", name)])
        meta = dict(obj["metadata"])
        meta["annotations"] = {**(meta.get("annotations") or {}),
                               **body["metadata"]["annotations"]}  # fmt: skip
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        obj["metadata"] = meta
        return obj

    def create(self, *args: Any, **kwargs: Any) -> None:  # Events
        return None


def _job(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"j{i:03d}", "namespace": "ns", "resourceVersion": str(i + 1),
                     "creationTimestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
                     "labels": {"fleetshare.io/team": "t"}},
        "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": "2"}}}],
        }}},
    }  # fmt: skip


@pytest.mark.parametrize("in_flight", [100, 0], ids=["background", "in line"])
def test_pending_reasons_are_written_within_a_budget_oldest_first(in_flight: int) -> None:
    """Written in the background (the default: a slow API server holds up no admission
    cycle) or in line, the same reasons go out, oldest first, each once."""
    policy = load_policy({"teams": [{"name": "t", "quota": [{"resources": {"cpu": 64}}]}]})
    engine = Engine(policy, load_catalog())
    store = Store()
    for i in range(120):  # 2 CPU each, on a 1-CPU node: all wait
        store.put("Job", _job(i))
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n"},
        "status": {
            "allocatable": {"cpu": "1", "memory": "256Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    store.put("Node", node)
    kube = RecordingKube(store)
    cluster = KubeCluster(kube, store, Events(kube), pending_writes=50,  # type: ignore[arg-type]
                          pending_writes_per_second=5.0, writes_in_flight=in_flight)  # fmt: skip
    assert (cluster.notes is None) == (in_flight == 0)

    def settled() -> None:  # the background writes answered
        deadline = time.monotonic() + 10
        while cluster.notes is not None and not cluster.notes.idle():
            assert time.monotonic() < deadline
            time.sleep(0.01)

    loop = ControlLoop(cluster, engine)
    for now in (0.0, 4.0, 30.0):  # a burst of 50; 4 s later 20 more; a full burst again
        cluster.refresh(engine, now)
        loop.reconcile(now)
        settled()
        n = {0.0: 50, 4.0: 70, 30.0: 120}[now]
        assert sorted(kube.patched) == [f"j{i:03d}" for i in range(n)]  # oldest first, once
    if in_flight == 0:
        assert kube.patched == [f"j{i:03d}" for i in range(120)]  # one by one, in order
    cluster.refresh(engine, 60.0)  # the answers are kept
    reasons = {o["metadata"]["annotations"][PENDING_REASON] for o in store.of("Job").values()}
    assert all(reasons)
    loop.reconcile(60.0)
    settled()
    assert len(kube.patched) == 120  # nothing changed: nothing rewritten


def test_a_pending_reason_refused_in_the_background_is_said_again() -> None:
    """The background write carries the resourceVersion the decision saw; the API refuses
    it once (409: the Job moved). The reason is not lost: the next reconcile writes it."""
    from fleetshare.operator.kube import KubeError

    policy = load_policy({"teams": [{"name": "t", "quota": [{"resources": {"cpu": 64}}]}]})
    engine = Engine(policy, load_catalog())
    store = Store()
    store.put("Job", _job(0))
    ready = [{"type": "Ready", "status": "True"}]
    allocatable = {"cpu": "1", "memory": "1Gi", "pods": "9"}
    store.put("Node", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                       "status": {"allocatable": allocatable, "conditions": ready}})  # fmt: skip
    bodies: list[dict[str, Any]] = []

    class RefusingOnce(RecordingKube):
        def patch(self, res: Any, name: str, body: dict[str, Any], namespace: str | None = None,
                  **kw: Any) -> dict[str, Any]:  # fmt: skip
            bodies.append(body)
            if len(bodies) == 1:
                raise KubeError(409, "Conflict", "the object has been modified")
            return super().patch(res, name, body, namespace, **kw)

    kube = RefusingOnce(store)
    cluster = KubeCluster(kube, store, Events(kube))  # type: ignore[arg-type]
    loop = ControlLoop(cluster, engine)
    for now in (0.0, 1.0):
        cluster.refresh(engine, now)
        loop.reconcile(now)
        assert cluster.notes is not None
        deadline = time.monotonic() + 10
        while not cluster.notes.idle():
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert [b["metadata"]["resourceVersion"] for b in bodies] == ["1", "1"]
    assert kube.patched == ["j000"]  # the second landed
    cluster.refresh(engine, 2.0)
    assert store.of("Job")[("ns", "j000")]["metadata"]["annotations"][PENDING_REASON]


def test_a_restarted_operator_writes_no_reason_the_objects_already_show() -> None:
    """A new operator remembers nothing of the last one: each waiting Job's reason is new to
    its cluster state, but the Jobs already show it, so none is written again."""
    policy = load_policy({"teams": [{"name": "t", "quota": [{"resources": {"cpu": 64}}]}]})
    engine = Engine(policy, load_catalog())
    store = Store()
    for i in range(3):
        store.put("Job", _job(i))
    ready = [{"type": "Ready", "status": "True"}]
    allocatable = {"cpu": "1", "memory": "1Gi", "pods": "9"}
    store.put("Node", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                       "status": {"allocatable": allocatable, "conditions": ready}})  # fmt: skip
    kube = RecordingKube(store)
    for now in (0.0, 1.0):  # the first operator, then the one after it
        cluster = KubeCluster(kube, store, Events(kube), writes_in_flight=0)  # type: ignore[arg-type]
        cluster.refresh(engine, now)
        ControlLoop(cluster, engine).reconcile(now)
        assert sorted(kube.patched) == ["j000", "j001", "j002"]


class SlowEventKube:
    """Takes Events; the first one is held until :attr:`go` is set (a slow API server)."""

    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []
        self.holding = threading.Event()
        self.go = threading.Event()
        self.lock = threading.Lock()

    def create(self, res: Any, body: dict[str, Any], namespace: str | None = None) -> None:
        if not self.holding.is_set():
            self.holding.set()
            assert self.go.wait(30)
        with self.lock:
            self.posted.append(body)


def test_events_never_hold_the_caller_and_a_burst_beyond_the_queue_is_folded() -> None:
    """A slow Event client: posting returns at once. With the queue full, the Events that
    do not fit are not dropped but folded per
    namespace, kind, type and reason into one Event each, posted once the queue has room,
    whose count says how many it stands for: every Event of a burst is accounted for."""
    kube = SlowEventKube()
    events = Events(kube, queue_size=2, posters=1)  # type: ignore[arg-type]

    def job(name: str) -> dict[str, Any]:
        return {"kind": "Job", "apiVersion": "batch/v1",
                "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"}}  # fmt: skip

    events.post(job("j0"), "Normal", "Admitted", "admitted j0")
    assert kube.holding.wait(30)  # the poster holds j0's: the queue is empty
    for i in range(1, 8):
        events.post(job(f"j{i}"), "Normal", "Admitted", f"admitted j{i}")
    for i in range(3):
        events.post(job(f"p{i}"), "Warning", "Preempted", f"preempted p{i}")
    assert events.combined == 8  # j1 and j2 are queued; the rest folded into two
    kube.go.set()
    events.close()
    deadline = time.monotonic() + 30
    while len(kube.posted) < 5:
        assert time.monotonic() < deadline, kube.posted
        time.sleep(0.01)
    messages = [(e["reason"], e["count"], e["message"], e["involvedObject"]["name"])
                for e in kube.posted]  # fmt: skip
    assert messages[:3] == [("Admitted", 1, f"admitted j{i}", f"j{i}") for i in range(3)]
    assert sorted(messages[3:]) == [
        ("Admitted", 5, "(combined from 5 similar events): admitted j7", "j7"),
        ("Preempted", 3, "(combined from 3 similar events): preempted p2", "p2"),
    ]
    assert sum(e["count"] for e in kube.posted) == 11
