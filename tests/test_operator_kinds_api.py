"""JobSets and PyTorchJobs governed through a real API server, their CRDs installed from the
minimal CRDs in tests/fixtures/crds/ (written to the upstream schemas of the fields read; no
JobSet or training-operator controller runs: the test plays their part by marking a JobSet
Completed)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.manifests.kinds.jobset import JOBSET
from fleetshare.manifests.kinds.pytorchjob import PYTORCHJOB
from fleetshare.operator.kinds import resource
from fleetshare.operator.kube import CRDS, KubeError, Resource
from fleetshare.operator.objects import ADMISSION, PENDING_REASON
from fleetshare.policy.schema import load_policy
from tests.kube_harness import Harness, OperatorThread, apply_policy, wait_for

pytestmark = pytest.mark.slow
FIXTURE = Path(__file__).parent / "fixtures" / "crds" / "workload-kinds.yaml"
TYPE = "node.kubernetes.io/instance-type"
POLICY = {
    "teams": [{"name": "research", "quota": [{"instance_type": "ml.g5.12xlarge", "count": 1}]}],
}


def install_kinds(kube: Harness) -> None:
    for crd in yaml.safe_load_all(FIXTURE.read_text()):
        try:
            kube.kube.create(CRDS, crd)
        except KubeError as exc:
            if exc.status != 409:
                raise
    for crd in yaml.safe_load_all(FIXTURE.read_text()):
        name = crd["metadata"]["name"]
        wait_for(f"{name} served", lambda name=name: established(kube.kube.get(CRDS, name)))


def established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def annotations(kube: Harness, res: Resource, ns: str, name: str) -> dict[str, str]:
    found: dict[str, str] = kube.kube.get(res, name, ns)["metadata"].get("annotations") or {}
    return found


def template(gpus: int) -> dict[str, Any]:
    resources = {"requests": {"cpu": "2"}, "limits": {"nvidia.com/gpu": str(gpus)}}
    container = {"name": "main", "image": "registry.example/train:1", "resources": resources}
    return {"spec": {"restartPolicy": "Never", "containers": [container]}}


def jobset(ns: str, name: str) -> dict[str, Any]:
    """A leader (1 pod) and 2 workers, 1 GPU each; created running (no webhook here)."""

    def rjob(rname: str, pods: int) -> dict[str, Any]:
        return {"name": rname, "replicas": 1, "template": {"spec": {
            "parallelism": pods, "completions": pods, "template": template(1)}}}  # fmt: skip

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": ns, "labels": {"fleetshare.io/team": "research"}},
        "spec": {"replicatedJobs": [rjob("leader", 1), rjob("workers", 2)]},
    }  # fmt: skip


def pytorchjob(ns: str, name: str) -> dict[str, Any]:
    """A master and 2 workers, 1 GPU each, without a runPolicy (the operator makes one)."""
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns, "labels": {"fleetshare.io/team": "research"}},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": template(1)},
            "Worker": {"replicas": 2, "template": template(1)}}},
    }  # fmt: skip


def test_jobset_and_pytorchjob_admitted_by_suspension(kube: Harness, ns: str) -> None:
    install_kinds(kube)
    apply_policy(kube, load_policy(POLICY))
    kube.add_node(f"{ns}-g5", {"cpu": "48", "memory": "192Gi", "nvidia.com/gpu": "4"},
                  {TYPE: "ml.g5.12xlarge"}, owner=ns)  # fmt: skip
    op = OperatorThread(kube, [ns]).start()
    try:
        kube.kube.create(resource(JOBSET), jobset(ns, "js"), ns)
        wait_for("the JobSet admitted",
                 lambda: ADMISSION in annotations(kube, resource(JOBSET), ns, "js"))  # fmt: skip
        js = kube.kube.get(resource(JOBSET), "js", ns)
        assert js["spec"]["suspend"] is False  # created running: suspended, then admitted
        for rjob in js["spec"]["replicatedJobs"]:  # each pod set's template has the flavor
            pod_spec = rjob["template"]["spec"]["template"]["spec"]
            assert pod_spec["nodeSelector"] == {TYPE: "ml.g5.12xlarge"}
        assert json.loads(js["metadata"]["annotations"][ADMISSION])["team"] == "research"

        def reasons() -> set[str]:
            return {e["reason"] for e in kube.events(ns)}

        wait_for("its Suspended and Admitted Events (posted in the background)",
                 lambda: {"Suspended", "Admitted"} <= reasons())  # fmt: skip

        pytorch = resource(PYTORCHJOB)
        kube.kube.create(pytorch, pytorchjob(ns, "pt"), ns)
        wait_for("the PyTorchJob says why it waits",
                 lambda: PENDING_REASON in annotations(kube, pytorch, ns, "pt"))  # fmt: skip
        pt = kube.kube.get(resource(PYTORCHJOB), "pt", ns)
        assert pt["spec"]["runPolicy"]["suspend"] is True
        assert ADMISSION not in pt["metadata"]["annotations"]

        # the JobSet controller's part: the JobSet completes, its quota is free
        completed = {"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                     "message": "done", "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
        done = {"status": {"conditions": [completed]}}
        kube.kube.patch(resource(JOBSET), "js", done, ns, sub="status")
        wait_for("the PyTorchJob admitted", lambda: not kube.kube.get(
            resource(PYTORCHJOB), "pt", ns)["spec"]["runPolicy"]["suspend"])  # fmt: skip
        pt = kube.kube.get(resource(PYTORCHJOB), "pt", ns)
        for replica in pt["spec"]["pytorchReplicaSpecs"].values():
            assert replica["template"]["spec"]["nodeSelector"] == {TYPE: "ml.g5.12xlarge"}
        assert PENDING_REASON not in pt["metadata"]["annotations"]
    finally:
        op.stop()
        for res, name in ((resource(JOBSET), "js"), (resource(PYTORCHJOB), "pt")):
            with contextlib.suppress(KubeError):
                kube.kube.delete(res, name, ns)
