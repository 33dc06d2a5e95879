"""The operator's autoscaling against a real API server: NodePools, NodeClaims, nodes joining
(the harness's fake kubelet registers a Node for each launched claim), consolidation through
the Eviction API with PodDisruptionBudgets. The cloud is the simulated one (it stands for
AWS); see tests/kube_harness.py for what else is not real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.autoscaling.settings import AutoscalerSpec
from fleetshare.autoscaling.simulated_cloud import SimulatedCloud, SimulatedCloudConfig
from fleetshare.operator.kube import JOBS, NODES, PDBS, KubeError, Resource
from fleetshare.operator.nodeclaims import NODE_CLAIMS, NODE_POOLS, POOL
from fleetshare.operator.objects import AUTOSCALER_NOTE, EVICTION
from fleetshare.policy.schema import load_policy
from tests.kube_harness import (
    Harness,
    OperatorThread,
    admitted,
    apply_policy,
    gpu_job,
    running_pods,
    wait_for,
)

pytestmark = pytest.mark.slow
CHART = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "fleetshare"

POLICY = {"teams": [{"name": "research", "quota": [{"resources": {"nvidia.com/gpu": 8,
                                                                    "cpu": 64}}]}]}  # fmt: skip
SECRETS = Resource("Secret", "v1", "secrets", True)
FAST = AutoscalerSpec(
    batch_idle_seconds=0.2,
    batch_max_seconds=1.0,
    disruption_interval_seconds=1.0,
    disruption_validation_seconds=0.5,
)


def node_pool(name: str, types: list[str], after: float = 1.0, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "fleetshare.io/v1alpha1", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"instance_types": types,
                 "disruption": {"consolidate_after_seconds": after}, **spec},
    }  # fmt: skip


def claims(kube: Harness, pool: str) -> list[dict[str, Any]]:
    return kube.kube.list(NODE_CLAIMS, labelSelector=f"{POOL}={pool}")[0]


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def chart_rules(name: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = yaml.safe_load((CHART / "files" / name).read_text())
    return rules


def operator(kube: Harness, ns: str, cloud: SimulatedCloud, **settings: Any) -> OperatorThread:
    """The operator as the Helm chart deploys it: only the chart's RBAC (so a verb the code
    uses and the chart does not grant fails these tests), CRDs installed by someone else,
    leader election on."""
    client = kube.operator_client(
        chart_rules("cluster-rules.yaml"), chart_rules("lease-rules.yaml"), ns
    )
    return OperatorThread(
        kube, [ns], kube=client, cloud=cloud, autoscaler=FAST, install_crds=False,
        leader_elect=True, lease_namespace=ns, **settings,
    )  # fmt: skip


def test_pending_gang_provisions_nodes_and_scales_back_to_zero(kube: Harness, ns: str) -> None:
    """A pending 2-pod GPU gang -> two NodeClaims -> their Nodes register -> the gang is
    admitted and bound by kube-scheduler -> the operator is restarted and adopts the claims ->
    the gang finishes -> both nodes are removed as empty and the pool is back to zero, the
    instances terminated."""
    apply_policy(kube, load_policy(POLICY))
    kube.kube.create(NODE_POOLS, node_pool("gpu", ["g5.2xlarge"]))
    cloud = SimulatedCloud(SimulatedCloudConfig(seed=1))
    op = operator(kube, ns, cloud).start()
    try:
        kube.kube.create(JOBS, gpu_job(ns, "train", "research", 2), ns)
        launched = wait_for(
            "two claims", lambda: len(claims(kube, "gpu")) == 2 and claims(kube, "gpu")
        )
        claim = launched[0]
        assert {r["key"]: r["values"] for r in claim["spec"]["requirements"]}[
            "node.kubernetes.io/instance-type"
        ] == ["g5.2xlarge"]
        assert json.loads(claim["metadata"]["annotations"][
            "operator.fleetshare.io/launched-for"]) == [f"{ns}/train"]  # fmt: skip
        wait_for("train admitted", lambda: admitted(kube, ns, "train"), timeout=30)
        pods = wait_for("both pods running", lambda: len(running_pods(kube, ns, "train")) == 2
                        and running_pods(kube, ns, "train"))  # fmt: skip
        names = {c["metadata"]["name"] for c in claims(kube, "gpu")}
        assert {p["spec"]["nodeName"] for p in pods} == names  # bound by kube-scheduler
        for c in claims(kube, "gpu"):
            assert c["status"]["nodeName"] == c["metadata"]["name"]
            assert condition(c, "Registered") == "True"
            wait_for(
                "claim initialized",
                lambda c=c: (
                    condition(kube.kube.get(NODE_CLAIMS, c["metadata"]["name"]), "Initialized")
                    == "True"
                ),
            )
        assert len(cloud.instances()) == 2
        assert kube.kube.get(NODE_POOLS, "gpu")["status"]["nodes"] == 2
        with pytest.raises(KubeError) as denied:  # the operator has only the chart's rights
            op.kube.list(SECRETS, ns)
        assert denied.value.status == 403

        # a restarted operator adopts the claims (the cloud, standing for AWS, outlives it)
        op.stop()
        op = operator(kube, ns, cloud).start()
        wait_for("the new operator's first turn", op.operator.ready.is_set)
        assert op.operator.autoscaler is not None
        assert {m.name for m in op.operator.autoscaler.live()} == names
        assert len(cloud.instances()) == 2 and len(claims(kube, "gpu")) == 2

        kube.kubelet.finish_job(ns, "train")
        wait_for("nodes removed", lambda: not claims(kube, "gpu"), timeout=40)
        # the claim goes first, the Node and the instance in the same turn or the next
        wait_for(
            "nodes and instances gone",
            lambda: (
                not [n for n in kube.kube.list(NODES)[0] if n["metadata"]["name"] in names]
                and cloud.instances() == []
            ),
        )
        wait_for("pool status at zero",
                 lambda: kube.kube.get(NODE_POOLS, "gpu")["status"]["nodes"] == 0)  # fmt: skip
    finally:
        op.stop()


def test_claim_whose_node_never_registers_is_deleted(kube: Harness, ns: str) -> None:
    """An instance whose node never registers: its claim is deleted after the registration
    timeout, the instance terminated, and a new one launched for the work still waiting."""
    apply_policy(kube, load_policy(POLICY))
    kube.kube.create(NODE_POOLS, node_pool("dud", ["g5.2xlarge"]))
    kube.kubelet.never_join.add("dud")
    cloud = SimulatedCloud(SimulatedCloudConfig(seed=2))
    op = operator(kube, ns, cloud, registration_timeout_seconds=2.0).start()
    try:
        kube.kube.create(JOBS, gpu_job(ns, "stuck", "research", 1), ns)
        first = wait_for("a claim", lambda: claims(kube, "dud"))[0]["metadata"]["name"]
        note = wait_for("the note says a node is launching",
                        lambda: kube.job(ns, "stuck")["metadata"].get("annotations", {})
                        .get(AUTOSCALER_NOTE))  # fmt: skip
        assert first in note
        wait_for("the first claim deleted", lambda: first not in
                 {c["metadata"]["name"] for c in claims(kube, "dud")}, timeout=20)  # fmt: skip
        gone = [i for i in cloud.instances()]
        assert first not in {c["metadata"]["name"] for c in claims(kube, "dud")}
        assert len(gone) <= 1  # the first instance terminated; at most its replacement lives
        reasons = {e["reason"] for e in kube.events("default")}
        assert "RegistrationTimeout" in reasons
        assert not admitted(kube, ns, "stuck")
    finally:
        op.stop()
        kube.kubelet.never_join.discard("dud")


def cpu_job(ns: str, name: str, cpu: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    job = gpu_job(ns, name, "research", 1)
    spec = job["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    job["spec"]["template"]["metadata"] = {"labels": labels or {}}
    return job


def node_of(kube: Harness, ns: str, job: str) -> str | None:
    """The node of the job's one running pod."""
    pods = running_pods(kube, ns, job)
    return str(pods[0]["spec"]["nodeName"]) if len(pods) == 1 else None


