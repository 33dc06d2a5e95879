"""How the operator spends its writes at scale, without an API server: pending reasons are
written within a budget (a burst, then a rate), oldest first, and catch up over the next
reconciles."""

from __future__ import annotations

import threading
import time
from typing import Any

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


def test_pending_reasons_are_written_within_a_budget_oldest_first() -> None:
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
                          pending_writes_per_second=5.0)  # fmt: skip
    loop = ControlLoop(cluster, engine)
    for now in (0.0, 4.0, 30.0):  # a burst of 50; 4 s later 20 more; a full burst again
        cluster.refresh(engine, now)
        loop.reconcile(now)
        assert len(kube.patched) == {0.0: 50, 4.0: 70, 30.0: 120}[now]
    assert kube.patched == [f"j{i:03d}" for i in range(120)]  # oldest first, each once
    reasons = {o["metadata"]["annotations"][PENDING_REASON] for o in store.of("Job").values()}
    assert all(reasons)
    cluster.refresh(engine, 60.0)
    loop.reconcile(60.0)
    assert len(kube.patched) == 120  # nothing changed: nothing rewritten


def test_events_wait_in_a_bounded_queue_and_never_hold_the_caller() -> None:
    """A slow Event client: posting returns at once; beyond the queue, Events are dropped
    and counted; what was queued is posted by the time the queue is closed and drained."""
    release, taken = threading.Event(), threading.Event()
    posted: list[str] = []

    class SlowKube:
        def create(self, res: Any, body: dict[str, Any], namespace: str | None = None) -> None:
            taken.set()
            release.wait(5)
            posted.append(body["reason"])

    events = Events(SlowKube(), queue_size=2, posters=1)  # type: ignore[arg-type]
    job = _job(0)
    events.post(job, "Normal", "R0", "m")
    assert taken.wait(5)  # the poster holds R0 until released
    for reason in ("R1", "R2", "R3"):
        events.post(job, "Normal", reason, "m")
    assert events.dropped == 1 and posted == []  # R3 did not fit; nobody waited
    release.set()
    events.close()
    deadline = time.monotonic() + 5
    while len(posted) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert posted == ["R0", "R1", "R2"]
