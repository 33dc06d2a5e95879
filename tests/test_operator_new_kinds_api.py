"""The kinds of issue 27 governed through a real API server, with the operator's webhook
registered: the Kubeflow MPIJob, TFJob, PaddleJob, XGBoostJob and JAXJob, the RayService (and
a RayJob's submitter template), the AppWrapper and the SparkApplication are admitted by
suspension (their CRDs from tests/fixtures/crds, written to the upstream schemas of the fields
read; no controller of theirs runs); Deployments, StatefulSets and CronJobs run under
kube-controller-manager's own controllers, their pods (or Jobs) queued as Kueue queues them; a
LeaderWorkerSet's group is created as its controller would create it; a pod template's
``priorityClassName`` takes the Kubernetes PriorityClass's value."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.manifests.kinds import KINDS, SUSPENDED
from fleetshare.manifests.kinds.base import POD_GROUP_LABEL, get
from fleetshare.operator.kinds import resource
from fleetshare.operator.kube import JOBS, PODS, PRIORITY_CLASSES, KubeError, Resource
from fleetshare.operator.objects import ADMISSION, GATE
from fleetshare.operator.webhook import Webhook
from fleetshare.policy.schema import load_policy
from tests.kube_harness import (
    Harness,
    OperatorThread,
    admitted,
    apply_policy,
    gpu_job,
    wait_for,
)
from tests.test_operator_kinds_api import install_kinds

pytestmark = pytest.mark.slow
KINDS_DIR = Path(__file__).parent / "fixtures" / "manifests" / "kinds"
MANIFESTS = KINDS_DIR.parent
TYPE = "node.kubernetes.io/instance-type"
FLAVOR = "ml.g5.12xlarge"
POLICY = {"teams": [{"name": "research", "quota": [{"instance_type": FLAVOR, "count": 1}]}]}
NODE = {"cpu": "48", "memory": "192Gi", "nvidia.com/gpu": "4"}
REPLICASETS = Resource("ReplicaSet", "apps/v1", "replicasets", True)


def small(doc: dict[str, Any], ns: str) -> dict[str, Any]:
    """``doc`` in namespace ``ns``, labelled for team research, every container's request
    100m CPU and 64Mi (no GPU): the quota holds them all (a SparkApplication's pods are sized
    by Spark: 1 CPU and 1408Mi each)."""
    doc = copy.deepcopy(doc)
    meta = doc["metadata"]
    meta["namespace"] = ns
    labels = meta.setdefault("labels", {})
    labels.pop("kueue.x-k8s.io/queue-name", None)
    labels["fleetshare.io/team"] = "research"

    def shrink(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("resources"), dict):
                node["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
            for value in node.values():
                shrink(value)
        elif isinstance(node, list):
            for value in node:
                shrink(value)

    shrink(doc["spec"])
    return doc


def fixture(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((KINDS_DIR / name).read_text()) if d]


@contextlib.contextmanager
def governed(kube: Harness, ns: str) -> Iterator[OperatorThread]:
    """The policy, a node of the flavor, the webhook and the operator, for one test."""
    install_kinds(kube)
    apply_policy(kube, load_policy(POLICY))
    kube.add_node(f"{ns}-g5", NODE, {TYPE: FLAVOR}, owner=ns)
    webhook = Webhook(kube.kube)
    webhook.start()
    webhook.register()
    op = OperatorThread(kube, [ns]).start()
    try:
        yield op
    finally:
        op.stop()
        webhook.stop()


def annotations_of(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def test_new_crd_kinds_are_admitted_by_suspension(kube: Harness, ns: str) -> None:
    """Each kind is suspended by the webhook at creation, then admitted: unsuspended where the
    kind keeps its flag, the flavor's node selector wherever its pod sets get theirs (the
    registry says where: templates; a SparkApplication's driver and executor specs; an
    AppWrapper's podSetInfos, its wrapped template left as written)."""
    objects = [small(d, ns) for name in ("mpijob", "tfjob", "paddlejob", "xgboostjob",
                                         "jaxjob", "rayservice", "appwrapper", "sparkapplication")
               for d in fixture(f"{name}.yaml")]  # fmt: skip
    rayjob = small(yaml.safe_load((MANIFESTS / "rayjob.yaml").read_text()), ns)
    rayjob["metadata"]["labels"].pop("kueue.x-k8s.io/priority-class")
    rayjob["spec"]["submitterPodTemplate"] = {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "submit", "image": "rayproject/ray:2.40.0",
         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}  # fmt: skip
    objects.append(rayjob)
    for obj in objects:  # the TFJob names a priority class the policy does not have
        obj["spec"].get("runPolicy", {}).pop("schedulingPolicy", None)
        for spec in (obj["spec"].get("tfReplicaSpecs") or {}).values():
            spec["template"]["spec"].pop("priorityClassName", None)
    with governed(kube, ns):
        for obj in objects:
            kind = SUSPENDED[obj["kind"]]
            created = kube.kube.create(resource(kind), obj, ns)
            assert kind.suspended(created), obj["kind"]  # the webhook suspended it

        def admitted_all() -> list[str]:
            waiting = []
            for obj in objects:
                got = kube.kube.get(resource(SUSPENDED[obj["kind"]]), obj["metadata"]["name"], ns)
                if ADMISSION not in annotations_of(got):
                    waiting.append(f"{obj['kind']} {obj['metadata']['name']}")
            return waiting

        wait_for("every kind admitted", lambda: not admitted_all(), timeout=60)
        for obj in objects:
            kind = SUSPENDED[obj["kind"]]
            got = kube.kube.get(resource(kind), obj["metadata"]["name"], ns)
            assert not kind.suspended(got), obj["kind"]
            paths = kind.selector_paths(got)
            assert paths, obj["kind"]
            for name, path in paths.items():
                selector = get(got, (*path, "nodeSelector"))
                assert selector == {TYPE: FLAVOR}, (obj["kind"], name, selector)
            assert json.loads(annotations_of(got)[ADMISSION])["team"] == "research"
        aw = kube.kube.get(resource(SUSPENDED["AppWrapper"]), "sample-job", ns)
        wrapped = aw["spec"]["components"][0]["template"]["spec"]["template"]["spec"]
        assert "nodeSelector" not in wrapped  # the AppWrapper controller applies podSetInfos
        rj = kube.kube.get(resource(SUSPENDED["RayJob"]), rayjob["metadata"]["name"], ns)
        assert rj["spec"]["submitterPodTemplate"]["spec"]["nodeSelector"] == {TYPE: FLAVOR}


