"""The HyperPod documents the tests import are legal by SageMaker's own API model: botocore's
``ParamValidator`` checks each against its shape (a Create request, or a Describe response),
so a scenario's expectation is the contract's answer to an input the contract allows."""

from __future__ import annotations

import json
from collections.abc import Iterator
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
from fleetshare.policy.hyperpod_fields import BUNDLE, FLEETSHARE_MEMBERS
from fleetshare.policy.hyperpod_fields import TABLES as HYPERPOD_TABLES
from fleetshare.policy.import_report import ImportReport
from fleetshare.policy.schema import PolicyError, QuotaEntry
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


# --- the field tables (issue 27) ------------------------------------------------------------------
#
# Issue 27: "docs list every Kueue and HyperPod field with 'as Kueue / as HyperPod', 'differs:
# how' or 'refused: why', generated from the importers' own tables so it cannot drift." The
# member list is SageMaker's own: botocore's service model, walked from the shapes imported.

OPERATIONS = {
    "CreateComputeQuota": "ComputeQuota",
    "UpdateComputeQuota": "ComputeQuota",
    "DescribeComputeQuota": "ComputeQuota",
    "ListComputeQuotas": "Bundle",
    "CreateClusterSchedulerConfig": "ClusterSchedulerConfig",
    "UpdateClusterSchedulerConfig": "ClusterSchedulerConfig",
    "DescribeClusterSchedulerConfig": "ClusterSchedulerConfig",
    "ListClusterSchedulerConfigs": "Bundle",
}
DOCUMENTS = {
    "ComputeQuotaSummary": "ComputeQuota",
    "ClusterSchedulerConfigSummary": "ClusterSchedulerConfig",
}
"""A List response's items are documents of their own."""
TABLES = {table.name: table for table in HYPERPOD_TABLES}


