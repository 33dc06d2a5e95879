"""Kueue objects in the shape of Kueue's site examples: nothing is dropped silently.

The fixtures under ``tests/fixtures/kueue_site`` were written for fleetshare in the shape of
the examples on Kueue's site (admin, getting-started, topology-aware scheduling, provisioning,
admission fair sharing): ResourceFlavors with node labels, taints, tolerations and a topology,
ClusterQueues with cohorts, resource groups, preemption, queueing strategy, flavor fungibility,
admission checks and fair sharing, LocalQueues, WorkloadPriorityClasses, Cohorts, a Topology,
an AdmissionCheck with its ProvisioningRequestConfig, the controller Configuration. Every
field of every object must be mapped into the policy, noted (with the reason) or rejected with
a clear error: the importer's report accounts for each leaf path of the documents.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.policy.import_report import ImportReport
from fleetshare.policy.kueue import import_kueue
from fleetshare.policy.schema import Policy, PolicyError, QueueingStrategy

SITE = Path(__file__).parent / "fixtures" / "kueue_site"
FIXTURES = sorted(SITE.glob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def ref(doc: dict[str, Any], index: int) -> str:
    """How the importer names an object in paths (``Kind/name``, a LocalQueue with its
    namespace, the Configuration by its kind)."""
    kind = doc["kind"]
    metadata = doc.get("metadata") or {}
    name = metadata.get("name")
    if kind == "Configuration":
        return f"{kind}/{name}" if name else kind
    if not name:
        return f"{kind} (document {index + 1})"
    if kind == "LocalQueue":
        return f"{kind}/{metadata.get('namespace', 'default')}/{name}"
    return f"{kind}/{name}"


def leaves(value: Any, path: str) -> Iterator[str]:
    """Every leaf path under ``value`` (an empty mapping or list is a leaf)."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}")
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    else:
        yield path


