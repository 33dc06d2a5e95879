"""The operator's pure parts: objects read as model objects, CRDs, webhook patches (no API)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.operator.crds import crds, policy_from, policy_objects, structural
from fleetshare.operator.kinds import COMPLETION_INDEX, JOB
from fleetshare.operator.objects import (
    ADMISSION,
    EVICTION,
    GATE,
    INJECTED,
    Admitted,
    admission_of,
    eviction_record,
    group_complete,
    job_phase,
    last_admission,
    node_from_object,
    parse_job,
    parse_pods,
    pods_phase,
)
from fleetshare.operator.webhook import mutation, review
from fleetshare.policy.hyperpod import import_hyperpod
from fleetshare.policy.kueue import import_kueue
from fleetshare.policy.schema import PolicyError, Team

FIXTURES = Path(__file__).parent / "fixtures"


def _yaml(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / "manifests" / name).read_text()) if d]


def test_node_object_with_mig_taints_and_conditions() -> None:
    node = node_from_object(
        {
            "metadata": {
                "name": "n1",
                "labels": {
                    "node.kubernetes.io/instance-type": "p4d.24xlarge",
                    "topology.kubernetes.io/zone": "us-east-1a",
                    "karpenter.sh/capacity-type": "spot",
                },
            },
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            },
            "status": {
                "allocatable": {"cpu": "95500m", "memory": "1100Gi", "nvidia.com/mig-1g.5gb": "56"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    assert node.allocatable["cpu"] == 95_500
    assert node.allocatable["nvidia.com/mig-1g.5gb"] == 56_000
    assert node.instance_type == "p4d.24xlarge" and node.zone == "us-east-1a"
    assert node.capacity_type == "spot"
    assert node.ready and node.unschedulable and not node.schedulable
    assert node.taints[0].key == "nvidia.com/gpu"
    not_ready = node_from_object({"metadata": {"name": "n2"}, "status": {"conditions": [
        {"type": "Ready", "status": "Unknown"}]}})  # fmt: skip
    assert not not_ready.ready


def test_kueue_sample_job_reads_as_the_scenario_parser_reads_it() -> None:
    (job,) = _yaml("sample-job.yaml")
    parsed = parse_job(job)
    assert parsed.queue == "team-a/user-queue"
    (podset,) = parsed.podsets
    assert podset.count == 3
    assert podset.requests["cpu"] == 4000 and podset.requests["nvidia.com/gpu"] == 1000
    assert job_phase(job) == "pending"


def test_injected_selector_and_operator_annotations_are_not_the_users() -> None:
    (job,) = _yaml("sample-job.yaml")
    job = copy.deepcopy(job)
    job["metadata"]["annotations"][INJECTED] = '["node.kubernetes.io/instance-type"]'
    job["metadata"]["annotations"][ADMISSION] = Admitted(("f",), ((("n", 3),),), 1.0, "t", {}
                                                         ).to_json()  # fmt: skip
    job["spec"]["template"]["spec"]["nodeSelector"] = {
        "node.kubernetes.io/instance-type": "g5.8xlarge",
        "disk": "ssd",
    }
    (podset,) = parse_job(job).podsets
    assert dict(podset.node_selector) == {"disk": "ssd"}
    job["spec"]["suspend"] = False
    assert job_phase(job) == "admitted"
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert job_phase(job) == "finished"


def _job_pod(name: str, phase: str, index: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if index is not None:
        meta["annotations"] = {COMPLETION_INDEX: index}
    return {"metadata": meta, "status": {"phase": phase}}


def _running_job(**spec: Any) -> dict[str, Any]:
    (job,) = _yaml("sample-job.yaml")
    job = copy.deepcopy(job)
    job["spec"].update(spec, suspend=False)
    job["metadata"].setdefault("annotations", {})[ADMISSION] = Admitted(
        ("f",), ((("n", 1),),), 1.0, "t", {}
    ).to_json()
    return job


def test_an_eviction_record_keeps_the_admission_it_ended() -> None:
    """An evicted Job loses its admission annotation (it is pending again) but the eviction
    record keeps the admission it ended: a Job whose pods succeeded just as it was evicted
    (the Job controller completes it anyway) still says when it was admitted."""
    job = _running_job()
    admitted = admission_of(job)
    record = json.loads(eviction_record(job, "priority", "ns/big", "a higher priority", 9.0))
    assert (record["reason"], record["by"], record["at"]) == ("priority", "ns/big", 9.0)
    assert record["message"] == "a higher priority"
    evicted = copy.deepcopy(job)
    evicted["spec"]["suspend"] = True
    annotations = evicted["metadata"]["annotations"]
    del annotations[ADMISSION]
    annotations[EVICTION] = json.dumps(record)
    assert admission_of(evicted) is None and job_phase(evicted) == "pending"
    assert last_admission(evicted) == admitted == last_admission(job)
    never = copy.deepcopy(evicted)  # evicted before its admission was written: none to keep
    never["metadata"]["annotations"][EVICTION] = eviction_record(evicted, "reclaim", "x", "", 1.0)
    assert last_admission(never) is None
    never["metadata"]["annotations"][EVICTION] = "not json"
    assert last_admission(never) is None


def test_job_finished_when_its_pods_succeeded_before_the_complete_condition() -> None:
    job = _running_job(parallelism=2, completions=2)
    one = [_job_pod("a", "Succeeded"), _job_pod("b", "Running")]
    assert job_phase(job, JOB, one) == "admitted"
    assert job_phase(job, JOB, [*one, _job_pod("c", "Failed")]) == "admitted"
    both = [_job_pod("a", "Succeeded"), _job_pod("b", "Succeeded")]
    assert job_phase(job, JOB, both) == "finished"
    assert job_phase(job) == "admitted"  # the object alone, with no Complete condition yet
    # pods counted by the Job controller and gone (after a restart, say): its status says it
    job["status"] = {"succeeded": 1, "uncountedTerminatedPods": {"succeeded": ["uid-b"]}}
    assert job_phase(job, JOB, []) == "finished"
    job["status"] = {"succeeded": 1}
    assert job_phase(job, JOB, [_job_pod("a", "Succeeded")]) == "admitted"
    job["spec"]["suspend"] = True  # preempted after its work was done: done all the same
    assert job_phase(job, JOB, both) == "finished"


def test_indexed_job_counts_distinct_indexes_and_work_queue_waits_for_every_pod() -> None:
    job = _running_job(parallelism=2, completions=2, completionMode="Indexed")
    again = [_job_pod("a", "Succeeded", "0"), _job_pod("a2", "Succeeded", "0")]
    assert job_phase(job, JOB, again) == "admitted"
    assert job_phase(job, JOB, [*again, _job_pod("b", "Succeeded", "1")]) == "finished"
    queue = _running_job(parallelism=2, completions=None)  # a work queue: no completions
    running = [_job_pod("a", "Succeeded"), _job_pod("b", "Running")]
    assert job_phase(queue, JOB, running) == "admitted"
    assert job_phase(queue, JOB, [_job_pod("a", "Succeeded"), _job_pod("b", "Failed")]) == (
        "finished"
    )
    assert job_phase(queue, JOB, [_job_pod("a", "Failed")]) == "admitted"


def test_pod_group_and_gates() -> None:
    pods = _yaml("pod-group.yaml")
    for i, pod in enumerate(pods):
        pod["metadata"]["name"] = f"sample-pod-{i}"
        pod["spec"]["schedulingGates"] = [{"name": GATE}]
    assert group_complete(pods) and not group_complete(pods[:1])
    parsed = parse_pods(pods)
    assert len(parsed.podsets) == 2
    assert pods_phase(pods) == "pending"
    for pod in pods:
        pod["spec"]["schedulingGates"] = []
    assert pods_phase(pods) == "outside"  # ungated by someone else
    for pod in pods:
        pod["status"] = {"phase": "Succeeded"}
    assert pods_phase(pods) == "finished"


def test_webhook_gates_governed_pods_and_suspends_jobs() -> None:
    (pod,) = _yaml("pod-group.yaml")[:1]
    assert mutation(pod) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}
    ]
    plain = {"kind": "Pod", "metadata": {"name": "x"}, "spec": {}}
    assert mutation(plain) == []
    owned = copy.deepcopy(pod)
    owned["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "u"}]
    assert mutation(owned) == []
    (job,) = _yaml("sample-job.yaml")
    job = copy.deepcopy(job)
    assert mutation(job) == []  # already suspended
    job["spec"]["suspend"] = False
    assert mutation(job) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    answer = review({"request": {"uid": "u1", "operation": "CREATE", "object": pod,
                                 "kind": {"kind": "Pod"}}})  # fmt: skip
    assert answer["response"]["allowed"] and answer["response"]["patchType"] == "JSONPatch"


def test_crd_schemas_are_structural() -> None:
    def walk(node: Any, path: str) -> None:
        assert "$ref" not in node and "anyOf" not in node, path
        if "properties" in node:
            assert node.get("type") == "object", path
            for k, v in node["properties"].items():
                walk(v, f"{path}.{k}")
        if "items" in node:
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")
        assert (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        ), path

    for crd in crds():
        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], crd["metadata"]["name"])
    team = structural(Team.model_json_schema())
    assert team["properties"]["quota"]["items"]["properties"]["instance_type"]["type"] == "string"


def test_policy_round_trips_through_objects() -> None:
    policy = import_hyperpod((FIXTURES / "hyperpod_walkthrough.json").read_text())
    objects = policy_objects(policy)
    assert [o["kind"] for o in objects] == ["ClusterPolicy"] + ["Team"] * len(policy.teams)
    back = policy_from(objects[0], objects[1:])
    assert back.teams == policy.teams and back.cluster == policy.cluster
    kueue = import_kueue((FIXTURES / "kueue_full.yaml").read_text())
    objects = policy_objects(kueue)
    back = policy_from(objects[0], objects[1:])
    assert back.groups == kueue.groups and back.teams == kueue.teams
    bad = copy.deepcopy(objects[1])
    bad["spec"]["quota"] = [{"flavor": "x"}]
    with pytest.raises(PolicyError, match="quota"):
        policy_from(objects[0], [bad])


def test_crd_schemas_use_openapi_v3_exclusive_bounds() -> None:
    """The API server refuses a CRD whose schema writes exclusiveMinimum as a number (JSON
    Schema 2020-12, what pydantic emits for gt=0): bounds become minimum + a boolean flag."""
    from fleetshare.operator.crds import crds

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key in ("exclusiveMinimum", "exclusiveMaximum"):
                if key in node:
                    assert isinstance(node[key], bool), node
                    assert ("minimum" if key == "exclusiveMinimum" else "maximum") in node
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for crd in crds():
        walk(crd)
    found = json.dumps(crds())
    assert '"exclusiveMinimum": true' in found  # the policy schema has gt=0 fields


def _kind_objects() -> list[dict[str, Any]]:
    pod = {"spec": {"containers": [{"name": "c", "image": "i",
                                    "resources": {"requests": {"cpu": "1"}}}]}}  # fmt: skip
    meta = {"name": "w", "namespace": "ns", "labels": {"fleetshare.io/team": "t"}}
    ray = {"headGroupSpec": {"template": pod},
           "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": pod}]}  # fmt: skip
    return [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
         "spec": {"replicatedJobs": [
             {"name": "leader", "template": {"spec": {"template": pod}}},
             {"name": "workers", "replicas": 2, "template": {"spec": {"template": pod}}}]}},
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
         "spec": {"pytorchReplicaSpecs": {"Master": {"template": pod},
                                          "Worker": {"replicas": 3, "template": pod}}}},
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": ray},
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta,
         "spec": {"entrypoint": "python x.py", "rayClusterSpec": ray}},
    ]  # fmt: skip


def test_webhook_suspends_every_kind_and_leaves_owned_objects_alone() -> None:
    for obj in _kind_objects():
        patch = mutation(obj)
        assert patch[-1]["value"] is True and patch[-1]["path"].endswith("/suspend")
    pytorch = _kind_objects()[1]
    assert [op["path"] for op in mutation(pytorch)] == [
        "/spec/runPolicy",
        "/spec/runPolicy/suspend",
    ]
    child = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "w-leader-0", "labels": {"fleetshare.io/team": "t"},
        "ownerReferences": [{"kind": "JobSet", "name": "w", "uid": "u"}]}, "spec": {}}  # fmt: skip
    assert mutation(child) == []  # the JobSet is the workload


def test_a_team_status_patch_removes_what_went_to_zero() -> None:
    """A JSON merge patch keeps the map keys it does not name (RFC 7386): a resource no
    longer used or borrowed is named with null, so the API server removes it."""
    from fleetshare.operator.status import status_patch

    old = {"used": {"nvidia.com/gpu": "1", "cpu": "4"}, "borrowed": {"nvidia.com/gpu": "2"}}
    new = {"used": {"cpu": "2"}, "borrowed": {}, "admitted": 1}
    assert status_patch(old, new) == {
        "used": {"cpu": "2", "nvidia.com/gpu": None},
        "borrowed": {"nvidia.com/gpu": None},
        "admitted": 1,
    }
    assert status_patch(new, new) == new
