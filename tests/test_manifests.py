"""Kubernetes workload manifests as workloads (issue 10, item 5): pod counts and requests as
Kubernetes and Kueue compute them, placement constraints carried, every field read checked and
every unsupported kind named. Expected numbers are computed by hand in the comments."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fleetshare.cli import app
from fleetshare.manifests import (
    Defaults,
    Document,
    ManifestError,
    ManifestWorkload,
    effective_requests,
    parse_duration,
    parse_manifest,
    parse_manifests,
    parse_text,
)
from fleetshare.model.node import NodeSelectorRequirement, Toleration
from fleetshare.scenario.loader import ScenarioError, load_scenario_data

FIXTURES = Path(__file__).parent / "fixtures" / "manifests"
GI = 2**30 * 1000
MI = 2**20 * 1000


def container(requests: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if "limits" in more:
        resources["limits"] = more.pop("limits")
    return {"name": "c", "image": "busybox", "resources": resources, **more}


def pod(spec: dict[str, Any], name: str = "p", **metadata: Any) -> dict[str, Any]:
    labels = metadata.pop("labels", {"kueue.x-k8s.io/queue-name": "q"})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, **metadata},
        "spec": spec,
    }


def job(template_spec: dict[str, Any], name: str = "j", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {**spec, "template": {"spec": template_spec}},
    }


def one_pod(spec: dict[str, Any]) -> dict[str, int]:
    """The effective request of a single pod with this spec."""
    (podset,) = parse_manifest(pod(spec)).podsets
    assert podset.count == 1
    return podset.requests


def counts(w: ManifestWorkload) -> dict[str, int]:
    return {ps.name: ps.count for ps in w.podsets}


def error_of(data: Any, where: str = "jobs.yaml document 3") -> str:
    with pytest.raises(ManifestError) as info:
        parse_manifests([Document(where, data)])
    return str(info.value)


# -- request arithmetic ---------------------------------------------------------------------------


def test_app_containers_add_up_and_init_containers_take_the_max() -> None:
    # app: 1 + 2 = 3 cpu, 1Gi + 2Gi = 3Gi; init: 4 cpu, 1Gi, then 500m, 8Gi
    # -> cpu max(3, 4, 0.5) = 4, memory max(3Gi, 1Gi, 8Gi) = 8Gi
    spec = {
        "initContainers": [
            container({"cpu": 4, "memory": "1Gi"}),
            container({"cpu": "500m", "memory": "8Gi"}),
        ],
        "containers": [
            container({"cpu": 1, "memory": "1Gi"}),
            container({"cpu": 2, "memory": "2Gi"}),
        ],
    }
    assert one_pod(spec) == {"cpu": 4000, "memory": 8 * GI}


def test_sidecars_add_to_the_sum_and_to_later_init_containers() -> None:
    # Kubernetes 1.29+ (sidecar KEP-753): a restartPolicy: Always init container runs beside
    # everything started after it. Order: sidecar-a 500m, init 2 cpu, sidecar-b 250m; app 1 cpu.
    # sum: app 1 + sidecars 0.5 + 0.25 = 1.75; init peak: max(0.5, 2 + 0.5, 0.75) = 2.5
    # -> 2.5 cpu. A sidecar started after the init (sidecar-b) does not run beside it.
    spec = {
        "initContainers": [
            container({"cpu": "500m"}, restartPolicy="Always"),
            container({"cpu": 2}),
            container({"cpu": "250m"}, restartPolicy="Always"),
        ],
        "containers": [container({"cpu": 1})],
    }
    assert one_pod(spec) == {"cpu": 2500}
    # with a small init container the sum wins: max(1.75, 0.5, 0.1 + 0.5, 0.75) = 1.75
    spec["initContainers"][1] = container({"cpu": "100m"})
    assert one_pod(spec) == {"cpu": 1750}


def test_overhead_is_added_after_the_max() -> None:
    # max(app 1, init 3) = 3 cpu, + overhead 250m = 3.25; memory 2Gi + 120Mi
    spec = {
        "initContainers": [container({"cpu": 3})],
        "containers": [container({"cpu": 1, "memory": "2Gi"})],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }
    assert one_pod(spec) == {"cpu": 3250, "memory": 2 * GI + 120 * MI}


def test_limits_stand_in_for_missing_requests_per_resource() -> None:
    # cpu: request 1 (limit 2 does not count); memory: no request, limit 4Gi -> 4Gi;
    # nvidia.com/gpu: limit only -> 1
    spec = {
        "containers": [
            container({"cpu": 1}, limits={"cpu": 2, "memory": "4Gi", "nvidia.com/gpu": 1})
        ]
    }
    assert one_pod(spec) == {"cpu": 1000, "memory": 4 * GI, "nvidia.com/gpu": 1000}


def test_pod_level_resources_replace_the_container_sum() -> None:
    # containers 1 + 1 = 2 cpu and 1Gi; pod-level requests cpu 3 -> 3 cpu, memory unchanged
    spec = {
        "containers": [container({"cpu": 1, "memory": "1Gi"}), container({"cpu": 1})],
        "resources": {"requests": {"cpu": 3}},
    }
    assert one_pod(spec) == {"cpu": 3000, "memory": GI}


def test_effective_requests_directly() -> None:
    assert effective_requests(
        [{"cpu": 1000}], [({"cpu": 500}, True), ({"cpu": 2000}, False)], {"cpu": 100}
    ) == {"cpu": 2600}
    assert effective_requests([{"cpu": 0}], []) == {}


def test_kubernetes_resource_rules_are_enforced() -> None:
    over = pod({"containers": [container({"cpu": 3}, limits={"cpu": 2})]})
    assert "spec.containers[0].resources.requests.cpu: must be less than or equal" in error_of(over)
    no_limit = pod({"containers": [container({"nvidia.com/gpu": 1})]})
    message = error_of(no_limit)
    assert "spec.containers[0].resources.limits.nvidia.com/gpu: is required" in message
    unequal = pod({"containers": [container({"nvidia.com/gpu": 1}, limits={"nvidia.com/gpu": 2})]})
    assert "must equal its limit" in error_of(unequal)
    bad_policy = pod(
        {
            "initContainers": [container({"cpu": 1}, restartPolicy="OnFailure")],
            "containers": [container()],
        }
    )
    assert "initContainers[0].restartPolicy: init containers take only Always" in error_of(
        bad_policy
    )


# -- pod counts per kind --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "pods"),
    [({}, 1), ({"parallelism": 3}, 3), ({"parallelism": 3, "completions": 6}, 3),
     ({"parallelism": 4, "completions": 2}, 2), ({"completions": 5}, 1)],
)  # fmt: skip
def test_job_runs_parallelism_capped_by_completions(spec: dict[str, Any], pods: int) -> None:
    w = parse_manifest(job({"containers": [container({"cpu": 1})]}, **spec))
    assert counts(w) == {"main": pods}
    assert w.kind == "Job"


def test_absurd_pod_counts_are_refused() -> None:
    data = job({"containers": [container({"cpu": 1})]}, parallelism=10**12)
    assert "(Job default/j): has 1,000,000,000,000 pods; at most 1,000,000" in error_of(data)


def test_job_with_no_pods_is_refused() -> None:
    message = error_of(job({"containers": [container({"cpu": 1})]}, parallelism=0))
    assert "jobs.yaml document 3 (Job default/j): spec.parallelism: is 0" in message


def test_pytorchjob_has_a_pod_set_per_replica_type() -> None:
    template = {"spec": {"containers": [container(limits={"nvidia.com/gpu": 1})]}}
    data = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": 3, "template": template},
                "Master": {"template": template},  # replicas default to 1
            }
        },
    }
    w = parse_manifest(data)
    assert [(ps.name, ps.count) for ps in w.podsets] == [("master", 1), ("worker", 3)]
    assert w.podsets[1].requests == {"nvidia.com/gpu": 1000}
    data["spec"]["pytorchReplicaSpecs"]["Chief"] = {"template": template}
    assert "spec.pytorchReplicaSpecs.Chief: replica types are Master and Worker" in error_of(data)


def test_jobset_pod_set_is_replicas_times_job_pods() -> None:
    def replicated(name: str, replicas: int, parallelism: int) -> dict[str, Any]:
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "spec": {
                    "parallelism": parallelism,
                    "completions": parallelism,
                    "template": {"spec": {"containers": [container({"cpu": 1})]}},
                }
            },
        }

    data = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"replicatedJobs": [replicated("driver", 1, 1), replicated("workers", 3, 2)]},
    }
    assert counts(parse_manifest(data)) == {"driver": 1, "workers": 6}
    data["spec"]["replicatedJobs"][1]["name"] = "driver"
    assert "spec.replicatedJobs[1].name: repeats 'driver'" in error_of(data)


def ray_spec(*groups: dict[str, Any]) -> dict[str, Any]:
    template = {"spec": {"containers": [container({"cpu": 1})]}}
    return {
        "headGroupSpec": {"template": template},
        "workerGroupSpecs": [{"template": template, **g} for g in groups],
    }


def test_raycluster_head_plus_worker_groups() -> None:
    data = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": ray_spec(
            {"groupName": "given", "replicas": 2, "minReplicas": 1, "maxReplicas": 5},
            {"groupName": "at-min", "minReplicas": 3},  # no replicas: minReplicas
            {"groupName": "capped", "replicas": 9, "maxReplicas": 4},  # kept within max
            {"groupName": "raised", "replicas": 1, "minReplicas": 2},  # kept within min
            {"groupName": "multi-host", "replicas": 2, "numOfHosts": 4},  # 2 x 4 hosts
            {"groupName": "scaled-to-zero", "minReplicas": 0},  # 0 pods: left out
        ),
    }
    assert counts(parse_manifest(data)) == {
        "head": 1,
        "given": 2,
        "at-min": 3,
        "capped": 4,
        "raised": 2,
        "multi-host": 8,
    }
    data["spec"]["workerGroupSpecs"] = [{"groupName": "x", "minReplicas": 3, "maxReplicas": 2}]
    assert "workerGroupSpecs[0].minReplicas: 3 is above maxReplicas 2" in error_of(data)


def test_rayjob_counts_its_cluster_and_the_submitter_pod() -> None:
    """Kueue counts a RayJob's submitter pod in K8sJobMode (KubeRay's default): the
    ``submitterPodTemplate``, else KubeRay's default submitter (500m CPU, 200Mi requested)."""
    data = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rj", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "entrypoint": "python x.py",
            "rayClusterSpec": ray_spec({"groupName": "w", "replicas": 2}),
        },
    }
    w = parse_manifest(data)
    assert counts(w) == {"head": 1, "w": 2, "submitter": 1}
    assert w.podsets[-1].requests == {"cpu": 500, "memory": 200 * MI}
    data["spec"]["submitterPodTemplate"] = {
        "spec": {"containers": [container({"cpu": 2, "memory": "1Gi"})]}
    }
    assert parse_manifest(data).podsets[-1].requests == {"cpu": 2000, "memory": GI}
    data["spec"]["submissionMode"] = "HTTPMode"  # the operator submits over HTTP: no pod
    assert counts(parse_manifest(data)) == {"head": 1, "w": 2}
    del data["spec"]["rayClusterSpec"]
    data["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    assert "spec.clusterSelector: a RayJob on an existing RayCluster" in error_of(data)


def group_pod(
    name: str, requests: dict[str, Any], total: str = "3", **labels: str
) -> dict[str, Any]:
    return pod(
        {"containers": [container(requests)]},
        name=name,
        labels={
            "kueue.x-k8s.io/queue-name": "q",
            "kueue.x-k8s.io/pod-group-name": "g",
            **labels,
        },
        annotations={"kueue.x-k8s.io/pod-group-total-count": total},
    )


def test_pod_group_is_one_workload_with_a_pod_set_per_shape() -> None:
    docs = [
        Document("a.yaml document 1", group_pod("driver", {"cpu": 2})),
        Document("a.yaml document 2", job({"containers": [container({"cpu": 1})]}, name="other")),
        Document("b.yaml document 1", group_pod("worker-0", {"cpu": 4})),
        Document("b.yaml document 2", group_pod("worker-1", {"cpu": 4})),
    ]
    other, group = parse_manifests(docs)
    assert other.name == "other"
    assert group.name == "g" and group.kind == "Pod"
    assert [(ps.name, ps.count, ps.requests) for ps in group.podsets] == [
        ("driver", 1, {"cpu": 2000}),
        ("worker-0", 2, {"cpu": 4000}),
    ]
    assert group.order == 3  # submitted with its last pod


def test_pod_group_must_be_complete_and_consistent() -> None:
    two = [Document(f"d{i}", group_pod(f"p{i}", {"cpu": 1})) for i in range(2)]
    with pytest.raises(ManifestError, match="total-count is 3 but 2 pods are given"):
        parse_manifests(two)
    mixed = [
        Document("d0", group_pod("p0", {"cpu": 1}, total="2")),
        Document("d1", group_pod("p1", {"cpu": 1}, total="3")),
    ]
    with pytest.raises(
        ManifestError, match=r"d1 \(Pod default/p1\): .*total-count: 3 differs from 2"
    ):
        parse_manifests(mixed)
    missing = group_pod("p", {"cpu": 1})
    del missing["metadata"]["annotations"]
    assert "pod-group-total-count: is required" in error_of(missing)


def test_single_pod_is_a_workload_of_one_pod() -> None:
    w = parse_manifest(pod({"containers": [container({"cpu": 1})]}, name="solo"))
    assert (w.name, counts(w)) == ("solo", {"main": 1})


# -- fixtures in the shape of Kueue's examples ----------------------------------------------------


def test_fixtures_parse_to_the_hand_computed_workloads() -> None:
    found = {
        w.name: w
        for path in sorted(FIXTURES.glob("*.yaml"))
        for w in parse_text(path.read_text(), path.name)
    }
    assert sorted(found) == [
        "ddp-large",
        "ddp-small",
        "ray-batch",
        "ray-cluster",
        "sample-group",
        "sample-job",
        "sample-job-partial-admission",
        "trainer",
    ]
    partial = found["sample-job-partial-admission"].podsets[0]  # min-parallelism 5 of 20
    assert (partial.count, partial.min_count) == (20, 5)
    job_w = found["sample-job"]
    assert (job_w.queue, job_w.duration, job_w.submit_at) == ("team-a/user-queue", 600.0, 0.0)
    (main,) = job_w.podsets  # min(parallelism 3, completions 6); max(app, init) per resource
    assert (main.count, main.requests) == (
        3,
        {"cpu": 4000, "memory": 16 * GI, "nvidia.com/gpu": 1000},
    )
    assert counts(found["ddp-small"]) == {"master": 1, "worker": 3}
    large = found["ddp-large"]
    assert counts(large) == {"master": 1, "worker": 4}
    assert (large.priority_class, large.submit_at, large.duration) == ("high", 30.0, 1800.0)
    # 1 replica x 2 hosts, and KubeRay's default submitter pod (K8sJobMode, the default)
    assert counts(found["ray-batch"]) == {"head": 1, "gpu-workers": 2, "submitter": 1}
    assert found["ray-batch"].podsets[2].requests == {"cpu": 500, "memory": 200 * MI}
    assert counts(found["sample-group"]) == {"sample-pod-1": 1, "sample-pod-2": 1}
    assert counts(found["trainer"]) == {"driver": 1, "workers": 6}
    assert counts(found["ray-cluster"]) == {"head": 1, "gpu-group": 3}


# -- placement constraints ------------------------------------------------------------------------


def test_selectors_tolerations_and_required_affinity_are_carried() -> None:
    spec = {
        "nodeSelector": {"accelerator": "a100"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "team", "value": "ml", "effect": "NoExecute", "tolerationSeconds": 60},
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [
                            {"key": "zone", "operator": "In", "values": ["a", "b"]},
                            {"key": "gpus", "operator": "Gt", "values": ["3"]},
                        ]},
                        {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}],
            }
        },
        "topologySpreadConstraints": [{"maxSkew": 1}],
        "containers": [container({"cpu": 1})],
    }  # fmt: skip
    w = parse_manifest(job(spec))
    (ps,) = w.podsets
    assert ps.node_selector == {"accelerator": "a100"}
    assert ps.tolerations == (
        Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),
        Toleration("team", "Equal", "ml", "NoExecute"),
    )
    assert ps.affinity == (
        (
            NodeSelectorRequirement("zone", "In", ("a", "b")),
            NodeSelectorRequirement("gpus", "Gt", ("3",)),
        ),
        (NodeSelectorRequirement("spot", "DoesNotExist"),),
    )
    notes = "\n".join(w.notes)
    assert "preferredDuringSchedulingIgnoredDuringExecution: preferences are not modelled" in notes
    assert "spec.template.spec.topologySpreadConstraints: topology spread is not modelled" in notes


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
         "tolerations[0].value: must be empty when operator is Exists"),
        ({"tolerations": [{"operator": "Equal", "value": "v"}]},
         "tolerations[0].operator: must be Exists when key is empty"),
        ({"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]},
         "tolerationSeconds: is allowed only with effect NoExecute"),
        ({"nodeSelector": {"gpu": True}}, "nodeSelector.gpu: must be a string"),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name"}]}]}}}},
         "nodeSelectorTerms[0].matchFields: is not supported"),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "In"}]}]}}}},
         "matchExpressions[0].values: operator In needs at least one value"),
    ],
)  # fmt: skip
def test_placement_fields_are_checked(patch: dict[str, Any], expected: str) -> None:
    assert expected in error_of(pod({"containers": [container({"cpu": 1})], **patch}))


