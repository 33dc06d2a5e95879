"""The HyperPod documents the tests import are legal by SageMaker's own API model: botocore's
``ParamValidator`` checks each against its shape (a Create request, or a Describe response),
so a scenario's expectation is the contract's answer to an input the contract allows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import botocore.session
import pytest
import yaml
from botocore.validate import ParamValidator

from fleetshare.governance.quota import compile_policy
from fleetshare.model.catalog import load_catalog, mig_profiles
from fleetshare.model.resources import GPU, NEURON
from fleetshare.policy.hyperpod import import_hyperpod
from fleetshare.policy.schema import QuotaEntry
from fleetshare.scenario.loader import load_scenario_data
from fleetshare.scenario.report import to_json
from fleetshare.scenario.runner import run_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = [
    path
    for folder in (ROOT / "tests" / "scenarios", ROOT / "src" / "fleetshare" / "scenarios")
    for path in sorted(folder.glob("*.yaml"))
    if "\nhyperpod:" in path.read_text()
]
MODEL = botocore.session.get_session().get_service_model("sagemaker")


def shape_of(doc: dict[str, Any]) -> str:
    """The API shape a document is in."""
    if "ComputeQuotaId" in doc:
        return "DescribeComputeQuotaResponse"
    if "ClusterSchedulerConfigId" in doc:
        return "DescribeClusterSchedulerConfigResponse"
    if "ComputeQuotaTarget" in doc:
        return "CreateComputeQuotaRequest"
    return "CreateClusterSchedulerConfigRequest"


def documents(data: Any) -> list[dict[str, Any]]:
    """The API documents in a HyperPod input: one, a list, or a bundle of them."""
    if isinstance(data, list):
        return [doc for item in data for doc in documents(item)]
    bundle = ("SchedulerConfig", "ClusterSchedulerConfig", "ComputeQuotas")
    if (
        "ComputeQuotas" in data
        or "ClusterSchedulerConfig" in data
        or (
            set(data) <= set(bundle)
            and isinstance(data.get("SchedulerConfig"), dict)
            and "SchedulerConfig" in data["SchedulerConfig"]
        )
    ):
        out = [data[k] for k in ("SchedulerConfig", "ClusterSchedulerConfig") if k in data]
        return out + list(data.get("ComputeQuotas", []))
    return [data]


def inputs(path: Path) -> list[tuple[str, Any]]:
    spec = yaml.safe_load(path.read_text())
    found = [("hyperpod", spec.get("hyperpod"))]
    found += [
        (f"policy_changes[{i}]", change.get("hyperpod"))
        for i, change in enumerate(spec.get("policy_changes", []))
    ]
    return [
        (where, json.loads(text) if isinstance(text, str) else text)
        for where, text in found
        if text
    ]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_hyperpod_document_of_a_scenario_is_legal(path: Path) -> None:
    checked = 0
    for where, data in inputs(path):
        for doc in documents(data):
            shape = MODEL.shape_for(shape_of(doc))
            report = ParamValidator().validate(doc, shape)
            assert not report.has_errors(), f"{path.name} {where}: {report.generate_report()}"
            checked += 1
    assert checked


def test_the_validator_refuses_what_the_model_does() -> None:
    """(That the check above can fail: a Create request without its ClusterArn.)"""
    doc = {"Name": "a", "ComputeQuotaConfig": {}, "ComputeQuotaTarget": {"TeamName": "a"}}
    report = ParamValidator().validate(doc, MODEL.shape_for(shape_of(doc)))
    assert "ClusterArn" in report.generate_report()


# --- every ClusterInstanceType of the model (issue 27) -------------------------------------------

CLUSTER_INSTANCE_TYPES = MODEL.shape_for("ClusterInstanceType").enum
CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcde12345fg"


def create_quota(team: str, resources: list[dict[str, Any]], **sharing: Any) -> dict[str, Any]:
    """A CreateComputeQuota request, checked against the model."""
    config: dict[str, Any] = {"ComputeQuotaResources": resources}
    if sharing:
        config["ResourceSharingConfig"] = sharing
    doc = {
        "Name": f"{team}-allocation",
        "ClusterArn": CLUSTER_ARN,
        "ComputeQuotaConfig": config,
        "ComputeQuotaTarget": {"TeamName": team},
    }
    report = ParamValidator().validate(doc, MODEL.shape_for("CreateComputeQuotaRequest"))
    assert not report.has_errors(), report.generate_report()
    return doc


@pytest.mark.parametrize("instance_type", CLUSTER_INSTANCE_TYPES)
def test_every_cluster_instance_type_of_the_model_imports(instance_type: str) -> None:
    """ComputeQuotaResourceConfig.InstanceType: "The instance type of the instance group for
    the cluster." Its shape, ClusterInstanceType, enumerates the types a compute quota may name;
    the catalog knows each (ml.p6e-gb200.36xlarge and ml.trn2.3xlarge from its supplements), so
    a quota naming any of them imports."""
    doc = create_quota("ml", [{"InstanceType": instance_type, "Count": 1}])
    assert import_hyperpod(doc).team("ml").quota == [QuotaEntry(flavor=instance_type, count=1)]


@pytest.mark.parametrize(
    ("instance_type", "resource", "per_instance"),
    [("ml.p6e-gb200.36xlarge", GPU, 4), ("ml.trn2.3xlarge", NEURON, 1)],
)
def test_the_accelerators_of_the_supplemented_types_are_governed(
    instance_type: str, resource: str, per_instance: int
) -> None:
    """Accelerators: "The number of accelerators to allocate." A team allocated one
    instance's accelerators, lending and borrowing nothing ("DontLend: entities do not lend
    idle compute"), runs one instance's worth of work; the next waits although a node is free."""
    quota = create_quota(
        "ml",
        [{"InstanceType": instance_type, "Accelerators": per_instance}],
        Strategy="DontLend",
    )
    policy = import_hyperpod(quota)
    node = compile_policy(policy, load_catalog()).nodes["ml"]
    assert node.quota[(instance_type, resource)] == per_instance * 1000

    job = {"team": "ml", "duration": 100, "requests": {resource: per_instance}}
    data = {
        "name": "supplemented",
        "cluster": {"nodes": [{"instance_type": instance_type, "count": 2}]},
        "hyperpod": quota,
        "workloads": [{"name": "first", "at": 0, **job}, {"name": "second", "at": 1, **job}],
        "until": 50,
    }
    out = to_json(run_scenario(load_scenario_data(data, ROOT)))["workloads"]
    assert out["first"]["state"] == "admitted"
    assert out["second"]["state"] == "pending"
    assert "quota" in out["second"]["pending_reason"]


def test_the_gb200_partitions_of_the_model_are_its_gpus_mig_profiles() -> None:
    """AcceleratorPartitionConfig.Type: "The available profile types depend on the instance
    type specified in the compute quota configuration." MIGProfileType lists GB200's (the
    profiles between 1g.23gb and 7g.186gb with a 47, 93 or 186 GB slice); the catalog's
    p6e-gb200 GPUs offer exactly those."""
    gb200 = {
        "mig-1g.23gb",
        "mig-1g.47gb",
        "mig-2g.47gb",
        "mig-3g.93gb",
        "mig-4g.93gb",
        "mig-7g.186gb",
    }
    assert gb200 <= set(MODEL.shape_for("MIGProfileType").enum)
    offered = mig_profiles(load_catalog().get("ml.p6e-gb200.36xlarge"))
    assert {p.replace("nvidia.com/", "") for p in offered} == gb200
