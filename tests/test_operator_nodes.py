"""The operator's node handling without an API server: NodePool objects read as pools,
NodeClaims written for launches, PodDisruptionBudgets read for the disruption logic, and a
drain the API refused keeping the node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from fleetshare.autoscaling.cloud import LaunchRequest
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.simulated_cloud import SimulatedCloud, SimulatedCloudConfig
from fleetshare.control.autoscaler import Autoscaler
from fleetshare.control.changes import AutoscalerNote
from fleetshare.control.cluster import RemovalRefused
from fleetshare.control.loop import ControlLoop
from fleetshare.governance.admission import Engine
from fleetshare.governance.snapshot import Admission, CycleResult, Running
from fleetshare.model.catalog import load_catalog
from fleetshare.model.node import Node
from fleetshare.model.reason import Reason
from fleetshare.model.workload import Workload
from fleetshare.operator.crds import node_pool_crd, pools_from
from fleetshare.operator.nodeclaims import claim_object, claim_status, provider_id
from fleetshare.operator.objects import pdb_spec
from fleetshare.policy.schema import load_policy

CATALOG = load_catalog()


def pool_object(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def test_node_pools_from_objects_name_the_pool_and_field() -> None:
    pools = pools_from(
        [pool_object("b", instance_types=["g5.2xlarge"]), pool_object("a", families=["m5"])],
        CATALOG,
    )
    assert [p.name for p in pools] == ["a", "b"]
    with pytest.raises(ValueError, match=r"pools\[0\]\(gpu\)\.limits: nodes: not a Kubernetes"):
        pools_from([pool_object("gpu", limits={"nodes": "many"})], CATALOG)
    with pytest.raises(ValueError, match=r"pools\[0\]\(gpu\)\.instance_types\[0\]: unknown"):
        pools_from([pool_object("gpu", instance_types=["g5.2xlarg"])], CATALOG)
    schema = node_pool_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "name" not in schema["properties"]["spec"]["properties"]  # metadata.name is it


def _launched(cloud: SimulatedCloud, scaler: Autoscaler, name: str, pool: str, at: float) -> None:
    instance = cloud.launch(LaunchRequest("m5.xlarge", "us-east-1a", "on-demand", 1, pool), at)[0]
    assert scaler.adopt(name, instance, "provisioning", joined=True)


def test_claim_of_a_launched_node_in_karpenters_shape() -> None:
    cloud = SimulatedCloud(SimulatedCloudConfig(seed=1))
    pool = NodePool(name="cpu", instance_types=["m5.xlarge"], labels={"team": "x"})
    scaler = Autoscaler([pool], cloud, CATALOG)
    _launched(cloud, scaler, "cpu-m5.xlarge-7", "cpu", 0.0)
    managed = scaler.nodes["cpu-m5.xlarge-7"]
    claim = claim_object(managed)
    assert claim["metadata"]["name"] == "cpu-m5.xlarge-7"
    assert claim["metadata"]["labels"]["team"] == "x"
    assert {r["key"]: r["values"] for r in claim["spec"]["requirements"]} == {
        "node.kubernetes.io/instance-type": ["m5.xlarge"],
        "topology.kubernetes.io/zone": ["us-east-1a"],
        "karpenter.sh/capacity-type": ["on-demand"],
        "karpenter.sh/nodepool": ["cpu"],
    }
    assert claim["spec"]["resources"]["requests"]["cpu"] == "3920m"  # exact, not rounded
    launched = claim_status(managed, None, False, CATALOG)
    # what its pool's limits count (Karpenter's NodeClaim status.capacity), and what pods get
    assert (launched["capacity"]["cpu"], launched["allocatable"]["cpu"]) == ("4", "3920m")
    assert launched["providerID"] == provider_id(managed.instance)
    assert provider_id(managed.instance) == f"aws:///us-east-1a/{managed.instance.id}"
    states = {c["type"]: c["status"] for c in launched["conditions"]}
    assert states == {"Launched": "True", "Registered": "False", "Initialized": "False"}
    node = {"metadata": {"name": "cpu-m5.xlarge-7"}}
    ready = claim_status(managed, node, True, CATALOG)
    assert ready["nodeName"] == "cpu-m5.xlarge-7"
    assert {c["type"]: c["status"] for c in ready["conditions"]}["Initialized"] == "True"
    # a new launch never takes an adopted node's name
    _launched(cloud, scaler, "cpu-m5.xlarge-1", "cpu", 0.0)
    assert not scaler.adopt("cpu-m5.xlarge-1", managed.instance, "again", joined=True)


def _pod(ns: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "labels": labels}}


def test_pdbs_read_for_the_disruption_logic() -> None:
    pods = {
        "ns/a": [_pod("ns", {"app": "svc"})],
        "ns/b": [_pod("ns", {"app": "svc"}), _pod("ns", {"app": "svc"})],
        "ns/c": [_pod("ns", {"app": "batch"})],
        "other/d": [_pod("other", {"app": "svc"})],
    }

    def pdb(**spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}

    svc = {"matchLabels": {"app": "svc"}}
    spec = pdb_spec(pdb(selector=svc, minAvailable=2), pods)
    assert spec is not None
    assert spec.name == "ns/p" and spec.workloads == ["ns/a", "ns/b"]
    assert spec.min_available == 2 and spec.max_unavailable is None
    spec = pdb_spec(pdb(selector={}, maxUnavailable="1"), pods)  # an empty selector: all
    assert spec is not None and spec.workloads == ["ns/a", "ns/b", "ns/c"]
    assert spec.max_unavailable == 1
    # what the decision cannot read is left to the API server's check at drain time
    assert pdb_spec(pdb(selector=svc, minAvailable="50%"), pods) is None
    expressions = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["svc"]}]}
    assert pdb_spec(pdb(selector=expressions, minAvailable=1), pods) is None
    assert pdb_spec(pdb(selector={"matchLabels": {"app": "none"}}, minAvailable=1), pods) is None


class RefusingCluster:
    """A backend with one node the API refuses to drain."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.logged: list[dict[str, Any]] = []

    def node_list(self) -> Sequence[Node]:
        return [self.node]

    def running_workloads(self) -> Mapping[str, Running]:
        return {}

    def pending_workloads(self) -> Sequence[Workload]:
        return []

    def pending_for_cycle(self) -> Sequence[Workload]:
        return []

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        return {}

    def busy(self, now: float) -> bool:
        return False

    def admitting(self) -> bool:
        return True

    def bind_all(self, admissions: Sequence[Admission], now: float) -> None:
        assert not admissions, "nothing to admit"

    def forget(self, workload: Workload, now: float) -> None:
        raise AssertionError("nothing admitted to forget")

    def settle(self, now: float) -> None:
        pass

    def evict(self, workload: Workload, by: str, reason: str, message: str, now: float) -> None:
        raise AssertionError("nothing to evict")

    def report_pending(self, result: CycleResult, now: float) -> None:
        pass

    def note_pending(self, workload: str, note: AutoscalerNote) -> None:
        pass

    def join_node(self, node: Node, at: float) -> None:
        pass

    def remove_node(self, name: str, reason: Reason, now: float) -> bool:
        raise RemovalRefused("evicting pod ns/p: would violate the pod's disruption budget")

    def wake(self, at: float, now: float, *, unless_sooner: bool = False) -> None:
        pass

    def warn(self, now: float, message: str) -> None:
        pass

    def log(self, now: float, event: str, **details: Any) -> None:
        self.logged.append({"event": event, **details})