def test_consolidation_drains_through_eviction_api_and_respects_pdbs(
    kube: Harness, ns: str
) -> None:
    """Two CPU nodes each left with one small job: consolidation removes one of them; its job
    is requeued and admitted again on the other node. While a PodDisruptionBudget the
    decision cannot read (match expressions) forbids the eviction, the API server refuses the
    drain's dry run (429): the node is uncordoned and kept, nothing disrupted."""
    apply_policy(kube, load_policy(POLICY))
    kube.kube.create(NODE_POOLS, node_pool("cpu", ["m5.xlarge"]))
    cloud = SimulatedCloud(SimulatedCloudConfig(seed=3))
    op = operator(kube, ns, cloud).start()
    svc = {"app": "svc"}
    try:
        # big (3 cpu) and small-a (0.5) share a node; small-b (0.5) comes when it is full
        kube.kube.create(JOBS, cpu_job(ns, "big", "3"), ns)
        kube.kube.create(JOBS, cpu_job(ns, "small-a", "500m", svc), ns)
        first = wait_for("big and small-a running", lambda: node_of(kube, ns, "big")
                         and node_of(kube, ns, "big") == node_of(kube, ns, "small-a")
                         and node_of(kube, ns, "big"), timeout=30)  # fmt: skip
        kube.kube.create(JOBS, cpu_job(ns, "big-2", "3"), ns)
        kube.kube.create(JOBS, cpu_job(ns, "small-b", "500m", svc), ns)
        second = wait_for("big-2 and small-b running", lambda: node_of(kube, ns, "small-b")
                          and node_of(kube, ns, "big-2") == node_of(kube, ns, "small-b")
                          and node_of(kube, ns, "small-b"), timeout=30)  # fmt: skip
        assert first != second
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "svc", "namespace": ns},
               "spec": {"minAvailable": 2, "selector": {"matchExpressions": [
                   {"key": "app", "operator": "In", "values": ["svc"]}]}}}  # fmt: skip
        kube.kube.create(PDBS, pdb, ns)
        wait_for("the PDB counts both pods healthy", lambda: (kube.kube.get(PDBS, "svc", ns)
                 .get("status") or {}).get("currentHealthy") == 2, timeout=20)  # fmt: skip
        kube.kubelet.finish_job(ns, "big")
        kube.kubelet.finish_job(ns, "big-2")
        refused = wait_for("a drain refused", lambda: [
            e for e in kube.events("default") if e["reason"] == "DrainRefused"
            and e["involvedObject"]["name"] in (first, second)], timeout=30)  # fmt: skip
        assert "disruption budget" in refused[0]["message"]
        assert len(claims(kube, "cpu")) == 2
        assert node_of(kube, ns, "small-a") == first and node_of(kube, ns, "small-b") == second
        assert not kube.job(ns, "small-a")["spec"].get("suspend")
        wait_for(
            "the refused node uncordoned",
            lambda: (
                not any(
                    kube.kube.get(NODES, n)["spec"].get("unschedulable") for n in (first, second)
                )
            ),
        )

        kube.kube.delete(PDBS, "svc", ns)
        wait_for("one node consolidated away", lambda: len(claims(kube, "cpu")) == 1, timeout=40)
        kept = claims(kube, "cpu")[0]["metadata"]["name"]
        wait_for(
            "both small jobs running on the node kept",
            lambda: node_of(kube, ns, "small-a") == kept == node_of(kube, ns, "small-b"),
            timeout=30,
        )
        assert len(cloud.instances()) == 1
        moved = "small-a" if kept == second else "small-b"
        eviction = json.loads(kube.job(ns, moved)["metadata"]["annotations"][EVICTION])
        assert eviction["reason"] == "consolidation"
    finally:
        op.stop()
