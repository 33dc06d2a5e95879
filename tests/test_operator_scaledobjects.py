"""KEDA ScaledObjects scaled by the operator (src/fleetshare/operator/scaledobjects.py).

The rules are the simulator's (tests/inference/ test them on hand-built series); here: what
the operator does around them, on a fake API (restart, failures, an HPA on the same
Deployment), and end to end through a real API server with a real Prometheus: KEDA's CRD is
installed from the minimal schema in tests/fixtures/crds/keda-scaledobjects.yaml (written for
these tests; KEDA itself is not built or run), kube-controller-manager's Deployment and
ReplicaSet controllers make the pods, and the operator runs with the Helm chart's RBAC only.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.inference.manifests import read_scaled_object
from fleetshare.inference.prometheus import MetricError
from fleetshare.manifests import ManifestError
from fleetshare.operator.kube import CRDS, PODS, KubeError, Resource
from fleetshare.operator.objects import ADMISSION, GATE, PENDING_REASON
from fleetshare.operator.scaledobjects import (
    DEPLOYMENTS,
    SCALED_OBJECTS,
    Outcome,
    ScaledObjects,
    conditions,
)
from fleetshare.operator.webhook import Webhook
from fleetshare.policy.schema import load_policy
from tests.kube_harness import Harness, OperatorThread, apply_policy, wait_for
from tests.prometheus_server import Counter

ROOT = Path(__file__).resolve().parent
CRD = ROOT / "fixtures" / "crds" / "keda-scaledobjects.yaml"
CHART_FILES = ROOT.parent / "deploy" / "helm" / "fleetshare" / "files"
REPLICASETS = Resource("ReplicaSet", "apps/v1", "replicasets", True)
QUERY = "sum(rate(chat_requests_total[4s]))"


def scaled_object(ns: str, address: str, query: str = QUERY, **spec: Any) -> dict[str, Any]:
    """``chat`` scaled on requests per second (10 per replica), 1 to 5 replicas, polled every
    second, scale-up limited to +1 pod per 4 s, scale-down not stabilised."""
    behavior = {
        "scaleUp": {"stabilizationWindowSeconds": 0,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 4}]},
        "scaleDown": {"stabilizationWindowSeconds": 0,
                      "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
    }  # fmt: skip
    metadata = {"serverAddress": address, "query": query, "threshold": "10"}
    trigger = {"type": "prometheus", "metadata": metadata}
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "chat", "namespace": ns, "uid": "u1", "generation": 1},
        "spec": {"scaleTargetRef": {"name": "chat"}, "pollingInterval": 1,
                 "minReplicaCount": 1, "maxReplicaCount": 5, "triggers": [trigger],
                 "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
                 **spec},
    }  # fmt: skip


# -- pure -----------------------------------------------------------------------------------


def test_read_scaled_object_alone_and_refusals_name_the_field() -> None:
    read = read_scaled_object(scaled_object("ns", "http://prom:9090"), "so")
    assert read.deployment == "chat"
    assert (read.scaler.min_replicas, read.scaler.max_replicas) == (1, 5)
    assert read.scaler.triggers[0].prometheus is not None
    assert read.scaler.triggers[0].prometheus.query == QUERY
    bad = scaled_object("ns", "http://prom:9090")
    bad["spec"]["scaleTargetRef"] = {"kind": "StatefulSet", "name": "chat"}
    with pytest.raises(ManifestError, match=r"spec\.scaleTargetRef\.kind"):
        read_scaled_object(bad, "so")


def test_conditions_keep_their_transition_time_until_their_status_changes() -> None:
    first = conditions(Outcome(True, "ScalerReady", "1 -> 2", True), [], "T1")
    assert [(c["type"], c["status"], c["lastTransitionTime"]) for c in first] == [
        ("Ready", "True", "T1"), ("Active", "True", "T1")]  # fmt: skip
    again = conditions(Outcome(True, "ScalerReady", "2 -> 2", False), first, "T2")
    assert [(c["status"], c["lastTransitionTime"]) for c in again] == [
        ("True", "T1"), ("False", "T2")]  # fmt: skip
    failed = conditions(Outcome(False, "ScalerFailed", "down"), again, "T3")
    assert [(c["type"], c["status"], c["lastTransitionTime"]) for c in failed] == [
        ("Ready", "False", "T3"), ("Active", "Unknown", "T3")]  # fmt: skip


# -- the operator's part, on a fake API -----------------------------------------------------


class FakeKube:
    """A Deployment's scale subresource, the namespace's HPAs, the writes made."""

    def __init__(self, replicas: int, hpas: list[dict[str, Any]] | None = None) -> None:
        self.replicas = replicas
        self.hpas = hpas or []
        self.scaled: list[int] = []
        self.status: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    def get(self, res: Resource, name: str, namespace: str | None = None, sub: str = "") -> Any:
        assert (res, sub) == (DEPLOYMENTS, "scale")
        return {"spec": {"replicas": self.replicas}}

    def list(self, res: Resource, namespace: str | None = None) -> Any:
        return self.hpas, "1"

    def patch(self, res: Resource, name: str, body: Any, namespace: str | None = None,
              *, sub: str = "") -> Any:  # fmt: skip
        if res == DEPLOYMENTS:
            self.replicas = body["spec"]["replicas"]
            self.scaled.append(self.replicas)
        else:
            assert (res, sub) == (SCALED_OBJECTS, "status")
            self.status.append(body["status"])
        return {}

    def post(self, obj: Any, kind: str, reason: str, message: str) -> None:
        self.events.append((kind, reason, message))


class Source:
    def __init__(self, value: float | None) -> None:
        self.value = value

    def read(self) -> float:
        if self.value is None:
            raise MetricError("prometheus http://prom:9090: unreachable")
        return self.value


def _scalers(kube: FakeKube, obj: dict[str, Any], source: Source) -> ScaledObjects:
    scalers = ScaledObjects(kube, kube)  # type: ignore[arg-type]
    tracked = scalers._track(("ns", "chat"), obj)
    assert tracked.scaler is not None
    tracked.scaler.sources = [source]
    return scalers


def test_restart_starts_from_the_deployment_and_counts_cooldown_from_then() -> None:
    """A restarted operator finds 4 replicas and no traffic, scale to zero allowed: the HPA
    part takes them down to 1 (no scale-down window in this object), and KEDA's cooldown,
    counted from the first poll (no lastActiveTime was recorded), holds that 1 until 300 s
    later, then zero."""
    kube = FakeKube(replicas=4)
    obj = scaled_object("ns", "http://prom:9090", minReplicaCount=0, cooldownPeriod=300)
    scalers = _scalers(kube, obj, Source(0.0))
    tracked = scalers.tracked[("ns", "chat")]
    for now in (1000.0, 1100.0, 1299.0):
        scalers._poll(tracked, obj, now)
    assert kube.scaled == [1]
    scalers._poll(tracked, obj, 1300.0)
    assert kube.scaled == [1, 0]
    assert [e[1] for e in kube.events] == ["Scaled", "Scaled"]
    assert "lastActiveTime" not in kube.status[-1]  # never active


def test_restart_holds_the_replicas_found_for_the_scale_down_window() -> None:
    """The windows' earlier proposals are lost on a restart: the replicas found count as a
    proposal made then (``inference.scaler.resumed``, as for a service taken over in
    ``fleetshare serve``), so a quiet service keeps them for its 300 s scale-down window
    rather than dropping to its floor at the first poll."""
    kube = FakeKube(replicas=4)
    obj = scaled_object("ns", "http://prom:9090")
    behavior = obj["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    behavior["scaleDown"]["stabilizationWindowSeconds"] = 300
    scalers = _scalers(kube, obj, Source(0.0))
    tracked = scalers.tracked[("ns", "chat")]
    for now in (1000.0, 1100.0, 1299.0):
        scalers._poll(tracked, obj, now)
    assert kube.scaled == []
    scalers._poll(tracked, obj, 1300.0)
    assert kube.scaled == [1]


def test_restart_takes_last_active_time_from_the_status() -> None:
    kube = FakeKube(replicas=1)
    obj = scaled_object("ns", "http://prom:9090", minReplicaCount=0, cooldownPeriod=300)
    obj["status"] = {"lastActiveTime": "1970-01-01T00:15:00Z"}  # 900 s
    scalers = _scalers(kube, obj, Source(0.0))
    tracked = scalers.tracked[("ns", "chat")]
    scalers._poll(tracked, obj, 1199.0)
    assert kube.scaled == []
    scalers._poll(tracked, obj, 1200.0)
    assert kube.scaled == [0]
    assert kube.status[-1]["lastActiveTime"] == "1970-01-01T00:15:00Z"


def test_failed_read_leaves_replicas_and_warns_once() -> None:
    kube = FakeKube(replicas=3)
    obj = scaled_object("ns", "http://prom:9090")
    source = Source(None)
    scalers = _scalers(kube, obj, source)
    tracked = scalers.tracked[("ns", "chat")]
    for now in (10.0, 11.0, 12.0):
        scalers._poll(tracked, obj, now)
    assert kube.scaled == [] and kube.replicas == 3
    assert [(k, r) for k, r, _ in kube.events] == [("Warning", "ScalerFailed")]
    ready = kube.status[-1]["conditions"][0]
    assert (ready["type"], ready["status"]) == ("Ready", "False")
    assert "unreachable" in ready["message"]
    source.value = 45.0  # back: +1 pod per 4 s from 3
    scalers._poll(tracked, obj, 13.0)
    assert kube.scaled == [4]


def test_a_deployment_an_hpa_scales_is_left_to_it() -> None:
    hpa = {"metadata": {"name": "keda-hpa-chat"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "chat"}}}  # fmt: skip
    kube = FakeKube(replicas=1, hpas=[hpa])
    obj = scaled_object("ns", "http://prom:9090")
    scalers = _scalers(kube, obj, Source(45.0))
    scalers._poll(scalers.tracked[("ns", "chat")], obj, 10.0)
    assert kube.scaled == []
    assert kube.events[0][:2] == ("Warning", "TargetHasHPA")


# -- through a real API server, with a real Prometheus --------------------------------------


def _install_crd(kube: Harness) -> None:
    crd = yaml.safe_load(CRD.read_text())
    with contextlib.suppress(KubeError):
        kube.kube.create(CRDS, crd)

    def established() -> bool:
        status = kube.kube.get(CRDS, crd["metadata"]["name"]).get("status") or {}
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in status.get("conditions") or ())  # fmt: skip

    wait_for("the ScaledObject CRD served", established)


def _deployment(ns: str) -> dict[str, Any]:
    """A model server whose pods (1 GPU each) belong to team ``serving``."""
    labels = {"app": "chat", "fleetshare.io/team": "serving"}
    container = {"name": "server", "image": "registry.example/chat:1",
                 "resources": {"requests": {"cpu": "2", "memory": "8Gi"},
                               "limits": {"nvidia.com/gpu": "1"}}}  # fmt: skip
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "chat"}},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [container]}}},
    }  # fmt: skip


def _replicas(kube: Harness, ns: str) -> int:
    return int(kube.kube.get(DEPLOYMENTS, "chat", ns)["spec"]["replicas"])


def _scaler_events(kube: Harness, ns: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.events(ns)
        if e["involvedObject"].get("kind") == "ScaledObject" and e["reason"] == reason
    ]


def _condition(kube: Harness, ns: str, kind: str) -> dict[str, Any]:
    status = kube.kube.get(SCALED_OBJECTS, "chat", ns).get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == kind), {})


def _live_pods(kube: Harness, ns: str) -> list[dict[str, Any]]:
    return [p for p in kube.pods(ns, "app=chat") if not p["metadata"].get("deletionTimestamp")]


@pytest.mark.slow
def test_deployment_follows_prometheus_through_the_api_server(
    kube: Harness, ns: str, prometheus: tuple[str, Counter]
) -> None:
    """A Deployment + ScaledObject applied; the counter Prometheus scrapes rises: the replicas
    go up one pod per 4 s (the rate policy) to the maximum, and the pods go through admission
    (3 admitted on the cluster's 3 GPUs, 2 waiting with their reason). A restarted operator
    keeps the 5 replicas. A broken query is a
    Warning Event and Ready False, the replicas unchanged; mended, with no traffic, the
    replicas go down to the minimum."""
    address, counter = prometheus
    _install_crd(kube)
    apply_policy(kube, load_policy({"teams": [{"name": "serving", "quota": [
        {"resources": {"nvidia.com/gpu": 3, "cpu": 64, "memory": "256Gi"}}]}]}))  # fmt: skip
    kube.add_node(f"{ns}-g", {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "3"}, owner=ns)
    rules = [yaml.safe_load((CHART_FILES / f).read_text())
             for f in ("cluster-rules.yaml", "lease-rules.yaml")]  # fmt: skip
    client = kube.operator_client(rules[0], rules[1], ns)
    webhook = Webhook(kube.kube)
    webhook.start()
    webhook.register()
    op = OperatorThread(kube, [ns], kube=client, install_crds=False, leader_elect=True,
                        lease_namespace=ns).start()  # fmt: skip
    try:
        kube.kube.create(DEPLOYMENTS, _deployment(ns), ns)
        so = scaled_object(ns, address)
        del so["metadata"]["uid"], so["metadata"]["generation"]
        kube.kube.create(SCALED_OBJECTS, so, ns)
        wait_for("the scaler ready", lambda: _condition(kube, ns, "Ready").get("status") == "True")
        assert _replicas(kube, ns) == 1

        # 6 replicas' worth, above the maximum of 5: on a loaded machine a late scrape makes
        # the 4 s rate dip (once by a tenth, 5 -> 4 -> 5 replicas); the replicas must not move
        counter.set_rate(60)
        wait_for("5 replicas", lambda: _replicas(kube, ns) == 5, timeout=60, interval=0.3)

        def steps() -> list[tuple[int, int]]:
            out = []
            for event in _scaler_events(kube, ns, "Scaled"):
                words = event["message"].split()  # "... from A to B: why"
                out.append((int(words[4]), int(words[6].rstrip(":"))))
            return sorted(out)

        # the Event of the last step is written after the Deployment's scale: wait for it
        wait_for("4 Scaled events", lambda: len(steps()) >= 4, timeout=30, interval=0.3)
        assert steps() == [(1, 2), (2, 3), (3, 4), (4, 5)], steps()  # +1 pod per 4 s
        assert _condition(kube, ns, "Active")["status"] == "True"

        def governed() -> tuple[int, int] | None:
            pods = _live_pods(kube, ns)
            ran = [p for p in pods if ADMISSION in (p["metadata"].get("annotations") or {})]
            waiting = [p for p in pods if GATE in {g["name"] for g in
                       p["spec"].get("schedulingGates") or ()} and PENDING_REASON in
                       (p["metadata"].get("annotations") or {})]  # fmt: skip
            return (len(ran), len(waiting)) if len(pods) == 5 else None

        wait_for("3 pods admitted, 2 waiting",
                 lambda: governed() == (3, 2), timeout=30)  # fmt: skip

        # a restarted operator starts from the Deployment's 5 replicas: nothing moves
        op.stop()
        op = OperatorThread(kube, [ns], kube=client, install_crds=False, leader_elect=True,
                            lease_namespace=ns).start()  # fmt: skip
        wait_for("the new operator reconciling", lambda: op.operator.reconciles > 0)
        time.sleep(3)  # three polls at 60 requests/s
        assert _replicas(kube, ns) == 5 and len(_scaler_events(kube, ns, "Scaled")) == 4

        broken = scaled_object(ns, address, query="sum(rate(chat_requests_total[4s])")
        kube.kube.patch(SCALED_OBJECTS, "chat", {"spec": broken["spec"]}, ns)
        counter.set_rate(0)
        (warning,) = wait_for("a ScalerFailed event",
                              lambda: _scaler_events(kube, ns, "ScalerFailed"))  # fmt: skip
        assert warning["type"] == "Warning" and "parse error" in warning["message"]
        wait_for("Ready False", lambda: _condition(kube, ns, "Ready").get("status") == "False")
        time.sleep(6)  # several polls with the query broken (and no traffic)
        assert _replicas(kube, ns) == 5

        kube.kube.patch(SCALED_OBJECTS, "chat", {"spec": so["spec"]}, ns)
        wait_for("down to the minimum", lambda: _replicas(kube, ns) == 1, timeout=60)
        wait_for("one pod left", lambda: len(_live_pods(kube, ns)) == 1, timeout=30)
        assert _condition(kube, ns, "Ready")["status"] == "True"
        assert op.operator.reconciles > 0
    finally:
        op.stop()
        webhook.stop()
        for res in (SCALED_OBJECTS, DEPLOYMENTS, REPLICASETS):  # no garbage collector runs
            for obj in kube.kube.list(res, ns)[0]:
                with contextlib.suppress(KubeError):
                    kube.kube.delete(res, obj["metadata"]["name"], ns)
        for pod in kube.pods(ns):
            with contextlib.suppress(KubeError):
                kube.kube.delete(PODS, pod["metadata"]["name"], ns, gracePeriodSeconds=0)