def test_a_refused_drain_keeps_the_node_and_its_instance() -> None:
    cloud = SimulatedCloud(SimulatedCloudConfig(seed=1))
    pool = NodePool.model_validate(
        {"name": "cpu", "instance_types": ["m5.xlarge"],
         "disruption": {"consolidate_after_seconds": 0}}
    )  # fmt: skip
    scaler = Autoscaler([pool], cloud, CATALOG)
    _launched(cloud, scaler, "n1", "cpu", 0.0)
    cluster = RefusingCluster(scaler.nodes["n1"].node)
    engine = Engine(load_policy({"teams": [{"name": "t", "quota": [{"resources": {"cpu": 8}}]}]}),
                    CATALOG)  # fmt: skip
    loop = ControlLoop(cluster, engine, scaler)
    loop.reconcile(1.0)  # the node is seen empty...
    loop.reconcile(2.0)  # ...and removed as empty: the drain is refused
    assert [m.name for m in scaler.live()] == ["n1"]
    assert len(cloud.instances(2.0)) == 1
    assert scaler.blocked["n1"].category == "drain-refused"
    kept = [e for e in cluster.logged if e.get("action") == "kept"]
    assert kept and "disruption budget" in kept[0]["reason"]
    # a pool removed while it has nodes keeps them, but launches nothing more
    scaler.set_pools([])
    assert scaler.pools["cpu"].limit_of("nodes") == 0


