"""The workload kinds registry (issue 27): each kind's pod sets as Kueue counts them, read from
manifests in the shape of the examples on Kueue's site (tests/fixtures/manifests/kinds,
written for fleetshare); each kind admitted by suspension runs with its node selectors where
its pods get them and is restored; the webhook marks the kinds queued through their pods as
Kueue's webhooks do; priorities resolve in Kueue's order. Expected numbers are worked out in
the comments."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.manifests import (
    Document,
    ManifestError,
    ManifestWorkload,
    PodPriorityClass,
    parse_manifest,
    parse_manifests,
    parse_text,
    pod_priority_classes,
    resolve_priority,
)
from fleetshare.manifests.kinds import KINDS, POD_GROUPS, SUSPENDED
from fleetshare.manifests.kinds.appwrapper import parse_path
from fleetshare.manifests.kinds.base import (
    FAST_ADMISSION,
    POD_GROUP_COUNT,
    POD_GROUP_LABEL,
    apply_ops,
    get,
)
from fleetshare.manifests.kinds.rayjob import RAYJOB, SUBMITTER
from fleetshare.operator.kinds import admission_ops
from fleetshare.operator.objects import (
    ADMISSION,
    INJECTED,
    Admitted,
    group_complete,
    job_phase,
    owned,
    parse_job,
    parse_pods,
)
from fleetshare.operator.webhook import mutation, rules

KINDS_DIR = Path(__file__).parent / "fixtures" / "manifests" / "kinds"
MANIFESTS = KINDS_DIR.parent
GI = 2**30 * 1000
MI = 2**20 * 1000


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((KINDS_DIR / name).read_text()) if d]


def read(name: str) -> dict[str, ManifestWorkload]:
    return {w.name: w for w in parse_text((KINDS_DIR / name).read_text(), name)}


def counts(w: ManifestWorkload) -> dict[str, int]:
    return {ps.name: ps.count for ps in w.podsets}


def error_of(data: Any) -> str:
    with pytest.raises(ManifestError) as info:
        parse_manifests([Document("d", data)])
    return str(info.value)


# -- pod sets, as Kueue counts them ---------------------------------------------------------


def test_kubeflow_jobs_have_a_pod_set_per_replica_type_in_kueues_order() -> None:
    (mpi,) = read("mpijob.yaml").values()
    assert counts(mpi) == {"launcher": 1, "worker": 2}  # Launcher's replicas default to 1
    assert mpi.podsets[1].requests == {"cpu": 2000, "memory": 4 * GI, "nvidia.com/gpu": 1000}
    (tf,) = read("tfjob.yaml").values()
    assert counts(tf) == {"chief": 1, "ps": 2, "worker": 3}  # Chief, Master, PS, Worker, ...
    assert [ps.name for ps in tf.podsets] == ["chief", "ps", "worker"]
    assert (tf.priority_class, tf.priority_source) == ("training-high", "pod")
    assert tf.priority_field == "spec.runPolicy.schedulingPolicy.priorityClass"
    (paddle,) = read("paddlejob.yaml").values()
    assert counts(paddle) == {"master": 1, "worker": 2}
    (xgb,) = read("xgboostjob.yaml").values()
    assert counts(xgb) == {"master": 1, "worker": 2}
    assert xgb.podsets[0].requests == {"cpu": 500, "memory": 512 * MI}
    (jax,) = read("jaxjob.yaml").values()
    assert counts(jax) == {"worker": 2}
    bad = copy.deepcopy(docs("jaxjob.yaml")[0])
    bad["spec"]["jaxReplicaSpecs"]["Master"] = bad["spec"]["jaxReplicaSpecs"]["Worker"]
    assert "spec.jaxReplicaSpecs.Master: replica types are Worker" in error_of(bad)
    bad = copy.deepcopy(docs("mpijob.yaml")[0])
    bad["apiVersion"] = "kubeflow.org/v1"  # the MPIJob's v1 (training operator) is gone
    assert "kubeflow.org/v1 is not supported for MPIJob" in error_of(bad)


def test_rayservice_is_its_ray_cluster() -> None:
    (service,) = read("rayservice.yaml").values()
    assert (service.kind, counts(service)) == ("RayService", {"head": 1, "small-group": 1})
    assert service.podsets[0].requests == {"cpu": 1000, "memory": 4 * GI}


def test_sparkapplication_pods_are_sized_as_spark_sizes_them() -> None:
    (spark,) = read("sparkapplication.yaml").values()
    assert counts(spark) == {"driver": 1, "executor": 2}
    # 1g of memory and max(0.1 x 1024Mi, 384Mi) = 384Mi overhead: 1408Mi; coreRequest "1"
    assert spark.podsets[0].requests == {"cpu": 1000, "memory": 1408 * MI}
    data = copy.deepcopy(docs("sparkapplication.yaml")[0])
    spec = data["spec"]
    spec["type"] = "Python"  # non-JVM: the factor is 0.4
    spec["executor"] = {"instances": 1, "cores": 4, "memory": "8g", "gpu": {
        "name": "nvidia.com/gpu", "quantity": 2}, "nodeSelector": {"pool": "gpu"}}  # fmt: skip
    spec["sparkConf"] = {"spark.executor.pyspark.memory": "512m"}
    driver, executor = parse_manifest(data).podsets
    # 8g = 8192Mi, overhead 0.4 x 8192 = 3276Mi (truncated), pyspark 512Mi: 11980Mi; 4 cores
    assert executor.requests == {"cpu": 4000, "memory": 11980 * MI, "nvidia.com/gpu": 2000}
    assert dict(executor.node_selector) == {"pool": "gpu"}
    # the driver: 1g + max(0.4 x 1024, 384) = 409Mi overhead
    assert driver.requests == {"cpu": 1000, "memory": (1024 + 409) * MI}
    spec["executor"] = {"instances": 2, "memoryOverhead": "1g"}  # 1g (default) + 1g
    spec["sparkConf"] = {"spark.executor.cores": "3"}
    assert parse_manifest(data).podsets[1].requests == {"cpu": 3000, "memory": 2048 * MI}
    spec["dynamicAllocation"] = {"enabled": True}
    assert "dynamic allocation is not supported" in error_of(data)
    del spec["dynamicAllocation"]
    spec["driver"]["memory"] = "lots"
    assert "spec.driver.memory: 'lots' is not a Spark memory size" in error_of(data)


def test_appwrapper_reads_declared_pod_sets_and_infers_known_kinds() -> None:
    found = read("appwrapper.yaml")
    # the PyTorchJob's master and worker, inferred as the AppWrapper controller does
    assert counts(found["sample-pytorch-job"]) == {
        "sample-pytorch-job-0": 1,
        "sample-pytorch-job-1": 1,
    }
    job = found["sample-job"]  # declared: 3 replicas of the Job's pod template
    assert counts(job) == {"sample-job-0": 3}
    assert job.podsets[0].requests == {"cpu": 1000, "memory": 200 * MI, "nvidia.com/gpu": 1000}
    assert parse_path("template.spec.replicatedJobs[1].template") == (
        "template", "spec", "replicatedJobs", 1, "template",
    )  # fmt: skip
    assert parse_path("spec.template") is None
    data = copy.deepcopy(docs("appwrapper.yaml")[1])
    data["spec"]["components"][0]["podSets"][0]["path"] = "template.spec.nothing"
    assert "spec.components[0].template.spec.nothing: is required" in error_of(data)
    data["spec"]["components"][0]["podSets"] = []
    data["spec"]["components"][0]["template"]["kind"] = "Widget"
    assert "podSets: is required for a wrapped Widget" in error_of(data)


def test_pod_group_kinds_are_read_as_the_pods_kueue_queues() -> None:
    deployment = read("deployment.yaml")  # 3 replicas: 3 workloads of 1 pod
    assert sorted(deployment) == [f"nginx-deployment-{i}" for i in range(3)]
    assert {w.kind for w in deployment.values()} == {"Deployment"}
    assert all(counts(w) == {"main": 1} for w in deployment.values())
    assert deployment["nginx-deployment-0"].queue == "team-a/user-queue"
    (sts,) = read("statefulset.yaml").values()  # one group of 3
    assert (sts.name, sts.kind, sts.podsets[0].count) == ("nginx-statefulset", "StatefulSet", 3)
    lws = read("leaderworkerset.yaml")  # 2 groups of a leader and 2 workers
    assert sorted(lws) == ["nginx-leaderworkerset-0", "nginx-leaderworkerset-1"]
    group = lws["nginx-leaderworkerset-1"]
    assert [(ps.count, ps.requests["cpu"]) for ps in group.podsets] == [(1, 100), (2, 200)]
    (cron,) = read("cronjob.yaml").values()  # one run: the Job of its jobTemplate
    assert (cron.kind, cron.name, counts(cron)) == ("CronJob", "sample-cronjob", {"main": 3})
    assert any("spec.schedule: one run is read" in n for n in cron.notes)
    data = copy.deepcopy(docs("cronjob.yaml")[0])
    data["metadata"]["labels"] = data["spec"]["jobTemplate"].pop("metadata")["labels"]
    assert "put it there" in error_of(data)  # Kueue reads the jobTemplate's label
    data = copy.deepcopy(docs("leaderworkerset.yaml")[0])
    data["spec"]["startupPolicy"] = "LeaderReady"
    assert "only LeaderCreated is admitted" in error_of(data)
    data = copy.deepcopy(docs("deployment.yaml")[0])
    data["spec"]["replicas"] = 0
    assert "spec.replicas: is 0" in error_of(data)


def test_rayjob_submitter_is_the_last_pod_set_and_gets_its_template_selector() -> None:
    rayjob = yaml.safe_load((MANIFESTS / "rayjob.yaml").read_text())
    names = [ps.name for ps in parse_manifest(rayjob).podsets]
    assert names == ["head", "gpu-workers", SUBMITTER]
    # KubeRay's default submitter has no template: Kueue has nothing to inject into either
    assert SUBMITTER not in RAYJOB.selector_paths(rayjob)
    rayjob["spec"]["submitterPodTemplate"] = {"spec": {"containers": [{"name": "s"}]}}
    paths = RAYJOB.selector_paths(rayjob)
    assert paths[SUBMITTER] == ("spec", "submitterPodTemplate", "spec")


# -- the registry's kinds admitted by suspension: one contract -----------------------------------


def suspended_examples() -> list[dict[str, Any]]:
    """One object of every kind admitted by suspension."""
    names = ("sample-job.yaml", "jobset.yaml", "raycluster.yaml", "rayjob.yaml")
    out = [yaml.safe_load((MANIFESTS / n).read_text()) for n in names]
    out.append(next(yaml.safe_load_all((MANIFESTS / "pytorchjobs.yaml").read_text())))
    for name in ("mpijob", "tfjob", "paddlejob", "xgboostjob", "jaxjob", "rayservice",
                 "appwrapper", "sparkapplication"):  # fmt: skip
        out.extend(docs(f"{name}.yaml"))
    assert {o["kind"] for o in out} == set(SUSPENDED)
    for obj in out:
        obj["metadata"].setdefault("namespace", "ns")
        obj["metadata"]["resourceVersion"] = "7"
    return out


@pytest.mark.parametrize("obj", suspended_examples(), ids=lambda o: o["metadata"]["name"])
def test_each_suspended_kind_runs_with_selectors_where_its_pods_get_them(
    obj: dict[str, Any],
) -> None:
    """The pod sets the reader gives and the maps the operator injects node selectors into
    are the same, by name (but a RayJob's default submitter, which has no template); running
    injects each pod set's selector, the pods' spec reads it back, and restoring gives back
    what the owner wrote. The webhook suspends a governed object created running."""
    kind = SUSPENDED[obj["kind"]]
    labels = obj["metadata"].setdefault("labels", {})
    if "kueue.x-k8s.io/queue-name" not in labels:
        labels["fleetshare.io/team"] = "t"
    obj = apply_ops(obj, kind.suspend_ops(obj, False))  # created running
    names = [ps.name for ps in parse_job(obj, kind).podsets]
    paths = kind.selector_paths(obj)
    default_submitter = kind.kind == "RayJob" and "submitterPodTemplate" not in obj["spec"]
    assert sorted(paths) == sorted(n for n in names if not (default_submitter and n == SUBMITTER))
    assert not kind.suspended(obj) and job_phase(obj, kind) == "pending"
    suspended = apply_ops(obj, mutation(obj))
    assert kind.suspended(suspended) and mutation(suspended) == []
    selectors = {n: {"pool": n[-40:]} for n in names}
    record = {ADMISSION: Admitted((), (), 0.0, "t", {}).to_json(), INJECTED: '["pool"]'}
    ops = admission_ops(suspended, kind, selectors, {}, record)
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    running = apply_ops(suspended, ops)
    assert not kind.suspended(running) and job_phase(running, kind) == "admitted"
    for name, path in paths.items():
        assert get(running, (*path, "nodeSelector"))["pool"] == selectors[name]["pool"]
    if kind.kind != "AppWrapper":  # its templates stay as written (podSetInfos carry it)
        injected = "/metadata/annotations/" + INJECTED.replace("/", "~1")
        parsed = parse_job(apply_ops(running, [{"op": "remove", "path": injected}]), kind)
        for ps in parsed.podsets:
            if ps.name in paths:
                assert ps.node_selector.get("pool") == selectors[ps.name]["pool"], ps.name
    # the parser reads what the owner wrote: the injected keys are off
    assert parse_job(running, kind).podsets == parse_job(obj, kind).podsets
    restored = apply_ops(running, kind.restore_ops(running, {"*": ["pool"]}))
    for path in paths.values():
        assert "pool" not in (get(restored, (*path, "nodeSelector")) or {})
    child = {"kind": "Pod", "metadata": {"name": "c", "labels": {"fleetshare.io/team": "t"},
                                         "ownerReferences": [{"kind": kind.kind}]}}  # fmt: skip
    assert owned(child) and mutation(child) == []  # the workload is its owner


def test_each_kind_says_when_it_is_finished() -> None:
    def with_status(kind: str, status: dict[str, Any]) -> dict[str, Any]:
        return {"kind": kind, "metadata": {"name": "x"}, "spec": {}, "status": status}

    done = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    for name in ("PyTorchJob", "TFJob", "PaddleJob", "XGBoostJob", "JAXJob", "MPIJob"):
        kind = SUSPENDED[name]
        assert kind.finished(with_status(name, done), []), name
        assert not kind.finished(with_status(name, {}), []), name
    spark = SUSPENDED["SparkApplication"]
    for state, finished in (("RUNNING", False), ("COMPLETED", True), ("FAILED", True),
                            ("SUBMISSION_FAILED", True)):  # fmt: skip
        status = {"applicationState": {"state": state}}
        assert spark.finished(with_status("SparkApplication", status), []) is finished
    aw = SUSPENDED["AppWrapper"]
    assert aw.finished(with_status("AppWrapper", {"phase": "Succeeded"}), [])
    deploying = [{"type": "ResourcesDeployed", "status": "True"}]
    assert not aw.finished(with_status("AppWrapper", {"phase": "Failed",
                                                      "conditions": deploying}), [])  # fmt: skip
    assert aw.finished(with_status("AppWrapper", {"phase": "Failed"}), [])
    service = SUSPENDED["RayService"]  # a service never finishes: it holds quota until deleted
    assert not service.finished(with_status("RayService", done), [])


def test_a_sparkapplication_with_a_shared_node_selector_gets_both_flavors_there() -> None:
    (spark,) = docs("sparkapplication.yaml")
    spark["spec"]["nodeSelector"] = {"disk": "ssd"}
    kind = SUSPENDED["SparkApplication"]
    ops = kind.run_ops(spark, {"driver": {"pool": "cpu"}, "executor": {"zone": "a"}}, {})
    assert apply_ops(spark, ops)["spec"]["nodeSelector"] == {"disk": "ssd", "pool": "cpu",
                                                             "zone": "a"}  # fmt: skip
    executor = {"kind": "Pod", "metadata": {"name": "exec-1", "labels": {
        "fleetshare.io/team": "t", "sparkoperator.k8s.io/app-name": "spark-pi",
        "spark-role": "executor"}}}  # fmt: skip
    assert owned(executor)  # owned by the driver pod, made for the SparkApplication


# -- kinds queued through their pods: the webhook marks them as Kueue's webhooks do ---------------


def test_webhook_marks_pod_templates_of_pod_group_kinds() -> None:
    (deployment,) = docs("deployment.yaml")
    marked = apply_ops(deployment, mutation(deployment))
    labels = marked["spec"]["template"]["metadata"]["labels"]
    assert labels == {"app": "nginx", "kueue.x-k8s.io/queue-name": "user-queue"}
    assert mutation(marked) == []  # nothing more to add
    (sts,) = docs("statefulset.yaml")
    meta = apply_ops(sts, mutation(sts))["spec"]["template"]["metadata"]
    assert meta["labels"][POD_GROUP_LABEL] == "nginx-statefulset"
    assert meta["annotations"][POD_GROUP_COUNT] == "3" and meta["annotations"][FAST_ADMISSION]
    (lws,) = docs("leaderworkerset.yaml")
    marked = apply_ops(lws, mutation(lws))["spec"]["leaderWorkerTemplate"]
    for template in ("leaderTemplate", "workerTemplate"):
        assert marked[template]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue"
    pod = {"kind": "Pod", "metadata": {"name": "nginx-leaderworkerset-1-2", "labels": {
        "kueue.x-k8s.io/queue-name": "user-queue",
        "leaderworkerset.sigs.k8s.io/name": "nginx-leaderworkerset",
        "leaderworkerset.sigs.k8s.io/group-index": "1",
        "leaderworkerset.sigs.k8s.io/worker-index": "2"},
        "annotations": {"leaderworkerset.sigs.k8s.io/size": "3"},
        "ownerReferences": [{"kind": "StatefulSet", "name": "nginx-leaderworkerset-1"}]},
        "spec": {"containers": []}}  # fmt: skip
    gated = apply_ops(pod, mutation(pod))
    assert gated["metadata"]["labels"][POD_GROUP_LABEL] == "nginx-leaderworkerset-1"
    assert gated["metadata"]["annotations"][POD_GROUP_COUNT] == "3"
    assert gated["spec"]["schedulingGates"] == [{"name": "fleetshare.io/admission"}]
    (cron,) = docs("cronjob.yaml")
    assert mutation(cron) == []  # its Jobs are governed as Jobs
    unlabelled = copy.deepcopy(deployment)
    del unlabelled["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert mutation(unlabelled) == []


def test_webhook_rules_cover_every_kind_it_acts_on() -> None:
    hooked = {(r["apiGroups"][0], res) for r in rules() for res in r["resources"]}
    for kind in KINDS.values():
        wanted = kind.admission != "jobs"  # a CronJob's Jobs are caught as Jobs
        assert ((kind.group, kind.plural) in hooked) is wanted, kind.kind
    assert ("batch", "cronjobs") not in hooked and set(POD_GROUPS) >= {"CronJob"}


def test_a_fast_admission_group_is_admitted_with_its_first_pod() -> None:
    """A StatefulSet's pods come one at a time (OrderedReady): Kueue admits its group with the
    first, counting all of them."""
    (sts,) = docs("statefulset.yaml")
    template = apply_ops(sts, mutation(sts))["spec"]["template"]
    first = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "nginx-statefulset-0", "namespace": "team-a", "uid": "u0",
        "labels": template["metadata"]["labels"],
        "annotations": template["metadata"]["annotations"]}, "spec": template["spec"]}  # fmt: skip
    assert group_complete([first])
    (ps,) = parse_pods([first]).podsets
    assert (ps.count, ps.requests) == (3, {"cpu": 3000})
    slow = copy.deepcopy(first)
    del slow["metadata"]["annotations"][FAST_ADMISSION]
    assert not group_complete([slow])


# -- priorities: the WorkloadPriorityClass label, else the pod priority class ---------------------


def test_priority_is_resolved_in_kueues_order() -> None:
    classes = {"k8s-high": PodPriorityClass("k8s-high", 100_000),
               "everyday": PodPriorityClass("everyday", 50, global_default=True)}  # fmt: skip
    policy = {"batch-low": 10, "high": 90}

    def of(name: str) -> int:
        if name not in policy:
            raise KeyError(f"unknown priority class {name!r} (known: batch-low, high)")
        return policy[name]

    assert resolve_priority("label", "high", of, None, classes) == 90
    assert resolve_priority("pod", "k8s-high", of, None, classes) == 100_000
    assert resolve_priority("pod", "batch-low", of, None, classes) == 10  # a policy class
    with pytest.raises(KeyError, match=r"no PriorityClass 'vip'.*unknown priority class"):
        resolve_priority("pod", "vip", of, None, classes)
    assert resolve_priority("none", None, of, None, classes) == 50  # the global default
    assert resolve_priority("none", None, of, 20, classes) == 20  # the policy's default first
    assert resolve_priority("none", None, of, None, {}) == 0


def test_priority_classes_are_read_from_manifests() -> None:
    text = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: k8s-high}
value: 100000
globalDefault: false
"""
    found = pod_priority_classes([Document("pc.yaml", yaml.safe_load(text))])
    assert found == {"k8s-high": PodPriorityClass("k8s-high", 100_000)}
    assert parse_manifests([Document("pc.yaml", yaml.safe_load(text))]) == []
    bad = yaml.safe_load(text) | {"value": "high"}
    with pytest.raises(ManifestError, match="value: must be a whole number"):
        pod_priority_classes([Document("pc.yaml", bad)])


def test_the_kinds_table_lists_every_kind_of_the_registry() -> None:
    """docs/kinds.md stays true to the registry: a row per kind, with its apiVersion."""
    text = (Path(__file__).parent.parent / "docs" / "kinds.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()
            if line.startswith("| ") and line.count("|") > 5}  # fmt: skip
    for kind in KINDS.values():
        assert kind.kind in rows, kind.kind
        assert f"`{kind.api_versions[0]}`" in rows[kind.kind], kind.kind


def test_a_pod_sets_own_node_selector_survives_its_eviction() -> None:
    """Kueue keeps each pod set's own node selector in the workload's podSetInfo and restores
    it (``RestorePodSetsInfo``): the operator records the keys it injects per pod set, so a
    pod set that selects its flavor itself keeps its selector when the job is suspended
    again, while the key injected into the other pod set goes (found by the agreement test,
    ``tests/fixtures/agreement/own-node-selector-survives-eviction.yaml``)."""
    kind = SUSPENDED["JobSet"]
    template = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
    pinned = copy.deepcopy(template)
    pinned["spec"]["nodeSelector"] = {"pool": "pool-b"}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "w", "namespace": "ns", "resourceVersion": "7"},
        "spec": {"suspend": True, "replicatedJobs": [
            {"name": "pinned", "template": {"spec": {"template": pinned}}},
            {"name": "free", "template": {"spec": {"template": template}}},
        ]},
    }  # fmt: skip
    selectors = {"pinned": {"pool": "pool-b"}, "free": {"pool": "pool-b"}}
    injected = kind.injected(jobset, selectors, {})
    assert injected == {"free": ["pool"]}  # pinned's own selector already says pool-b
    running = apply_ops(jobset, kind.run_ops(jobset, selectors, {}))
    paths = kind.selector_paths(jobset)
    restored = apply_ops(running, kind.restore_ops(running, injected))
    assert get(restored, (*paths["pinned"], "nodeSelector")) == {"pool": "pool-b"}
    assert get(restored, (*paths["free"], "nodeSelector")) == {}
    # an earlier operator's record, one list for the whole object, still takes the key off all
    everywhere = apply_ops(running, kind.restore_ops(running, {"*": ["pool"]}))
    assert get(everywhere, (*paths["pinned"], "nodeSelector")) == {}
