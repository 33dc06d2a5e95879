"""bench/kueue_workloads.py's pure pieces: fleetshare governing Kueue's own Workload objects
(kueue_side_by_side.py --mode workloads). The policy is what `fleetshare import kueue` makes
of the runner's queues; a Workload reads as the workload Kueue would queue; an admission,
an eviction and a ClusterQueue's status are the writes Kueue's runner and recorder read."""

from __future__ import annotations

import copy
from types import ModuleType
from typing import Any

import pytest

from fleetshare.governance.snapshot import Admission, Assignment, Running
from fleetshare.operator.writer import Answer, send_now
from fleetshare.traces.kueue_generator import cohorts_apart
from tests.bench_modules import bench_module

NOW = "2026-12-07T06:00:00Z"
GV = "kueue.x-k8s.io/v1beta2"


_module = bench_module


@pytest.fixture(scope="module")
def kw() -> ModuleType:
    return _module("kueue_workloads")


def cluster_queue(name: str, cohort: str) -> dict[str, Any]:
    """A ClusterQueue as Kueue's generator makes it (v1beta2, as the API serves it)."""
    return {
        "apiVersion": GV, "kind": "ClusterQueue",
        "metadata": {"name": name, "generation": 1, "uid": f"u-{name}", "resourceVersion": "7",
                     "labels": {"kueue.x-k8s.io/performance-scheduler-class": "cq"}},
        "spec": {
            "cohortName": cohort, "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": "rf", "resources": [
                    {"name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}]}]}],
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        },
        "status": {"pendingWorkloads": 3},
    }  # fmt: skip


def queues(cohorts: int = 2) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [{"apiVersion": GV, "kind": "ResourceFlavor",
                                   "metadata": {"name": "rf", "generation": 1}}]  # fmt: skip
    for c in range(cohorts):
        for q in range(2):
            name = f"cq-0-{q}-cohort-{c}"
            objs.append(cluster_queue(name, f"cohort-{c}"))
            objs.append({"apiVersion": GV, "kind": "LocalQueue",
                         "metadata": {"name": name, "namespace": name, "generation": 1},
                         "spec": {"clusterQueue": name}})  # fmt: skip
    return objs


def workload(ns: str = "cq-0-1-cohort-0", cpu: str = "5", priority: int = 100,
             conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    """A Workload as Kueue's generator makes it (``MakeWorkload(...).Request(cpu, ...)``)."""
    return {
        "apiVersion": GV, "kind": "Workload",
        "metadata": {"name": "medium-1-3-0", "namespace": ns, "uid": "u-w", "generation": 1,
                     "resourceVersion": "42", "creationTimestamp": "2026-12-07T05:59:58Z",
                     "labels": {"kueue.x-k8s.io/performance-scheduler-class": "medium",
                                "kueue.x-k8s.io/performance-scheduler-running-ms": "500"}},
        "spec": {"queueName": ns, "priority": priority, "podSets": [{
            "name": "main", "count": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}}]},
        "status": {"conditions": conditions or []},
    }  # fmt: skip


def cond(kind: str, status: str, at: str = "2026-12-07T05:59:59Z") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": "R", "message": f"m {kind}",
            "lastTransitionTime": at}  # fmt: skip


def test_the_policy_is_the_import_of_the_runners_queues_with_cohorts_apart(
    kw: ModuleType,
) -> None:
    policy = kw.policy_of(queues())
    assert sorted(t.name for t in policy.teams) == [
        "cq-0-0-cohort-0", "cq-0-0-cohort-1", "cq-0-1-cohort-0", "cq-0-1-cohort-1"]  # fmt: skip
    assert policy.team_for("cq-0-1-cohort-1/cq-0-1-cohort-1") == "cq-0-1-cohort-1"
    for group in policy.groups:  # a root cohort lends nothing to another
        assert [(x.resource, x.flavor, x.absolute) for x in group.lending_limits] == [
            ("cpu", "rf", 0)]  # fmt: skip
    # a status write (the ClusterQueue's counts) does not make a new policy; a spec change does
    before = kw.policy_key(queues())
    moved = queues()
    moved[1]["status"] = {"pendingWorkloads": 0}
    assert kw.policy_key(moved) == before
    moved[1]["metadata"]["generation"] = 2
    assert kw.policy_key(moved) != before


def test_cohorts_apart_leaves_nested_cohorts_lending() -> None:
    policy = {"teams": [{"name": "t", "quota": [{"flavor": "rf", "resources": {"cpu": 1}}]}],
              "groups": [{"name": "root"}, {"name": "child", "parent": "root"}]}  # fmt: skip
    out = cohorts_apart(policy)
    assert out["groups"][0]["lending_limits"] == [
        {"resource": "cpu", "flavor": "rf", "absolute": 0}
    ]
    assert "lending_limits" not in out["groups"][1]


def test_a_workload_reads_as_kueue_queues_it(kw: ModuleType) -> None:
    policy = kw.policy_of(queues())
    w = kw.workload_of(workload(cpu="1500m", priority=200), policy, 7)
    assert w.name == "cq-0-1-cohort-0/medium-1-3-0" and w.team == "cq-0-1-cohort-0"
    assert [(ps.name, ps.count, dict(ps.requests)) for ps in w.podsets] == [
        ("main", 1, {"cpu": 1500})]  # fmt: skip
    assert w.priority == 200 and w.created == 7
    assert w.submit_time == 1_796_623_198.0  # the server's creationTimestamp
    with pytest.raises(KeyError):  # a queue no ClusterQueue's LocalQueue is
        kw.workload_of(workload(ns="elsewhere"), policy, 0)


@pytest.mark.parametrize(
    ("conds", "phase"),
    [
        ([], "pending"),
        ([cond("QuotaReserved", "False")], "pending"),
        ([cond("QuotaReserved", "True"), cond("Admitted", "True")], "admitted"),
        ([cond("QuotaReserved", "True"), cond("Evicted", "True")], "evicting"),
        ([cond("QuotaReserved", "True"), cond("Finished", "True")], "finished"),
    ],
)
def test_a_workloads_phase_is_its_conditions(
    kw: ModuleType, conds: list[dict[str, Any]], phase: str
) -> None:
    assert kw.phase_of(workload(conditions=conds)) == phase


def _admission(kw: ModuleType, obj: dict[str, Any]) -> Admission:
    w = kw.workload_of(obj, kw.policy_of(queues()), 0)
    return Admission(w, Assignment(("rf",), ((("quota-rf", 1),),)), {})


def test_an_admission_is_one_status_write_kueue_reads_as_admitted(kw: ModuleType) -> None:
    """QuotaReserved and Admitted True, the admission per pod set, and after an eviction its
    Evicted and Preempted conditions False again (the runner evicts again otherwise); on
    condition that the Workload is as the decision saw it."""
    obj = workload(conditions=[cond("QuotaReserved", "False"), cond("Evicted", "True"),
                               cond("Preempted", "True")])  # fmt: skip
    body = kw.admission_status(obj, _admission(kw, obj), "cq-0-1-cohort-0", NOW)
    assert body["metadata"] == {"resourceVersion": "42"}
    assert body["status"]["admission"] == {
        "clusterQueue": "cq-0-1-cohort-0",
        "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": "rf"}, "resourceUsage": {"cpu": "5"}, "count": 1}
        ],
    }
    states = {c["type"]: (c["status"], c["reason"], c["lastTransitionTime"])
              for c in body["status"]["conditions"]}  # fmt: skip
    assert states == {
        "QuotaReserved": ("True", "QuotaReserved", NOW), "Admitted": ("True", "Admitted", NOW),
        "Evicted": ("False", "QuotaReserved", NOW), "Preempted": ("False", "QuotaReserved", NOW),
    }  # fmt: skip
    assert all(c.get("observedGeneration") == 1 for c in body["status"]["conditions"])