# -- metadata: queues, priorities, times, names ---------------------------------------------------


def test_queue_is_the_local_queue_in_the_objects_namespace() -> None:
    data = job({"containers": [container({"cpu": 1})]})
    assert parse_manifest(data).queue == "default/q"
    data["metadata"]["namespace"] = "team-a"
    w = parse_manifest(data)
    assert (w.queue, w.queue_field) == ("team-a/q", "metadata.labels.kueue.x-k8s.io/queue-name")
    data["metadata"]["labels"] = {"fleetshare.io/team": "research"}
    assert parse_manifest(data).queue == "research"
    data["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "q"
    assert "not both" in error_of(data)
    data["metadata"]["labels"] = {}
    assert parse_manifest(data).queue is None  # Kueue leaves it alone; callers decide
    data["metadata"]["annotations"] = {"kueue.x-k8s.io/queue-name": "q"}
    assert "queue-name: is a label in Kueue, not an annotation" in error_of(data)
    del data["metadata"]["annotations"]
    w = parse_manifests([Document("d", data, Defaults(queue="fallback"))])[0]
    assert (w.queue, w.queue_field) == ("fallback", "the default queue")


def test_priority_from_the_label_else_the_pod_template() -> None:
    data = job({"priorityClassName": "k8s-high", "containers": [container({"cpu": 1})]})
    assert parse_manifest(data).priority_class == "k8s-high"
    data["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "batch-low"
    w = parse_manifest(data)
    assert (w.priority_class, w.priority_field) == (
        "batch-low",
        "metadata.labels.kueue.x-k8s.io/priority-class",
    )
    data["metadata"]["labels"]["fleetshare.io/priority-class"] = "other"
    assert "differ" in error_of(data)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5400", 5400.0), ("90.5", 90.5), ("2h30m", 9000.0), ("1.5h", 5400.0), ("45s", 45.0),
     ("500ms", 0.5), ("1h0m30s", 3630.0), ("0", 0.0)],
)  # fmt: skip
def test_durations_in_seconds_or_go_syntax(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2 hours", "-5m", "5m-", "h", "1d", "1e3", "inf", "1.5.2s"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_duration_and_submit_annotations() -> None:
    data = job({"containers": [container({"cpu": 1})]})
    data["metadata"]["annotations"] = {
        "fleetshare.io/duration": "1h30m",
        "fleetshare.io/submit-at": "2m",
    }
    w = parse_manifest(data)
    assert (w.duration, w.submit_at) == (5400.0, 120.0)
    # the object's own annotation wins over the defaults; the defaults fill the rest
    w = parse_manifests([Document("d", data, Defaults(duration=10, submit_at=5))])[0]
    assert (w.duration, w.submit_at) == (5400.0, 120.0)
    bare = job({"containers": [container({"cpu": 1})]})
    w = parse_manifests([Document("d", bare, Defaults(duration=10, submit_at=5))])[0]
    assert (w.duration, w.submit_at) == (10, 5)
    assert parse_manifest(bare).duration is None  # runs until the scenario ends
    data["metadata"]["annotations"] = {"fleetshare.io/duration": "soon"}
    assert "metadata.annotations.fleetshare.io/duration: not a duration: 'soon'" in error_of(data)
    data["metadata"]["annotations"] = {"fleetshare.io/duration": "0s"}
    assert "must be more than 0 seconds" in error_of(data)
    data["metadata"]["annotations"] = {"fleetshare.io/duration": 600}
    assert (
        "annotations.fleetshare.io/duration: must be a string (Kubernetes stores these as "
        'strings; quote it: "600")' in error_of(data)
    )
    data["metadata"]["annotations"] = {"fleetshare.io/durration": "10m"}
    assert "fleetshare.io/durration: unknown annotation" in error_of(data)


def test_names_generated_and_qualified_when_needed() -> None:
    template = {"containers": [container({"cpu": 1})]}
    generated = job(template)
    del generated["metadata"]["name"]
    generated["metadata"]["generateName"] = "sample-job-"
    taken = job(template, name="sample-job-1")
    team_a = job(template, name="train")
    team_a["metadata"]["namespace"] = "team-a"
    team_b = copy.deepcopy(team_a)
    team_b["metadata"]["namespace"] = "team-b"
    docs = [
        Document(f"d{i}", d) for i, d in enumerate([generated, taken, generated, team_a, team_b])
    ]
    names = [w.name for w in parse_manifests(docs)]
    assert names == ["sample-job-2", "sample-job-1", "sample-job-3", "team-a/train", "team-b/train"]
    with pytest.raises(ManifestError, match=r"d1 \(Job team-a/train\): repeats the object of d0"):
        parse_manifests([Document("d0", team_a), Document("d1", team_a)])


# -- unsupported and malformed input --------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_version", "kind", "why"),
    [
        ("apps/v1", "ReplicaSet", "give the Deployment"),
        ("apps/v1", "DaemonSet", "outside any queue"),
        ("kubeflow.org/v1", "MXJob", "MXJobs are not supported"),
        ("example.com/v1", "Widget", "an unknown kind; supported: Job, JobSet, PyTorchJob"),
    ],
)
def test_unsupported_kinds_are_named_with_the_reason(api_version: str, kind: str, why: str) -> None:
    data = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "web", "namespace": "prod"},
    }
    message = error_of(data)
    assert message.startswith(
        f"jobs.yaml document 3 ({kind} prod/web): kind: {kind} is not supported"
    )
    assert why in message