def test_pod_group_kinds_are_queued_through_their_pods(kube: Harness, ns: str) -> None:
    """A Deployment's pods each admitted alone; a StatefulSet's pods one group, admitted with
    its first pod (the controller creates them one at a time) and the later ones let through
    under that admission; a LeaderWorkerSet's group (created as its controller creates it)
    admitted whole; a CronJob's Job admitted as a Job."""
    deployment = small(fixture("deployment.yaml")[0], ns)
    deployment["spec"]["replicas"] = 2
    sts = small(fixture("statefulset.yaml")[0], ns)
    sts["spec"]["replicas"] = 2
    lws = small(fixture("leaderworkerset.yaml")[0], ns)
    lws["spec"]["replicas"] = 1
    lws["spec"]["leaderWorkerTemplate"]["size"] = 2
    cron = fixture("cronjob.yaml")[0]
    cron["metadata"]["namespace"] = ns
    labels = cron["spec"]["jobTemplate"]["metadata"]["labels"]
    labels.pop("kueue.x-k8s.io/queue-name")
    labels["fleetshare.io/team"] = "research"
    job_spec = cron["spec"]["jobTemplate"]["spec"]
    job_spec.update(parallelism=1, completions=1)
    job_spec["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "64Mi"}
    }
    with governed(kube, ns):
        cronjob = kube.kube.create(resource(KINDS["CronJob"]), cron, ns)  # runs each minute
        kube.kube.create(resource(KINDS["Deployment"]), deployment, ns)
        kube.kube.create(resource(KINDS["StatefulSet"]), sts, ns)
        marked = kube.kube.create(resource(KINDS["LeaderWorkerSet"]), lws, ns)
        for template in ("leaderTemplate", "workerTemplate"):  # the webhook marked them
            meta = marked["spec"]["leaderWorkerTemplate"][template]["metadata"]
            assert meta["labels"]["fleetshare.io/team"] == "research"
        lws_pods = []
        for worker in range(2):  # the LeaderWorkerSet controller's part: group 0's pods
            template = marked["spec"]["leaderWorkerTemplate"]["leaderTemplate" if worker == 0
                                                              else "workerTemplate"]  # fmt: skip
            name = "nginx-leaderworkerset-0" + (f"-{worker}" if worker else "")
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": ns,
                "labels": {**template["metadata"]["labels"],
                           "leaderworkerset.sigs.k8s.io/name": "nginx-leaderworkerset",
                           "leaderworkerset.sigs.k8s.io/group-index": "0",
                           "leaderworkerset.sigs.k8s.io/worker-index": str(worker)},
                "annotations": {**template["metadata"].get("annotations", {}),
                                "leaderworkerset.sigs.k8s.io/size": "2"}},
                "spec": template["spec"]}  # fmt: skip
            created = kube.kube.create(PODS, pod, ns)
            assert created["metadata"]["labels"][POD_GROUP_LABEL] == "nginx-leaderworkerset-0"
            assert GATE in {g["name"] for g in created["spec"]["schedulingGates"]}
            lws_pods.append(name)

        def running(selector: str) -> list[str]:
            pods = kube.pods(ns, selector)
            return sorted(p["metadata"]["name"] for p in pods
                          if p["status"].get("phase") == "Running"
                          and p["spec"].get("nodeSelector") == {TYPE: FLAVOR}
                          and ADMISSION in annotations_of(p))  # fmt: skip

        wait_for("the Deployment's 2 pods admitted and running",
                 lambda: len(running("app=nginx,!statefulset.kubernetes.io/pod-name,"
                                     "!leaderworkerset.sigs.k8s.io/name")) == 2)  # fmt: skip
        wait_for("the StatefulSet's 2 pods admitted one after the other and running",
                 lambda: running("statefulset.kubernetes.io/pod-name")
                 == ["nginx-statefulset-0", "nginx-statefulset-1"], timeout=60)  # fmt: skip
        group = {p["metadata"]["labels"].get(POD_GROUP_LABEL)
                 for p in kube.pods(ns, "statefulset.kubernetes.io/pod-name")}  # fmt: skip
        assert group == {"nginx-statefulset"}
        wait_for("the LeaderWorkerSet's group admitted and running",
                 lambda: running("leaderworkerset.sigs.k8s.io/name") == lws_pods)  # fmt: skip

        def cron_job() -> str | None:
            jobs, _ = kube.kube.list(JOBS, ns)
            uid = cronjob["metadata"]["uid"]
            mine = [
                j
                for j in jobs
                if uid in {o.get("uid") for o in j["metadata"].get("ownerReferences", ())}
            ]
            return next((j["metadata"]["name"] for j in mine
                         if admitted(kube, ns, j["metadata"]["name"])), None)  # fmt: skip

        wait_for("a Job of the CronJob admitted (it runs at the next minute)", cron_job,
                 timeout=90, interval=1.0)  # fmt: skip
    for res in (resource(KINDS["CronJob"]), resource(KINDS["Deployment"]), REPLICASETS,
                resource(KINDS["StatefulSet"]), resource(KINDS["LeaderWorkerSet"])):  # fmt: skip
        for item in kube.kube.list(res, ns)[0]:
            with contextlib.suppress(KubeError):
                kube.kube.delete(res, item["metadata"]["name"], ns)
    for pod in kube.pods(ns):
        with contextlib.suppress(KubeError):
            kube.kube.delete(PODS, pod["metadata"]["name"], ns, gracePeriodSeconds=0)


