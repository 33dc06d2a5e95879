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