def test_unsupported_api_version_of_a_known_kind() -> None:
    data = job({"containers": [container({"cpu": 1})]})
    data["apiVersion"] = "batch/v2"
    assert "apiVersion: batch/v2 is not supported for Job (supported: batch/v1)" in error_of(data)


@pytest.mark.parametrize(
    ("requests", "expected"),
    [({"cpu": "-1"}, "requests.cpu: quantity must not be negative"),
     ({"memory": "lots"}, "requests.memory: not a Kubernetes quantity: 'lots'"),
     ({"cpu": None}, "requests.cpu: must be a quantity")],
)  # fmt: skip
def test_a_bad_quantity_names_the_field(requests: dict[str, Any], expected: str) -> None:
    message = error_of(job({"containers": [container(requests)]}))
    assert "(Job default/j): spec.template.spec.containers[0].resources." + expected in message


@pytest.mark.parametrize(
    ("data", "expected"),
    [("just text", "must be a mapping, got a string"),
     ({"kind": "Job", "metadata": {"name": "x"}}, "apiVersion: is required"),
     ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {}}, "metadata.name: is required"),
     ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}}, "spec: is required"),
     ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
       "spec": {"parallelism": "3", "template": {}}}, "spec.parallelism: must be a whole number"),
     ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
       "spec": {"template": {"spec": {"containers": []}}}}, "must list at least one container")],
)  # fmt: skip
def test_malformed_objects_name_the_field(data: Any, expected: str) -> None:
    assert expected in error_of(data)