def test_an_eviction_is_one_status_write_the_runner_completes(kw: ModuleType) -> None:
    obj = workload(conditions=[cond("QuotaReserved", "True"), cond("Admitted", "True")])
    body = kw.eviction_status(obj, "priority", "Preempted to accommodate x", NOW)
    states = {c["type"]: (c["status"], c["reason"]) for c in body["status"]["conditions"]}
    assert states == {
        "QuotaReserved": ("True", "R"), "Admitted": ("True", "R"),  # the runner takes them off
        "Evicted": ("True", "Preempted"), "Preempted": ("True", "InClusterQueue"),
    }  # fmt: skip
    reclaim = kw.eviction_status(obj, "reclaim", "m", NOW)["status"]["conditions"]
    assert {c["type"]: c["reason"] for c in reclaim}["Preempted"] == "InCohortReclamation"


def test_a_cluster_queues_status_is_what_the_recorder_reads(kw: ModuleType) -> None:
    obj = workload()
    w = kw.workload_of(obj, kw.policy_of(queues()), 0)
    running = [Running(w, Assignment(("rf",), ((("quota-rf", 1),),)), 0.0)] * 3
    figures = kw.queue_figures(running, 4)
    assert figures == kw.QueueFigures((("rf", "cpu", 15000),), 4, 3)
    body = kw.queue_status(cluster_queue("cq-0-1-cohort-0", "cohort-0"), figures, NOW)
    status = body["status"]
    usage = [{"name": "rf", "resources": [{"name": "cpu", "total": "15", "borrowed": "0"}]}]
    assert status["flavorsReservation"] == usage and status["flavorsUsage"] == usage
    assert (status["pendingWorkloads"], status["reservingWorkloads"],
            status["admittedWorkloads"]) == (4, 3, 3)  # fmt: skip
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Active", "True")]
    idle = kw.queue_status(cluster_queue("q", "c"), kw.queue_figures([], 0), NOW)["status"]
    assert idle["flavorsUsage"][0]["resources"][0]["total"] == "0"


