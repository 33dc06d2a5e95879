"""KEDA ScaledObject and autoscaling/v2 HPA import, from fixtures written for fleetshare."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.inference.manifests import import_scalers
from fleetshare.manifests.parse import Document, documents
from fleetshare.manifests.values import ManifestError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "inference"


def _load(name: str) -> list[Document]:
    return documents((FIXTURES / name).read_text(), name)


def test_keda_scaled_object() -> None:
    (chat,) = import_scalers(_load("keda-chat.yaml"))
    s = chat.scaler
    assert (s.min_replicas, s.max_replicas) == (0, 40)
    assert (s.polling_interval_seconds, s.cooldown_seconds) == (15, 600)
    assert [(t.metric, t.target, t.activation) for t in s.triggers] == [
        ("rps", 7, 0.5),
        ("queue", 20, 0),
    ]
    down = s.behavior.scale_down
    assert down.stabilization_window_seconds == 120
    assert [(p.type, p.value, p.period_seconds) for p in down.policies] == [("Pods", 2, 60)]
    up = s.behavior.scale_up  # not given: the HPA's default
    assert up.stabilization_window_seconds == 0 and len(up.policies) == 2
    (floor,) = chat.floors
    assert (floor.schedule, floor.duration_seconds, floor.min_replicas) == (
        "0 9 * * 1-5",
        8 * 3600,
        10,
    )
    assert chat.pod.requests["nvidia.com/gpu"] == 1000
    assert chat.pod.priority_class == "inference"
    assert dict(chat.pod.node_selector) == {"karpenter.k8s.aws/instance-family": "g5"}
    assert any("spec.replicas" in n for n in chat.notes)
    first, waiting = (t.prometheus for t in s.triggers)
    assert first is not None and waiting is not None  # what a live scaler queries
    assert first.server_address == "http://prometheus.monitoring:9090"
    assert first.query == 'sum(rate(vllm_request_success_total{service="chat"}[1m]))'
    assert first.ignore_null_values and not waiting.ignore_null_values


def test_prometheus_trigger_needs_server_and_query() -> None:
    deployment, keda = _fixture_objects("keda-chat.yaml")
    del keda["spec"]["triggers"][0]["metadata"]["serverAddress"]
    with pytest.raises(ManifestError, match=r"triggers\[0\]\.metadata\.serverAddress: is required"):
        import_scalers(_docs(deployment, keda))
    deployment, keda = _fixture_objects("keda-chat.yaml")
    keda["spec"]["triggers"][0]["metadata"]["serverAddress"] = "prometheus:9090"
    with pytest.raises(ManifestError, match=r"metadata\.serverAddress: an http\(s\) URL"):
        import_scalers(_docs(deployment, keda))
    deployment, keda = _fixture_objects("keda-chat.yaml")
    keda["spec"]["triggers"][0]["metadata"]["ignoreNullValues"] = "maybe"
    with pytest.raises(ManifestError, match=r"metadata\.ignoreNullValues: true or false"):
        import_scalers(_docs(deployment, keda))
    deployment, keda = _fixture_objects("keda-chat.yaml")
    keda["spec"]["triggers"][0]["metadata"]["customHeaders"] = "X-Tenant=a"
    (chat,) = import_scalers(_docs(deployment, keda))
    assert any("customHeaders: not sent" in n for n in chat.notes)


def test_hpa_v2() -> None:
    (chat,) = import_scalers(_load("hpa-chat.yaml"))
    s = chat.scaler
    assert (s.min_replicas, s.max_replicas) == (2, 30)
    assert [(t.metric, t.target) for t in s.triggers] == [("concurrency", 16), ("rps", 0.5)]
    up = s.behavior.scale_up
    assert up.stabilization_window_seconds == 30 and up.select_policy == "Min"
    assert s.behavior.scale_down.stabilization_window_seconds == 300  # HPA default


def _docs(*objects: dict[str, Any]) -> list[Document]:
    return [
        Document(f"doc {i + 1}", yaml.safe_load(yaml.safe_dump(o))) for i, o in enumerate(objects)
    ]


def _fixture_objects(name: str) -> list[dict[str, Any]]:
    return [d.data for d in _load(name)]


def test_cpu_metrics_are_refused_naming_the_field() -> None:
    deployment, hpa = _fixture_objects("hpa-chat.yaml")
    hpa["spec"]["metrics"] = [{"type": "Resource", "resource": {"name": "cpu"}}]
    with pytest.raises(ManifestError, match=r"spec\.metrics\[0\]\.type: Resource metrics"):
        import_scalers(_docs(deployment, hpa))


def test_unknown_target_and_unclear_metric_are_errors() -> None:
    deployment, keda = _fixture_objects("keda-chat.yaml")
    keda["spec"]["scaleTargetRef"]["name"] = "nope"
    with pytest.raises(ManifestError, match=r"scaleTargetRef\.name: no Deployment .nope."):
        import_scalers(_docs(deployment, keda))
    deployment, keda = _fixture_objects("keda-chat.yaml")
    keda["spec"]["triggers"][0]["metadata"]["query"] = "sum(my_metric)"
    with pytest.raises(ManifestError, match=r"annotate the object with fleetshare\.io/metric\.0"):
        import_scalers(_docs(deployment, keda))
    keda["metadata"]["annotations"] = {"fleetshare.io/metric.0": "rps"}
    assert import_scalers(_docs(deployment, keda))[0].scaler.triggers[0].metric == "rps"
    # vLLM's num_requests_running: named by the annotation only (the guess says concurrency)
    keda["spec"]["triggers"][0]["metadata"]["query"] = "sum(vllm:num_requests_running)"
    assert import_scalers(_docs(deployment, keda))[0].scaler.triggers[0].metric == "rps"
    keda["metadata"]["annotations"] = {}
    assert import_scalers(_docs(deployment, keda))[0].scaler.triggers[0].metric == "concurrency"
    keda["metadata"]["annotations"] = {"fleetshare.io/metric.0": "running"}
    assert import_scalers(_docs(deployment, keda))[0].scaler.triggers[0].metric == "running"
    keda["metadata"]["annotations"] = {"fleetshare.io/metric.0": "latency"}
    with pytest.raises(
        ManifestError, match=r"must be one of rps, concurrency, queue, running, got .latency."
    ):
        import_scalers(_docs(deployment, keda))


def test_bad_behavior_and_metric_type_name_the_field() -> None:
    deployment, keda = _fixture_objects("keda-chat.yaml")
    behavior = keda["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    behavior["scaleDown"]["policies"][0]["value"] = 0
    with pytest.raises(ManifestError, match=r"behavior\.scaleDown: policies\.0\.value"):
        import_scalers(_docs(deployment, keda))
    deployment, keda = _fixture_objects("keda-chat.yaml")
    keda["spec"]["triggers"][0]["metricType"] = "Value"
    with pytest.raises(ManifestError, match=r"triggers\[0\]\.metricType: only AverageValue"):
        import_scalers(_docs(deployment, keda))


def test_keda_idle_replica_count_and_fallback_are_read() -> None:
    objects = _fixture_objects("keda-chat.yaml")
    scaled = next(o for o in objects if o["kind"] == "ScaledObject")
    scaled["spec"]["minReplicaCount"] = 2
    scaled["spec"]["idleReplicaCount"] = 0
    scaled["spec"]["fallback"] = {"failureThreshold": 3, "replicas": 6}
    (chat,) = import_scalers(_docs(*objects))
    assert chat.scaler.idle_replicas == 0 and chat.scaler.idle() == 0
    f = chat.scaler.fallback
    assert f is not None and (f.failure_threshold, f.replicas, f.behavior) == (3, 6, "static")
    assert not any("idleReplicaCount" in n or "fallback" in n for n in chat.notes)
    scaled["spec"]["idleReplicaCount"] = 1  # KEDA supports only 0
    with pytest.raises(ManifestError, match="idle_replicas"):
        import_scalers(_docs(*objects))
    scaled["spec"]["idleReplicaCount"] = 0
    scaled["spec"]["fallback"] = {"replicas": 6}
    with pytest.raises(ManifestError, match=r"fallback\.failureThreshold: is required"):
        import_scalers(_docs(*objects))


def test_a_cron_trigger_keeps_its_time_zone() -> None:
    objects = _fixture_objects("keda-chat.yaml")
    scaled = next(o for o in objects if o["kind"] == "ScaledObject")
    cron_trigger = next(t for t in scaled["spec"]["triggers"] if t["type"] == "cron")
    cron_trigger["metadata"]["timezone"] = "America/New_York"
    (chat,) = import_scalers(_docs(*objects))
    (floor,) = chat.floors
    assert floor.timezone == "America/New_York"
    cron_trigger["metadata"]["timezone"] = "Mars/Olympus"
    with pytest.raises(ManifestError, match="not an IANA time zone"):
        import_scalers(_docs(*objects))