def test_operator_metrics_on_a_hand_built_summary() -> None:
    from fleetshare.operator.metrics import OperatorMetrics, summary

    metrics = OperatorMetrics()
    metrics.latest = summary(
        ["a", "b", "c"], [("a", True), ("a", False), ("b", True)], ["a"],
        [("gpu", False), ("gpu", True), ("gpu", True)], leader=True, reconciles=7,
    )  # fmt: skip
    text = metrics.render().decode()
    lines = {line for line in text.splitlines() if not line.startswith("#")}
    assert {
        'fleetshare_pending_workloads{cluster_queue="a",status="active"} 1.0',
        'fleetshare_pending_workloads{cluster_queue="a",status="inadmissible"} 1.0',
        'fleetshare_pending_workloads{cluster_queue="b",status="active"} 0.0',
        'fleetshare_pending_workloads{cluster_queue="b",status="inadmissible"} 1.0',
        'fleetshare_pending_workloads{cluster_queue="c",status="active"} 0.0',
        'fleetshare_pending_workloads{cluster_queue="c",status="inadmissible"} 0.0',
        'fleetshare_admitted_active_workloads{cluster_queue="a"} 1.0',
        'fleetshare_admitted_active_workloads{cluster_queue="b"} 0.0',
        'fleetshare_admitted_active_workloads{cluster_queue="c"} 0.0',
        'fleetshare_node_claims{nodepool="gpu",state="launching"} 1.0',
        'fleetshare_node_claims{nodepool="gpu",state="ready"} 2.0',
        "fleetshare_operator_leader 1.0",
        "fleetshare_operator_reconciles_total 7.0",
    } == lines


class EvictionApi:
    """The Eviction API of a cluster where a budget protects pod ``p1``."""

    def __init__(self) -> None:
        self.evicted: list[str] = []
        self.deleted: list[str] = []

    def evict(self, namespace: str, name: str, *, dry_run: bool = False) -> None:
        from fleetshare.operator.kube import KubeError

        if name == "p1":
            raise KubeError(429, "Too Many Requests", "would violate the disruption budget")
        if not dry_run:
            self.evicted.append(name)

    def delete(self, res: Any, name: str, namespace: str | None = None, **query: Any) -> None:
        self.deleted.append(name)


def test_a_drain_asks_first_and_only_a_forced_one_deletes_protected_pods() -> None:
    from fleetshare.operator.drain import evict_all, refusal

    api = EvictionApi()
    pods = [{"metadata": {"namespace": "ns", "name": n}} for n in ("p0", "p1")]
    why = refusal(api, pods)  # type: ignore[arg-type]
    assert why is not None and "ns/p1" in why and api.evicted == []  # a dry run moved nothing
    assert evict_all(api, pods) == [  # type: ignore[arg-type]
        "pod ns/p1: 429 Too Many Requests: would violate the disruption budget"
    ]
    assert api.evicted == ["p0"] and api.deleted == []
    assert evict_all(api, pods, force=True) == []  # type: ignore[arg-type]
    assert api.deleted == ["p1"]