def members(shape: Any, table: str, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(table, path) of every member reachable from ``shape``; ``[]`` steps into lists."""
    for name, member in shape.members.items():
        path = f"{prefix}.{name}" if prefix else name
        yield table, path
        inner = member.member if member.type_name == "list" else member
        if inner.type_name != "structure":
            continue
        if inner.name in DOCUMENTS:
            yield from members(inner, DOCUMENTS[inner.name])
        else:
            yield from members(inner, table, f"{path}[]" if member.type_name == "list" else path)


def model_members() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for operation, table in OPERATIONS.items():
        model = MODEL.operation_model(operation)
        for shape in (model.input_shape, model.output_shape):
            found |= set(members(shape, table))
    return found


def test_every_member_the_model_reaches_has_a_rule() -> None:
    """Every member of the request and response shapes of CreateComputeQuota,
    UpdateComputeQuota, DescribeComputeQuota, ListComputeQuotas and their
    ClusterSchedulerConfig counterparts, as botocore's model has them, is read, refused with
    a reason or bookkeeping by a rule of the importer's tables: a member a new botocore adds
    fails here, it is not ignored in silence."""
    missing = sorted(f"{t} {p}" for t, p in model_members() if TABLES[t].covering(p) is None)
    assert missing == []


def test_the_tables_name_only_members_of_the_model() -> None:
    """A rule for a member the model lacks is a typo (or a member SageMaker dropped), except
    botocore's ResponseMetadata and fleetshare's own bundle members."""
    known = model_members()
    strays = [
        f"{table.name} {rule.path}"
        for table in HYPERPOD_TABLES
        for rule in table.rules
        if (table.name, rule.path) not in known
        and rule.path != "ResponseMetadata"
        and not (table.name == "Bundle" and rule.path in FLEETSHARE_MEMBERS)
    ]
    assert strays == []


def legal(doc: dict[str, Any], shape: str) -> dict[str, Any]:
    report = ParamValidator().validate(doc, MODEL.shape_for(shape))
    assert not report.has_errors(), report.generate_report()
    return doc


SCHEDULER = {
    "ClusterSchedulerConfigArn": f"{CLUSTER_ARN}/scheduler",
    "ClusterSchedulerConfigId": "abc",
    "Name": "policy",
    "ClusterSchedulerConfigVersion": 1,
    "Status": "Created",
    "ClusterArn": CLUSTER_ARN,
    "SchedulerConfig": {
        "PriorityClasses": [{"Name": "inference", "Weight": 90}],
        "FairShare": "Enabled",
        "IdleResourceSharing": "Enabled",
    },
    "CreationTime": "2025-01-01T00:00:00Z",
}
QUOTA = {
    "ComputeQuotaArn": f"{CLUSTER_ARN}/quota",
    "ComputeQuotaId": "q1",
    "Name": "ml-allocation",
    "ComputeQuotaVersion": 1,
    "Status": "Created",
    "ComputeQuotaConfig": {
        "ComputeQuotaResources": [
            {"InstanceType": "ml.g5.8xlarge", "Count": 2},
            {"InstanceType": "ml.p5.48xlarge", "Accelerators": 4, "VCpu": 96, "MemoryInGiB": 512},
            {
                "InstanceType": "ml.p4d.24xlarge",
                "AcceleratorPartition": {"Type": "mig-1g.5gb", "Count": 7},
            },
        ],
        "ResourceSharingConfig": {
            "Strategy": "LendAndBorrow",
            "BorrowLimit": 100,
            "AbsoluteBorrowLimits": [
                {"InstanceType": "ml.g5.8xlarge", "Count": 1},
                {
                    "InstanceType": "ml.p5.48xlarge",
                    "Accelerators": 2,
                    "VCpu": 48,
                    "MemoryInGiB": 256,
                },
                {
                    "InstanceType": "ml.p4d.24xlarge",
                    "AcceleratorPartition": {"Type": "mig-1g.5gb", "Count": 2},
                },
            ],
        },
        "PreemptTeamTasks": "Never",
    },
    "ComputeQuotaTarget": {"TeamName": "ml", "FairShareWeight": 10},
    "ActivationState": "Enabled",
    "CreationTime": "2025-01-01T00:00:00Z",
}


def test_every_member_the_tables_read_is_read() -> None:
    """A member the tables say is read, as HyperPod or differing, is read: documents the model
    allows (a DescribeClusterSchedulerConfig response with a ListComputeQuotas response, and a
    CreateClusterSchedulerConfig request with a DescribeComputeQuota response in fleetshare's
    bundle) read each through its table."""
    listed = legal(
        {"ComputeQuotaSummaries": [QUOTA], "NextToken": "n"}, "ListComputeQuotasResponse"
    )
    described = legal(SCHEDULER, "DescribeClusterSchedulerConfigResponse")
    created = legal(
        {"Name": "p", "ClusterArn": CLUSTER_ARN, "SchedulerConfig": SCHEDULER["SchedulerConfig"]},
        "CreateClusterSchedulerConfigRequest",
    )
    legal(QUOTA, "DescribeComputeQuotaResponse")
    reads: set[str] = set()
    for source in (
        {**listed, "ClusterSchedulerConfig": described},
        {"SchedulerConfig": created, "ComputeQuotas": [QUOTA]},
    ):
        report = ImportReport()
        import_hyperpod(source, report=report)
        reads |= report.reads
    unread = [
        f"{t.name}:{r.path}"
        for t in HYPERPOD_TABLES
        for r in t.read()
        if f"{t.name}:{r.path}" not in reads
    ]
    assert unread == []


def test_a_list_of_scheduler_configs_is_noted_as_holding_no_policy() -> None:
    """ClusterSchedulerConfigSummary: "Summary of the cluster policy." It has no
    SchedulerConfig, so a ListClusterSchedulerConfigs response is noted with the table's
    reason and HyperPod's defaults stand."""
    summary = {
        key: SCHEDULER[key]
        for key in (
            "ClusterSchedulerConfigArn",
            "ClusterSchedulerConfigId",
            "Name",
            "CreationTime",
            "Status",
        )
    }
    doc = legal(
        {"ClusterSchedulerConfigSummaries": [summary]}, "ListClusterSchedulerConfigsResponse"
    )
    policy = import_hyperpod(doc)
    rule = BUNDLE.rule("ClusterSchedulerConfigSummaries")
    assert rule is not None and rule.verdict == "refused"
    assert f"ClusterSchedulerConfigSummaries: {rule.note}; ignored" in policy.notes
    assert policy.cluster.fair_share and not policy.cluster.idle_resource_sharing


def test_a_list_request_is_not_a_document() -> None:
    """ListComputeQuotasRequest's members filter what is listed (Status: "Filter for status";
    a request holds no compute quota), so a request alone is refused, naming what is
    expected."""
    doc = legal(
        {"ClusterArn": CLUSTER_ARN, "SortBy": "Name", "Status": "Created"},
        "ListComputeQuotasRequest",
    )
    with pytest.raises(PolicyError) as excinfo:
        import_hyperpod(doc)
    assert "not a cluster scheduler config, compute quota or bundle" in str(excinfo.value)