def all_leaves(docs: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for i, doc in enumerate(docs):
        base = ref(doc, i)
        for key, value in doc.items():
            out.extend(leaves(value, f"{base}.{key}"))
    return out


def imported(docs: list[dict[str, Any]]) -> tuple[Policy | None, ImportReport]:
    report = ImportReport()
    try:
        return import_kueue(copy.deepcopy(docs), report), report
    except PolicyError:
        return None, report


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_every_field_is_mapped_noted_or_rejected(path: Path) -> None:
    docs = documents(path)
    policy, report = imported(docs)
    assert policy is not None, report.problems  # the site's shapes are valid input
    dropped = [leaf for leaf in all_leaves(docs) if report.account(leaf) is None]
    assert dropped == []


def test_the_fixtures_cover_the_kinds_and_fields_of_the_site_examples() -> None:
    docs = [d for path in FIXTURES for d in documents(path)]
    kinds = {d["kind"] for d in docs}
    assert kinds >= {
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
        "Cohort",
        "Topology",
        "AdmissionCheck",
        "ProvisioningRequestConfig",
        "Configuration",
    }
    fields = {leaf.split(".", 1)[1] for leaf in all_leaves(docs) if "." in leaf}
    for wanted in (
        "spec.nodeLabels",
        "spec.nodeTaints",
        "spec.tolerations",
        "spec.topologyName",
        "spec.cohort",
        "spec.resourceGroups",
        "spec.preemption.borrowWithinCohort",
        "spec.queueingStrategy",
        "spec.flavorFungibility",
        "spec.admissionChecks",
        "spec.admissionChecksStrategy",
        "spec.fairSharing",
        "spec.admissionScope",
        "spec.levels",
        "spec.provisioningClassName",
    ):
        assert any(f.startswith(wanted) for f in fields), wanted


def notes_for(path: Path, where: str) -> list[str]:
    _, report = imported(documents(path))
    return [n for n in report.notes if n.startswith(where)]


@pytest.mark.parametrize(
    ("fixture", "where", "says"),
    [
        ("tas", "ResourceFlavor/h100-racks.spec.tolerations", "not supported"),
        ("provisioning", "AdmissionCheck/capacity-check", "not implemented in governance"),
        ("provisioning", "ProvisioningRequestConfig/gpu-capacity", "provisioning requests"),
        ("provisioning", "ClusterQueue/burst-cq.spec.admissionChecksStrategy", "admission checks"),
        ("provisioning", "ClusterQueue/batch-cq.spec.admissionChecks", "admission checks"),
        ("admin", "ResourceFlavor/preemptible.spec.nodeTaints", "taints its nodes carry"),
        ("admin", "ClusterQueue/empty", "covers no resource"),
        ("admin", "Configuration.waitForPodsReady", "controller setting"),
        ("admin", "WorkloadPriorityClass/production.description", "not policy"),
        ("admin", "ResourceFlavor/a100.metadata.labels", "not policy"),
        ("getting-started", "Namespace/research", "not a Kueue object"),
    ],
)
def test_what_is_not_carried_over_says_why(fixture: str, where: str, says: str) -> None:
    found = notes_for(SITE / f"{fixture}.yaml", where)
    assert any(says in note for note in found), found


def test_what_is_mapped_lands_in_the_policy() -> None:
    policy, _ = imported(documents(SITE / "admin.yaml"))
    assert policy is not None
    training = policy.team("training")
    assert training.group == "ml"
    assert training.queueing_strategy is QueueingStrategy.STRICT_FIFO
    assert training.borrow_within_cohort.max_priority_threshold is not None
    assert training.fair_share_weight == 2.0
    assert training.local_queues == ["ml-training/batch"]
    assert [g.flavor for g in training.quota_groups] == ["budget"]
    assert policy.team("empty").covered_resources == []
    assert {g.name: g.parent for g in policy.groups} == {"company": None, "ml": "company"}
    fair, _ = imported(documents(SITE / "admission-fair-sharing.yaml"))
    assert fair is not None and fair.cluster.admission_fair_sharing is not None
    assert fair.team("shared-cq").local_queue_weights == {
        "team-x/queue-x": 1.0,
        "team-y/queue-y": 3.0,
    }


def edit(docs: list[dict[str, Any]], kind: str, name: str, path: str, value: Any) -> None:
    doc = next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[last] = value


@pytest.mark.parametrize(
    ("fixture", "kind", "name", "path", "value", "where", "reason"),
    [
        (
            "admin",
            "ClusterQueue",
            "training",
            "spec.resourceGroups.1.flavors",
            [
                {
                    "name": "budget",
                    "resources": [{"name": "example.com/budget", "nominalQuota": 1}],
                },
                {
                    "name": "any-node",
                    "resources": [{"name": "example.com/budget", "nominalQuota": 1}],
                },
            ],
            "ClusterQueue/training.spec.resourceGroups[1]",
            "one node flavor",
        ),
        (
            "admin",
            "ClusterQueue",
            "serving",
            "spec.preemption.reclaimWithinCohort",
            "Never",
            "ClusterQueue/serving.spec.preemption.reclaimWithinCohort",
            "",
        ),
        (
            "tas",
            "ClusterQueue",
            "topology-cq",
            "spec.queueingStrategy",
            "LIFO",
            "ClusterQueue/topology-cq.spec.queueingStrategy",
            "must be one of BestEffortFIFO, StrictFIFO",
        ),
        (
            "admission-fair-sharing",
            "ClusterQueue",
            "shared-cq",
            "spec.admissionScope.admissionMode",
            "Fair",
            "ClusterQueue/shared-cq.spec.admissionScope.admissionMode",
            "UsageBasedAdmissionFairSharing",
        ),
        (
            "provisioning",
            "ClusterQueue",
            "batch-cq",
            "spec.resourceGroups.0.flavors.0.resources.0.nominalQuota",
            "lots",
            "ClusterQueue/batch-cq.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "lots",
        ),
    ],
)
def test_what_fleetshare_cannot_take_is_rejected_naming_the_field(
    fixture: str, kind: str, name: str, path: str, value: Any, where: str, reason: str
) -> None:
    docs = documents(SITE / f"{fixture}.yaml")
    edit(docs, kind, name, path, value)
    policy, report = imported(docs)
    if not reason:  # a valid change: still mapped
        assert policy is not None and report.account(where) == "mapped"
        return
    assert policy is None
    assert report.account(where) == "rejected"
    assert any(where == w and reason in r for w, r in report.problems), report.problems
    with pytest.raises(PolicyError, match="invalid Kueue objects"):
        import_kueue(docs)


def test_flavor_fungibility_is_carried_over() -> None:
    policy, report = imported(documents(SITE / "admin.yaml"))
    assert not [n for n in report.notes if "flavorFungibility" in n]
    team = policy.team("training")
    assert (team.flavor_fungibility.when_can_borrow, team.flavor_fungibility.when_can_preempt) == (
        "Borrow",
        "TryNextFlavor",
    )


def test_a_flavor_takes_its_topology_levels() -> None:
    """topologyName names a Topology; its levels are what the flavor's pod sets may ask for."""
    policy, report = imported(documents(SITE / "tas.yaml"))
    assert policy is not None
    flavor = next(f for f in policy.cluster.flavors if f.name == "h100-racks")
    assert flavor.topology_levels == [
        "example.com/topology-block",
        "example.com/topology-rack",
        "kubernetes.io/hostname",
    ]
    assert not [n for n in report.notes if "topologyName" in n or n.startswith("Topology/")]