def test_the_quota_node_offers_the_summed_nominal_quota(kw: ModuleType) -> None:
    (node,) = kw.quota_nodes(kw.policy_of(queues(cohorts=3)))
    assert node.name == "quota-rf" and dict(node.allocatable) == {"cpu": 6 * 20_000}


def test_quantities_are_exact(kw: ModuleType) -> None:
    assert [kw.quantity(m) for m in (0, 1000, 20000, 1500, 250)] == ["0", "1", "20", "1500m",
                                                                     "250m"]  # fmt: skip


def test_cluster_queue_writes_wait_their_second_and_the_budget(kw: ModuleType) -> None:
    """Each ClusterQueue's status at most once a second; beyond the budget's room the least
    recently written go first (a queue never starves behind busier ones)."""
    last = {"a": 10.0, "b": 9.5, "c": 9.0, "d": 10.6}
    assert kw.queues_due(last, 11.0, 10) == (["c", "b", "a"], 11.6)
    assert kw.queues_due(last, 11.0, 2) == (["c", "b"], 11.6)
    assert kw.queues_due(last, 11.0, 0) == ([], 11.6)
    assert kw.queues_due({"a": 10.0}, 12.0, 1) == (["a"], None)


# -- the backend: the shared cluster state over Kueue's Workloads ------------------------------