def test_a_pod_priority_class_gives_its_value(kube: Harness, ns: str) -> None:
    """Jobs whose templates name PriorityClasses (``scheduling.k8s.io/v1``; the policy has no
    classes of those names) get their values as priorities, as Kueue gives them: with the
    team's GPUs taken, the one of value 10 preempts a Job of none (priority 0), and the one of
    value 1000 preempts it in turn."""
    low, high = f"{ns}-low", f"{ns}-high"
    for name, value in ((low, 10), (high, 1000)):
        kube.kube.create(PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1",
                                            "kind": "PriorityClass", "metadata": {"name": name},
                                            "value": value})  # fmt: skip
    try:
        with governed(kube, ns):
            kube.kube.create(JOBS, gpu_job(ns, "plain", "research", 4), ns)
            wait_for("plain admitted", lambda: admitted(kube, ns, "plain"))
            for name, klass in (("low", low), ("high", high)):
                job = gpu_job(ns, name, "research", 4)
                job["spec"]["template"]["spec"]["priorityClassName"] = klass
                kube.kube.create(JOBS, job, ns)
                wait_for(f"{name} admitted", lambda name=name: admitted(kube, ns, name))
            assert not admitted(kube, ns, "plain") and not admitted(kube, ns, "low")
            wanted = (f"{ns}/low (priority 10) preempts {ns}/plain (priority 0)",
                      f"{ns}/high (priority 1000) preempts {ns}/low (priority 10)")  # fmt: skip

            def preempted_by_value() -> bool:  # the Events are posted in the background
                said = [e["message"] for e in kube.events(ns) if e["reason"] == "Preempted"]
                return all(any(w in m for m in said) for w in wanted)

            wait_for("Preempted Events naming the PriorityClasses' values", preempted_by_value)
    finally:
        for name in (low, high):
            with contextlib.suppress(KubeError):
                kube.kube.delete(PRIORITY_CLASSES, name)