def test_kueue_features_not_modelled_are_noted_and_unknown_fields_ignored() -> None:
    data = job({"containers": [container({"cpu": 1})], "someFutureField": {"x": 1}}, parallelism=4)
    data["metadata"]["annotations"] = {"kueue.x-k8s.io/podset-slice-size": "2"}
    data["spec"]["activeDeadlineSeconds"] = 600
    data["status"] = {"active": 1}
    w = parse_manifest(data)
    assert counts(w) == {"main": 4}
    notes = "\n".join(w.notes)
    assert "podset-slice-size: not modelled" in notes
    assert "spec.activeDeadlineSeconds: not applied" in notes


def test_list_documents_are_expanded() -> None:
    text = "apiVersion: v1\nkind: List\nitems:\n" + "".join(
        f"  - {{apiVersion: v1, kind: Pod, metadata: {{name: p{i}, labels: "
        f"{{kueue.x-k8s.io/queue-name: q}}}}, spec: {{containers: [{{name: c}}]}}}}\n"
        for i in range(2)
    )
    assert [w.name for w in parse_text(text, "list.yaml")] == ["p0", "p1"]


# -- in a scenario --------------------------------------------------------------------------------

KUEUE = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 90
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  resourceGroups:
    - coveredResources: [cpu]
      flavors: [{name: default-flavor, resources: [{name: cpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: research, name: user-queue}
spec: {clusterQueue: cq}
"""


def scenario(manifests: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "cluster": {"nodes": [{"name": "n", "allocatable": {"cpu": 16, "memory": "64Gi"}}]},
        "kueue": KUEUE,
        "manifests": manifests,
        **extra,
    }


def cpu_job(name: str = "j", namespace: str = "research", **labels: str) -> dict[str, Any]:
    data = job({"containers": [container({"cpu": 1})]}, name=name)
    data["metadata"]["namespace"] = namespace
    data["metadata"]["labels"] = labels
    return data


def test_scenario_resolves_queue_and_priority_class() -> None:
    loaded = load_scenario_data(
        scenario(
            [cpu_job(**{"kueue.x-k8s.io/queue-name": "user-queue",
                        "kueue.x-k8s.io/priority-class": "urgent"})]
        ),
        Path("."),
    )  # fmt: skip
    (w,) = loaded.workloads
    assert (w.team, w.priority_class, w.priority) == ("cq", "urgent", 90)
    assert w.labels["kueue.x-k8s.io/queue-name"] == "user-queue"


def test_scenario_resolves_a_pod_priority_class_to_its_priorityclass_value() -> None:
    """Kueue takes a Job's priority from its pod template's priorityClassName: the value of
    that Kubernetes PriorityClass, which a scenario's manifests may carry."""
    job_doc = cpu_job(**{"kueue.x-k8s.io/queue-name": "user-queue"})
    job_doc["spec"]["template"]["spec"]["priorityClassName"] = "k8s-high"
    klass = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": "k8s-high"}, "value": 100000}  # fmt: skip
    (w,) = load_scenario_data(scenario([klass, job_doc]), Path(".")).workloads
    assert (w.priority_class, w.priority) == ("k8s-high", 100000)
    with pytest.raises(ScenarioError, match="no PriorityClass 'k8s-high'"):
        load_scenario_data(scenario([job_doc]), Path("."))
    job_doc["spec"]["template"]["spec"]["priorityClassName"] = "urgent"  # a policy class
    (w,) = load_scenario_data(scenario([job_doc]), Path(".")).workloads
    assert w.priority == 90


def test_scenario_refuses_a_manifest_without_a_queue_unless_defaulted() -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario_data(scenario([cpu_job()]), Path("."))
    message = str(info.value)
    assert "manifests[0] (Job research/j): no queue" in message
    assert "manifest_defaults.queue" in message
    loaded = load_scenario_data(
        scenario([cpu_job()], manifest_defaults={"queue": "research/user-queue"}), Path(".")
    )
    assert loaded.workloads[0].team == "cq"
    loaded = load_scenario_data(
        scenario([{"manifest": cpu_job(), "queue": "cq", "duration": 60}]), Path(".")
    )
    assert (loaded.workloads[0].team, loaded.workloads[0].duration) == ("cq", 60)


def test_scenario_names_the_field_of_an_unknown_queue_or_class() -> None:
    with pytest.raises(
        ScenarioError, match=r"queue-name: unknown team or queue 'other/user-queue'"
    ):
        load_scenario_data(
            scenario([cpu_job(namespace="other", **{"kueue.x-k8s.io/queue-name": "user-queue"})]),
            Path("."),
        )
    labels = {"fleetshare.io/team": "cq", "fleetshare.io/priority-class": "nope"}
    with pytest.raises(ScenarioError, match=r"priority-class: unknown priority class 'nope'"):
        load_scenario_data(scenario([cpu_job(**labels)]), Path("."))


def test_scenario_manifest_files_text_and_entries(tmp_path: Path) -> None:
    (tmp_path / "jobs.yaml").write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: from-file}\n"
        "spec: {template: {spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}}}\n"
        "---\n"
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"
    )
    with pytest.raises(ScenarioError, match=r"jobs.yaml document 2 \(Deployment default/web\)"):
        load_scenario_data(scenario(["jobs.yaml"], manifest_defaults={"queue": "cq"}), tmp_path)
    first = (tmp_path / "jobs.yaml").read_text().split("---")[0]
    (tmp_path / "jobs.yaml").write_text(first)
    (tmp_path / "later.yaml").write_text(first.replace("from-file", "later"))
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: inline}\nspec: {containers: [{name: c}]}\n"
    loaded = load_scenario_data(
        scenario(
            ["jobs.yaml", text, {"file": "later.yaml", "at": 30, "duration": 5}],
            manifest_defaults={"queue": "cq", "duration": 100},
        ),
        tmp_path,
    )
    assert [(w.name, w.submit_time, w.duration) for w in loaded.workloads] == [
        ("from-file", 0, 100),
        ("inline", 0, 100),
        ("later", 30, 5),
    ]
    with pytest.raises(ScenarioError, match="repeats the object"):
        load_scenario_data(
            scenario(["jobs.yaml", "jobs.yaml"], manifest_defaults={"queue": "cq"}), tmp_path
        )
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario_data(scenario(["missing.yaml"]), tmp_path)
    with pytest.raises(ScenarioError, match=r"manifests\[0\]: give exactly one of file, manifest"):
        load_scenario_data(scenario([{"queue": "cq"}]), tmp_path)