class FakeKube:
    """The API server's answer to a Workload's status patch: the Workload with that status,
    one resourceVersion later."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def patch(self, res: Any, name: str, body: dict[str, Any], ns: str, sub: str) -> Any:
        obj = copy.deepcopy(self.store.of("Workload")[(ns, name)])
        obj["status"] = {**obj.get("status", {}), **body["status"]}
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        return obj


class FakeWriter:
    """The admission writer, sending what it was handed only when told (:meth:`send`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.queued: list[tuple[str, Any]] = []
        self.answers: list[Answer] = []

    def room(self) -> int:
        return self.limit - len(self.queued) - len(self.answers)

    def full(self) -> None:
        pass

    def submit(self, name: str, send: Any) -> None:
        assert self.room() > 0, "admission writer full"
        self.queued.append((name, send))

    def cancel(self, name: str) -> bool:
        kept = [(n, s) for n, s in self.queued if n != name]
        cancelled, self.queued = len(kept) < len(self.queued), kept
        return cancelled

    def take(self) -> list[Answer]:
        answers, self.answers = self.answers, []
        return answers

    def send(self) -> None:
        self.answers += [send_now(name, send) for name, send in self.queued]
        self.queued = []


def named(name: str, cpu: str, priority: int, ns: str = "cq-0-0-cohort-0") -> dict[str, Any]:
    obj = workload(ns=ns, cpu=cpu, priority=priority)
    obj["metadata"].update(name=name, uid=f"u-{name}")
    return obj


class Governed:
    """A :class:`WorkloadCluster` under the control loop, as the governor wires it, on one
    cohort of two ClusterQueues (20 CPUs each, borrowing from each other); its writes are
    stamped at :data:`NOW`, the loop's first turn a second later."""

    def __init__(self, kw: ModuleType, monkeypatch: pytest.MonkeyPatch, limit: int = 10) -> None:
        from fleetshare.control.loop import ControlLoop
        from fleetshare.governance.admission import Engine
        from fleetshare.model.catalog import load_catalog
        from fleetshare.operator.watch import Store

        self.store = Store()
        self.writer = FakeWriter(limit)
        self.cluster = kw.WorkloadCluster(FakeKube(self.store), self.store, self.writer)
        self.policy = kw.policy_of(queues(cohorts=1))
        self.cluster.nodes = {n.name: n for n in kw.quota_nodes(self.policy)}
        self.loop = ControlLoop(self.cluster, Engine(self.policy, load_catalog()))
        monkeypatch.setattr(kw, "rfc3339", lambda unix: NOW)
        self.now = 1_796_623_200.0  # NOW

    def submit(self, *objs: dict[str, Any]) -> None:
        for obj in objs:
            self.store.put("Workload", obj)

    def reconcile(self) -> list[str]:
        """One turn of the governor; the writes it handed to the writer."""
        self.now += 1.0
        self.cluster.refresh(self.policy, False)
        self.loop.reconcile(self.now)
        return [name for name, _ in self.writer.queued]

    def written(self) -> list[str]:
        """The writes handed over so far land (the answers are taken at the next turn)."""
        names = [name for name, _ in self.writer.queued]
        self.writer.send()
        return names


NS = "cq-0-0-cohort-0"


def test_admissions_are_written_when_the_reconcile_is_settled_within_the_writers_room(
    kw: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's room counts the admissions assumed and not written yet: beyond it the
    rest waits for a later turn (never a write the writer refuses)."""
    g = Governed(kw, monkeypatch, limit=1)
    g.submit(named("a", "5", 100), named("b", "5", 100))
    assert g.reconcile() == [f"{NS}/a"]
    assert set(g.cluster.running) == {f"{NS}/a"} and set(g.cluster.pending) == {f"{NS}/b"}
    assert g.cluster.admissions == 1
    g.written()
    assert g.reconcile() == [f"{NS}/b"]  # a's answer taken: room again
    a = g.store.of("Workload")[(NS, "a")]
    assert kw.phase_of(a) == "admitted" and set(g.cluster.running) == {f"{NS}/a", f"{NS}/b"}


def test_a_preempted_workload_is_an_eviction_write_and_waits_once_released(
    kw: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work admitted at an earlier turn is preempted by a status write; it is out of the view
    (neither running nor waiting) until the runner takes its reservation off, then waits."""
    g = Governed(kw, monkeypatch)
    g.submit(named("low", "20", 100), named("other", "20", 100, ns="cq-0-1-cohort-0"))
    g.reconcile()
    g.written()
    g.submit(named("high", "20", 200))  # the cohort is full: low must go
    assert g.reconcile() == [f"{NS}/low#evict", f"{NS}/high"]
    assert f"{NS}/low" not in g.cluster.running and f"{NS}/low" not in g.cluster.pending
    assert g.cluster.evictions == 1
    g.written()
    g.reconcile()
    low = g.store.of("Workload")[(NS, "low")]
    assert kw.phase_of(low) == "evicting" and f"{NS}/low" not in g.cluster.pending
    released = copy.deepcopy(low)  # the runner takes the reservation off
    released["status"]["conditions"] = [
        c for c in released["status"]["conditions"] if c["type"] != "QuotaReserved"
    ]
    released["metadata"]["resourceVersion"] = "99"
    g.submit(released)
    assert g.reconcile() == []
    assert f"{NS}/low" in g.cluster.pending
    assert set(g.cluster.running) == {f"{NS}/high", "cq-0-1-cohort-0/other"}
