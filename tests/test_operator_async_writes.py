"""Admission writes that do not hold the operator's loop, without an API server: the writer
itself (order, bound, withdrawal, leadership), and the loop's view over an in-memory API whose
writes wait until a test lets them through (assumed admissions count at once; a refused write
puts its workload back to pending; a workload preempted while its write is outstanding)."""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import Any

import pytest

from fleetshare.control.loop import ControlLoop
from fleetshare.governance.admission import CycleCache, Engine
from fleetshare.model.catalog import load_catalog
from fleetshare.operator.cluster import KubeCluster
from fleetshare.operator.events import Events
from fleetshare.operator.kube import KubeError, Resource
from fleetshare.operator.objects import ADMISSION, EVICTION
from fleetshare.operator.watch import Store
from fleetshare.operator.writer import AdmissionWriter, NotLeader
from fleetshare.policy.schema import load_policy
from tests.test_operator_view import _json_patch, _merge, _stamp


def _wait(what: str, check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


# -- the writer ----------------------------------------------------------------------------


def test_writer_sends_in_order_within_its_threads_and_bound() -> None:
    gate = threading.Event()
    lock = threading.Lock()
    started: list[str] = []
    busy, most = [0], [0]
    wakes: list[int] = []

    def sender(name: str) -> Any:
        def send(written: list[dict[str, Any]]) -> None:
            with lock:
                started.append(name)
                busy[0] += 1
                most[0] = max(most[0], busy[0])
            gate.wait(5)
            with lock:
                busy[0] -= 1
            if name == "w3":
                raise KubeError(409, "Conflict", "moved")
            written.append({"metadata": {"name": name}})

        return send

    writer = AdmissionWriter(threads=2, limit=5, wake=lambda: wakes.append(1))
    for i in range(5):
        writer.submit(f"w{i}", sender(f"w{i}"))
    assert writer.room() == 0
    with pytest.raises(ValueError):
        writer.submit("w5", sender("w5"))
    _wait("two writes being sent", lambda: len(started) == 2)
    assert sorted(started) == ["w0", "w1"]  # the first two, nothing jumps ahead
    assert not writer.cancel("w0")  # being sent: its answer will tell
    assert writer.cancel("w4")  # not sent yet: withdrawn, room again
    assert writer.room() == 1
    writer.full()
    gate.set()
    _wait("the writes sent", writer.idle)
    assert started[2:] == ["w2", "w3"] and most[0] == 2
    answers = {a.name: a for a in writer.take()}
    assert sorted(answers) == ["w0", "w1", "w2", "w3"]
    assert answers["w3"].error is not None and not answers["w3"].written
    assert answers["w0"].error is None and answers["w0"].written == [{"metadata": {"name": "w0"}}]
    assert wakes  # a refusal (and the room freed after full()) woke the loop
    assert writer.room() == 5 and writer.take() == []


def test_writer_sends_nothing_once_leadership_is_lost() -> None:
    sent: list[str] = []
    leading = [False]
    writer = AdmissionWriter(threads=1, limit=2, may_send=lambda: leading[0])
    writer.submit("a", lambda written: sent.append("a"))
    _wait("the answer", writer.idle)
    (answer,) = writer.take()
    assert sent == [] and isinstance(answer.error, NotLeader)


# -- the loop's view over an API whose writes wait ---------------------------------------------

JOBS_RES = Resource("Job", "batch/v1", "jobs", True)


class SlowApi:
    """Jobs in memory, patched as the API server does (JSON patches with their ``test``,
    merge patches conditional on a resourceVersion). Each JSON patch (an admission or an
    eviction; the pending reasons are merge patches) waits until ``gate`` is set; names in
    ``refuse`` are answered with a 500. Thread-safe; it never touches the operator's
    store (the tests play the watch with :meth:`watch`)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.version = 0
        self.gate = threading.Event()
        self.gate.set()
        self.sent: list[str] = []
        self.refuse: set[str] = set()

    def put(self, obj: dict[str, Any]) -> None:
        with self.lock:
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.objects[("ns", obj["metadata"]["name"])] = obj

    def watch(self, store: Store) -> None:
        with self.lock:
            for obj in self.objects.values():
                store.put("Job", copy.deepcopy(obj))

    def patch(self, res: Resource, name: str, body: Any, namespace: str | None = None,
              sub: str = "", **_: Any) -> dict[str, Any]:  # fmt: skip
        if isinstance(body, list):
            with self.lock:
                self.sent.append(name)
            self.gate.wait(10)
        if name in self.refuse:
            raise KubeError(500, "InternalError", "injected")
        with self.lock:
            obj = copy.deepcopy(self.objects[(namespace or "", name)])
            if isinstance(body, list):
                _json_patch(obj, body)
            else:
                body = copy.deepcopy(body)
                version = (body.get("metadata") or {}).pop("resourceVersion", None)
                if version is not None and version != obj["metadata"]["resourceVersion"]:
                    raise KubeError(409, "Conflict", "the object has been modified")
                _merge(obj, body)
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.objects[(namespace or "", name)] = obj
            return copy.deepcopy(obj)

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.objects[(namespace or "", name)])

    def create(self, *args: Any, **kwargs: Any) -> None:  # Events
        return None

    def admitted(self) -> list[str]:
        with self.lock:
            return sorted(
                n for (_, n), o in self.objects.items()
                if not o["spec"]["suspend"] and ADMISSION in o["metadata"].get("annotations", {})
            )  # fmt: skip


def _job(name: str, cpu: int, priority: str = "low") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "generation": 1,
                     "creationTimestamp": _stamp(0),
                     "labels": {"fleetshare.io/team": "a",
                                "fleetshare.io/priority-class": priority}},
        "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "m", "image": "x",
                            "resources": {"requests": {"cpu": str(cpu)}}}],
        }}},
    }  # fmt: skip


class Operator:
    """The operator's cluster and loop over a :class:`SlowApi` (``threads`` writing, at most
    ``limit`` outstanding), one Node of 16 CPU, team ``a`` with ``quota`` CPU."""

    def __init__(self, quota: int, *, threads: int = 2, limit: int = 100) -> None:
        self.api = SlowApi()
        self.store = Store()
        self.wakes = 0
        self.cluster = KubeCluster(
            self.api, self.store, Events(self.api),  # type: ignore[arg-type]
            write_concurrency=threads, writes_in_flight=limit, wake=self._wake,
        )  # fmt: skip
        policy = load_policy({
            "cluster": {"priority_classes": [{"name": "low", "weight": 10},
                                             {"name": "high", "weight": 20}],
                        "fair_share": False},
            "teams": [{"name": "a", "quota": [{"resources": {"cpu": quota}}],
                       "borrow_limits": [{"absolute": 0}]}],
        })  # fmt: skip
        self.engine = Engine(policy, load_catalog())
        self.engine.cache = CycleCache()
        self.loop = ControlLoop(self.cluster, self.engine)
        self.store.put("Node", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0", "uid": "u-n0",
                                                             "resourceVersion": "1"},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })  # fmt: skip

    def _wake(self) -> None:
        self.wakes += 1

    def turn(self, t: float) -> None:
        self.api.watch(self.store)
        self.cluster.refresh(self.engine, t)
        self.loop.reconcile(t)

    def used(self) -> int:
        """CPU the loop counts as admitted (assumed included)."""
        return (
            sum(r.workload.total_requests()["cpu"] for r in self.cluster.running.values()) // 1000
        )

    def settle(self) -> None:
        writer = self.cluster.writer
        assert writer is not None
        _wait("the writes answered", writer.idle)


def test_reconcile_returns_before_its_writes_are_answered_and_counts_them_admitted() -> None:
    op = Operator(quota=4)
    for i in range(6):
        op.api.put(_job(f"j{i}", 1))
    op.api.gate.clear()  # every write waits
    begin = time.monotonic()
    op.turn(0.0)
    assert time.monotonic() - begin < 5  # not the 10 s a write waits
    assert sorted(op.cluster.running) == ["ns/j0", "ns/j1", "ns/j2", "ns/j3"]
    assert sorted(op.cluster.pending) == ["ns/j4", "ns/j5"] and op.used() == 4
    assert op.api.admitted() == []  # nothing landed yet
    for t in (1.0, 2.0):  # the objects still say suspended: nothing admitted twice or beyond
        op.turn(t)
        assert op.used() == 4 and sorted(op.cluster.pending) == ["ns/j4", "ns/j5"]
    op.api.gate.set()
    op.settle()
    op.turn(3.0)
    assert op.api.admitted() == ["j0", "j1", "j2", "j3"] and op.used() == 4
    assert sorted(op.api.sent) == ["j0", "j1", "j2", "j3"]  # one write each
    assert all(op.cluster.tracked[f"ns/j{i}"].admitted for i in range(4))


def test_a_refused_write_puts_its_workload_back_to_pending_with_its_quota() -> None:
    op = Operator(quota=2)
    op.api.put(_job("j0", 1))
    op.api.put(_job("j1", 1))
    op.api.refuse.add("j0")
    op.turn(0.0)
    assert op.used() == 2  # both assumed
    op.settle()
    assert op.wakes >= 1  # the refusal woke the loop
    op.turn(1.0)  # the answers taken: j0 pending again, its CPU free, retried later
    assert sorted(op.cluster.pending) == ["ns/j0"] and op.used() == 1
    assert "ns/j0" in op.cluster.blocked and op.cluster.retry_soon
    assert op.api.admitted() == ["j1"]
    op.api.refuse.clear()
    op.turn(2.0)  # retried
    op.settle()
    op.turn(3.0)
    assert op.api.admitted() == ["j0", "j1"] and op.used() == 2 and not op.cluster.pending


def test_no_admission_cycle_while_the_writes_are_at_their_bound() -> None:
    op = Operator(quota=8, limit=3)
    for i in range(5):
        op.api.put(_job(f"j{i}", 1))
    op.api.gate.clear()
    op.turn(0.0)
    assert sorted(op.cluster.running) == ["ns/j0", "ns/j1", "ns/j2"]  # the cycle's first 3
    assert sorted(op.cluster.pending) == ["ns/j3", "ns/j4"]
    op.turn(1.0)  # full: no cycle runs, nothing more is handed over
    assert len(op.cluster.running) == 3 and not op.cluster.admitting()
    op.api.gate.set()
    op.settle()
    assert op.wakes >= 1  # room again: the loop is woken
    op.turn(2.0)
    op.settle()
    op.turn(3.0)
    assert op.api.admitted() == [f"j{i}" for i in range(5)]
    # one write each, the first three before the two left for later
    assert sorted(op.api.sent[:3]) == ["j0", "j1", "j2"] and sorted(op.api.sent[3:]) == ["j3", "j4"]


def test_a_workload_preempted_while_its_write_is_outstanding() -> None:
    """Preempting an assumed workload: a write not sent yet is withdrawn (nothing is
    written), one being sent is followed by the eviction once it lands."""
    op = Operator(quota=2, threads=1)
    op.api.put(_job("low-0", 1))
    op.api.put(_job("low-1", 1))
    op.api.gate.clear()
    op.turn(0.0)
    _wait("low-0 being sent", lambda: op.api.sent == ["low-0"])  # low-1 waits in the queue
    op.api.put(_job("high", 2, "high"))
    op.turn(1.0)  # high preempts both assumed low workloads and is assumed itself
    assert sorted(op.cluster.running) == ["ns/high"] and op.used() == 2
    assert sorted(op.cluster.pending) == ["ns/low-0", "ns/low-1"]
    op.api.gate.set()
    op.settle()
    assert op.api.sent == ["low-0", "high"]  # low-1's write was withdrawn
    assert op.api.admitted() == ["high", "low-0"]  # low-0 landed before its eviction ...
    op.turn(2.0)  # ... which is carried out when its answer is taken
    assert op.api.admitted() == ["high"]
    evicted = op.api.get(JOBS_RES, "low-0", "ns")
    assert evicted["spec"]["suspend"] is True
    assert json.loads(evicted["metadata"]["annotations"][EVICTION])["by"] == "ns/high"
    assert op.used() == 2 and sorted(op.cluster.pending) == ["ns/low-0", "ns/low-1"]
    assert op.api.get(JOBS_RES, "low-1", "ns")["spec"]["suspend"] is True  # never written