def test_scenario_names_must_not_clash_with_workloads() -> None:
    data = scenario(
        [cpu_job(**{"fleetshare.io/team": "cq"})],
        workloads=[{"name": "j", "team": "cq", "requests": {"cpu": 1}}],
    )
    with pytest.raises(ScenarioError, match="workload 'j' is also in workloads"):
        load_scenario_data(data, Path("."))


def test_cli_bad_manifest_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import yaml

    bad = cpu_job(**{"fleetshare.io/team": "cq"})
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "-2"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario([bad])))
    result = CliRunner().invoke(app, ["scenario", "run", str(path)], env={"COLUMNS": "1000"})
    assert result.exit_code == 2, result.output
    assert "containers[0].resources.requests.cpu: quantity must not be negative" in result.output


def test_pdbs_may_name_manifest_workloads() -> None:
    manifests = [cpu_job(**{"fleetshare.io/team": "cq"})]
    pdb = {"name": "keep", "workloads": ["j"], "min_available": 1}
    loaded = load_scenario_data(scenario(manifests, pdbs=[pdb]), Path("."))
    assert [w.name for w in loaded.workloads] == ["j"]
    pdb["workloads"] = ["nope"]
    with pytest.raises(ScenarioError, match=r"pdb keep names unknown workloads \['nope'\]"):
        load_scenario_data(scenario(manifests, pdbs=[pdb]), Path("."))
