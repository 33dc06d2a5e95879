"""Kueue and SageMaker HyperPod importers: what an admin relies on after importing a policy."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from fleetshare.policy.hyperpod import accelerator_resource, import_hyperpod
from fleetshare.policy.kueue import import_kueue, rescale_priorities
from fleetshare.policy.schema import (
    AcceleratorPartition,
    BorrowLimit,
    LendingLimit,
    Policy,
    PolicyError,
    PreemptTeamTasks,
    QuotaEntry,
    ReclaimPolicy,
    SharingStrategy,
)

FIXTURES = Path(__file__).parent / "fixtures"


def kueue_fixture(name: str) -> Policy:
    return import_kueue((FIXTURES / name).read_text())


def walkthrough() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "hyperpod_walkthrough.json").read_text())
    return data


def problems_of(excinfo: pytest.ExceptionInfo[PolicyError]) -> dict[str, str]:
    return dict(excinfo.value.problems)


# --- Kueue: the docs' borrowing example --------------------------------------------------------


def test_kueue_borrowing_example_maps_queues_to_teams_in_one_group() -> None:
    policy = kueue_fixture("kueue_borrowing.yaml")

    assert [f.name for f in policy.cluster.flavors] == ["default-flavor"]
    assert [(g.name, g.parent, g.quota) for g in policy.groups] == [("cohort", None, [])]
    a, b = policy.team("team-a"), policy.team("team-b")
    assert a.quota == [QuotaEntry(flavor="default-flavor", resources={"cpu": 9})]
    assert b.quota == [QuotaEntry(flavor="default-flavor", resources={"cpu": 12})]
    for team in (a, b):
        assert team.group == "cohort"
        assert team.sharing is SharingStrategy.LEND_AND_BORROW
        assert team.borrow_limits == [] and team.lending_limits == []


def test_kueue_defaults_are_kueues_not_fleetshares() -> None:
    policy = kueue_fixture("kueue_borrowing.yaml")

    team = policy.team("team-a")
    assert team.preempt_team_tasks is PreemptTeamTasks.NEVER
    assert team.reclaim is ReclaimPolicy.NEVER
    assert team.fair_share_weight == 1.0
    assert policy.cluster.fair_share is False
    assert policy.cluster.idle_resource_sharing is False


def test_kueue_borrowing_limit_caps_team_a_on_that_flavor_and_resource() -> None:
    policy = kueue_fixture("kueue_borrowing_limit.yaml")

    assert policy.team("team-a").borrow_limits == [
        BorrowLimit(resource="cpu", flavor="default-flavor", absolute=1)
    ]
    assert policy.team("team-b").borrow_limits == []


def test_kueue_lending_limit_keeps_the_rest_of_team_b_private() -> None:
    policy = kueue_fixture("kueue_lending_limit.yaml")

    assert policy.team("team-b").lending_limits == [
        LendingLimit(resource="cpu", flavor="default-flavor", absolute=1)
    ]
    assert policy.team("team-a").lending_limits == []


# --- Kueue: every supported kind ---------------------------------------------------------------


@pytest.fixture(scope="module")
def full() -> Policy:
    return kueue_fixture("kueue_full.yaml")


def test_kueue_full_nested_cohorts_become_a_group_tree(full: Policy) -> None:
    groups = {g.name: g for g in full.groups}

    assert {name: g.parent for name, g in groups.items()} == {
        "org": None,
        "research": "org",
        "prod": "org",  # v1beta2 parentName
        "sandbox": None,  # named by team-d, never declared
    }
    assert groups["org"].quota == [
        QuotaEntry(flavor="on-demand", resources={"cpu": 16, "memory": "64Gi", "nvidia.com/gpu": 2})
    ]
    assert groups["research"].borrow_limits == [
        BorrowLimit(resource="cpu", flavor="on-demand", absolute=32),
        BorrowLimit(resource="nvidia.com/gpu", flavor="on-demand", absolute=4),
    ]
    assert groups["research"].lending_limits == [
        LendingLimit(resource="nvidia.com/gpu", flavor="on-demand", absolute=0)
    ]
    assert groups["sandbox"].quota == []
    assert (groups["research"].fair_share_weight, groups["org"].fair_share_weight) == (2.0, 1.0)


def test_kueue_full_cluster_queue_with_two_flavors(full: Policy) -> None:
    team = full.team("team-a")

    assert team.group == "research"  # v1beta2 cohortName
    assert team.quota == [
        QuotaEntry(
            flavor="on-demand", resources={"cpu": 32, "memory": "256Gi", "nvidia.com/gpu": 4}
        ),
        QuotaEntry(flavor="spot", resources={"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8}),
    ]
    assert team.borrow_limits == [
        BorrowLimit(resource="cpu", flavor="on-demand", absolute=8),
        BorrowLimit(resource="nvidia.com/gpu", flavor="on-demand", absolute=2),
    ]
    assert team.lending_limits == [
        LendingLimit(resource="memory", flavor="on-demand", absolute="128Gi"),
        LendingLimit(resource="nvidia.com/gpu", flavor="on-demand", absolute=2),
    ]
    assert team.local_queues == ["ml-a/training", "ml-a/notebooks"]


@pytest.mark.parametrize(
    ("team", "weight", "within", "reclaim"),
    [
        ("team-a", 0.5, PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY, ReclaimPolicy.ANY),
        ("team-b", 2.0, PreemptTeamTasks.LOWER_PRIORITY, ReclaimPolicy.LOWER_PRIORITY),
        ("team-c", 1.0, PreemptTeamTasks.NEVER, ReclaimPolicy.NEVER),
    ],
    ids=["weight-500m-newer-equal-any", "weight-2-lower-priority", "defaults-never"],
)
def test_kueue_full_weights_and_preemption(
    full: Policy,
    team: str,
    weight: float,
    within: PreemptTeamTasks,
    reclaim: ReclaimPolicy,
) -> None:
    imported = full.team(team)

    assert imported.fair_share_weight == weight
    assert imported.preempt_team_tasks is within
    assert imported.reclaim is reclaim


def test_kueue_queue_without_cohort_neither_lends_nor_borrows(full: Policy) -> None:
    team = full.team("team-c")

    assert team.group is None
    assert team.sharing is SharingStrategy.DONT_LEND
    assert full.team("team-d").group == "sandbox"
    assert full.team("team-d").sharing is SharingStrategy.LEND_AND_BORROW


def test_kueue_full_flavors_cluster_and_local_queues(full: Policy) -> None:
    flavors = {f.name: f.node_labels for f in full.cluster.flavors}

    assert flavors == {
        "on-demand": {
            "karpenter.sh/capacity-type": "on-demand",
            "node.kubernetes.io/instance-type": "p4d.24xlarge",
        },
        "spot": {"karpenter.sh/capacity-type": "spot"},
    }
    assert full.cluster.fair_share is True
    assert full.cluster.idle_resource_sharing is False
    assert full.team("team-b").local_queues == ["ml-b/default"]


def test_kueue_priorities_outside_0_100_are_rescaled_keeping_order(full: Policy) -> None:
    weights = {pc.name: pc.weight for pc in full.cluster.priority_classes}

    assert weights["high"] > weights["medium"] > weights["low"] > 0
    assert all(0 <= w <= 100 for w in weights.values())
    note = next(n for n in full.notes if n.startswith("WorkloadPriorityClass:"))
    assert "rescaled" in note
    for name, value in (("high", 1000), ("medium", 100), ("low", 10)):
        assert f"{name} {value}→{weights[name]}" in note


def test_kueue_priorities_within_0_100_are_kept_as_they_are() -> None:
    docs = [
        {"kind": "WorkloadPriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in (("urgent", 90), ("batch", 10))
    ]
    policy = import_kueue(docs)

    assert {pc.name: pc.weight for pc in policy.cluster.priority_classes} == {
        "urgent": 90,
        "batch": 10,
    }
    assert not any("rescaled" in n for n in policy.notes)


@given(st.dictionaries(st.text(min_size=1), st.integers(-(2**31), 2**31 - 1), max_size=10))
def test_rescaled_priorities_preserve_order_and_distinctness(values: dict[str, int]) -> None:
    weights = rescale_priorities(values)

    assert all(0 <= w <= 100 for w in weights.values())
    for a in values:
        for b in values:
            assert (values[a] < values[b]) == (weights[a] < weights[b])
            assert (values[a] == values[b]) == (weights[a] == weights[b])


@pytest.mark.parametrize(
    "where",
    [
        "ResourceFlavor/spot.spec.nodeTaints",
        "ResourceFlavor/spot.spec.tolerations",
        "ClusterQueue/team-a.spec.admissionChecks",
        "ClusterQueue/team-a.spec.futureField",
        "ClusterQueue/team-a.spec.preemption.borrowWithinCohort",
        "AdmissionCheck/provisioning",
        "Configuration.manageJobsWithoutQueueName",
        "Configuration.fairSharing.preemptionStrategies",
    ],
)
def test_kueue_notes_name_every_unsupported_field(full: Policy, where: str) -> None:
    assert any(note.startswith(where) for note in full.notes), full.notes


def test_kueue_notes_explain_mapping_decisions(full: Policy) -> None:
    notes = "\n".join(full.notes)

    assert "ClusterQueue/team-c: no cohort" in notes
    assert "Cohort/sandbox: named by ClusterQueue/team-d but not declared" in notes
    assert "idle_resource_sharing off" in notes


def test_kueue_accepts_parsed_documents_and_kubectl_lists() -> None:
    docs = list(yaml.safe_load_all((FIXTURES / "kueue_borrowing.yaml").read_text()))
    wrapped = [{"apiVersion": "v1", "kind": "List", "items": docs}]

    assert import_kueue(docs) == kueue_fixture("kueue_borrowing.yaml")
    assert import_kueue(wrapped) == kueue_fixture("kueue_borrowing.yaml")


def test_kueue_misspelt_kind_is_noted_with_the_kind_meant() -> None:
    """``kind: ClusterQueu`` imported nothing, noted only as "not supported; ignored"."""
    docs = [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueu", "metadata": {"name": "q"}}
    ]
    policy = import_kueue(docs)

    assert policy.teams == []
    assert (
        "ClusterQueu/q: kind ClusterQueu: not supported; ignored (did you mean ClusterQueue?)"
        in (policy.notes)
    )


def test_kueue_local_queue_for_an_unknown_cluster_queue_is_noted() -> None:
    docs = [
        {
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": "ns"},
            "spec": {"clusterQueue": "ghost"},
        }
    ]
    policy = import_kueue(docs)

    assert policy.teams == []
    assert any(n.startswith("LocalQueue/ns/q.spec.clusterQueue") for n in policy.notes)


# --- Kueue: invalid input ----------------------------------------------------------------------


def borrowing_docs() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((FIXTURES / "kueue_borrowing.yaml").read_text()))


def team_a_cpu(docs: list[dict[str, Any]]) -> dict[str, Any]:
    queue = next(d for d in docs if d["metadata"]["name"] == "team-a")
    resource: dict[str, Any] = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    return resource


def test_kueue_bad_quantity_names_the_field_and_the_value() -> None:
    docs = borrowing_docs()
    queue = next(d for d in docs if d["metadata"]["name"] == "team-a")
    group = queue["spec"]["resourceGroups"][0]
    group["coveredResources"].append("memory")
    group["flavors"][0]["resources"].append({"name": "memory", "nominalQuota": "abc"})

    with pytest.raises(PolicyError) as excinfo:
        import_kueue(docs)

    path = "ClusterQueue/team-a.spec.resourceGroups[0].flavors[0].resources[1].nominalQuota"
    assert problems_of(excinfo)[path].startswith("not a Kubernetes quantity: 'abc'")


def edit_undeclared_flavor(docs: list[dict[str, Any]]) -> None:
    docs[0]["metadata"]["name"] = "other-flavor"


def edit_missing_name(docs: list[dict[str, Any]]) -> None:
    del docs[2]["metadata"]["name"]


def edit_limit_without_cohort(docs: list[dict[str, Any]]) -> None:
    del docs[2]["spec"]["cohort"]
    team_a_cpu(docs)["borrowingLimit"] = 1


def edit_lending_over_nominal(docs: list[dict[str, Any]]) -> None:
    team_a_cpu(docs)["lendingLimit"] = "10"


def edit_bad_preemption(docs: list[dict[str, Any]]) -> None:
    docs[2]["spec"]["preemption"] = {"withinClusterQueue": "Always"}


def edit_bad_weight(docs: list[dict[str, Any]]) -> None:
    docs[2]["spec"]["fairSharing"] = {"weight": "heavy"}


def edit_uncovered_resource(docs: list[dict[str, Any]]) -> None:
    team_a_cpu(docs)["name"] = "memory"


def edit_misspelt_nominal_quota(docs: list[dict[str, Any]]) -> None:
    resource = team_a_cpu(docs)
    resource["nominalQuta"] = resource.pop("nominalQuota")


@pytest.mark.parametrize(
    ("edit", "path", "reason"),
    [
        (
            edit_undeclared_flavor,
            "ClusterQueue/team-a.spec.resourceGroups[0].flavors[0].name",
            "ResourceFlavor 'default-flavor' is not declared",
        ),
        (edit_missing_name, "ClusterQueue (document 3).metadata.name", "required"),
        (
            edit_limit_without_cohort,
            "ClusterQueue/team-a.spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
            "only allowed when the ClusterQueue has a cohort",
        ),
        (
            edit_lending_over_nominal,
            "ClusterQueue/team-a.spec.resourceGroups[0].flavors[0].resources[0].lendingLimit",
            "must not exceed nominalQuota (9)",
        ),
        (
            edit_bad_preemption,
            "ClusterQueue/team-a.spec.preemption.withinClusterQueue",
            "must be one of Never, LowerPriority, LowerOrNewerEqualPriority",
        ),
        (
            edit_bad_weight,
            "ClusterQueue/team-a.spec.fairSharing.weight",
            "not a Kubernetes quantity: 'heavy'",
        ),
        (
            edit_uncovered_resource,
            "ClusterQueue/team-a.spec.resourceGroups[0].flavors[0].resources[0].name",
            "'memory' is not listed in coveredResources",
        ),
        (  # once "not a Kubernetes quantity: None", the typo only in notes never shown
            edit_misspelt_nominal_quota,
            "ClusterQueue/team-a.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "required (unknown field here: nominalQuta)",
        ),
    ],
    ids=[
        "undeclared-flavor",
        "missing-name",
        "borrowing-limit-without-cohort",
        "lending-limit-over-nominal",
        "unknown-preemption-policy",
        "weight-not-a-quantity",
        "resource-not-covered",
        "nominal-quota-misspelt",
    ],
)
def test_kueue_invalid_input_names_path_and_reason(edit: Any, path: str, reason: str) -> None:
    docs = borrowing_docs()
    edit(docs)

    with pytest.raises(PolicyError) as excinfo:
        import_kueue(docs)

    assert problems_of(excinfo)[path].startswith(reason), excinfo.value.problems


def test_kueue_reports_all_problems_at_once() -> None:
    docs = borrowing_docs()
    edit_undeclared_flavor(docs)
    edit_bad_preemption(docs)

    with pytest.raises(PolicyError) as excinfo:
        import_kueue(docs)

    assert len(excinfo.value.problems) == 3  # two queues on the undeclared flavor, one preemption


def test_kueue_invalid_yaml() -> None:
    with pytest.raises(PolicyError) as excinfo:
        import_kueue("kind: [unclosed")

    assert problems_of(excinfo)["(top level)"].startswith("not valid YAML")


# --- HyperPod: the public walkthrough ----------------------------------------------------------


def test_hyperpod_walkthrough_cluster_policy() -> None:
    policy = import_hyperpod((FIXTURES / "hyperpod_walkthrough.json").read_text())

    assert {pc.name: pc.weight for pc in policy.cluster.priority_classes} == {
        "inference": 90,
        "experimentation": 80,
        "training": 70,
        "fine-tuning": 50,
    }
    assert policy.cluster.fair_share is True
    assert policy.cluster.idle_resource_sharing is False  # absent means Disabled


@pytest.mark.parametrize("name", ["team-a", "team-b"])
def test_hyperpod_walkthrough_teams(name: str) -> None:
    team = import_hyperpod(walkthrough()).team(name)

    assert team.quota == [QuotaEntry(flavor="ml.g5.8xlarge", count=2)]
    assert team.sharing is SharingStrategy.LEND_AND_BORROW
    # "The values can be 1 - 500 percent of idle compute that the team is allowed to borrow.
    # Default is 50." (ResourceSharingConfig.BorrowLimit)
    assert team.borrow_limits == [BorrowLimit(percent_of_idle=50)]
    assert team.preempt_team_tasks is PreemptTeamTasks.LOWER_PRIORITY
    assert team.enabled is True
    assert team.fair_share_weight == 0  # HyperPod's default weight
    assert team.local_queues == [f"hyperpod-ns-{name}/hyperpod-ns-{name}-localqueue"]


def test_hyperpod_quota_reading_gives_percent_of_quota() -> None:
    policy = import_hyperpod(walkthrough(), borrow_limit_reading="quota")

    assert policy.team("team-a").borrow_limits == [BorrowLimit(percent_of_quota=50)]
    assert any("percentage of each team's own quota" in n for n in policy.notes)
    default = import_hyperpod(walkthrough())
    assert any("percentage of idle compute, as the API model" in n for n in default.notes)


def test_hyperpod_borrow_limit_above_100_of_idle_never_binds_and_says_so() -> None:
    data = walkthrough()
    data["ComputeQuotas"][0]["ComputeQuotaConfig"]["ResourceSharingConfig"]["BorrowLimit"] = 250

    policy = import_hyperpod(data)

    assert policy.team("team-a").borrow_limits == [BorrowLimit(percent_of_idle=250)]
    assert any("250% of idle compute: above 100% it never binds" in n for n in policy.notes)
    quota = import_hyperpod(data, borrow_limit_reading="quota").team("team-a").borrow_limits
    assert quota == [BorrowLimit(percent_of_quota=250)]


def test_hyperpod_accepts_a_list_of_api_shapes() -> None:
    data = walkthrough()
    scheduler = data["SchedulerConfig"]
    describe_quota = dict(
        data["ComputeQuotas"][0],
        ComputeQuotaId="abc123def456",
        Status="Created",
        ComputeQuotaVersion=1,
    )

    policy = import_hyperpod([scheduler, describe_quota])

    assert [t.name for t in policy.teams] == ["team-a"]
    assert len(policy.cluster.priority_classes) == 4
    assert not any("unknown field" in n for n in policy.notes)


def test_hyperpod_compute_quota_alone_uses_cluster_defaults() -> None:
    policy = import_hyperpod(json.dumps(walkthrough()["ComputeQuotas"][1]))

    assert policy.cluster.fair_share is True
    assert policy.cluster.idle_resource_sharing is False
    assert policy.cluster.priority_classes == []
    assert any("no cluster scheduler config" in n for n in policy.notes)


def quota(config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"ComputeQuotaConfig": config, "ComputeQuotaTarget": {"TeamName": "ml"}, **extra}


def test_hyperpod_defaults_to_lend_and_borrow_with_50_percent() -> None:
    team = import_hyperpod(quota({})).team("ml")

    assert team.sharing is SharingStrategy.LEND_AND_BORROW
    # "The values can be 1 - 500 percent of idle compute that the team is allowed to borrow.
    # Default is 50." (ResourceSharingConfig.BorrowLimit)
    assert team.borrow_limits == [BorrowLimit(percent_of_idle=50)]
    assert team.preempt_team_tasks is PreemptTeamTasks.LOWER_PRIORITY


def test_hyperpod_strategies_that_do_not_borrow_get_no_borrow_limits() -> None:
    lend = import_hyperpod(quota({"ResourceSharingConfig": {"Strategy": "Lend"}}))
    dont = import_hyperpod(
        quota({"ResourceSharingConfig": {"Strategy": "DontLend", "BorrowLimit": 20}})
    )

    assert lend.team("ml").sharing is SharingStrategy.LEND
    assert lend.team("ml").borrow_limits == []
    assert dont.team("ml").sharing is SharingStrategy.DONT_LEND
    assert dont.team("ml").borrow_limits == []
    assert any("does not borrow" in n for n in dont.notes)


def test_hyperpod_fine_grained_quota_entries() -> None:
    resources = [
        {"InstanceType": "ml.p5.48xlarge", "Accelerators": 4, "VCpu": 96, "MemoryInGiB": 512.5},
        {"InstanceType": "ml.p4d.24xlarge", "AcceleratorPartition": {"Type": "1g.5gb", "Count": 7}},
    ]
    team = import_hyperpod(quota({"ComputeQuotaResources": resources})).team("ml")

    assert team.quota == [
        QuotaEntry(flavor="ml.p5.48xlarge", accelerators=4, vcpu=96, memory_gib=512.5),
        QuotaEntry(
            flavor="ml.p4d.24xlarge",
            accelerator_partition=AcceleratorPartition(type="mig-1g.5gb", count=7),
        ),
    ]


def test_hyperpod_absolute_borrow_limits_per_resource() -> None:
    absolute = [
        {"InstanceType": "ml.p4d.24xlarge", "Accelerators": 2, "VCpu": 12.5, "MemoryInGiB": 64},
        {"InstanceType": "ml.trn1.32xlarge", "Accelerators": 8},
        {
            "InstanceType": "ml.p4d.24xlarge",
            "AcceleratorPartition": {"Type": "mig-3g.20gb", "Count": 2},
        },
    ]
    sharing = {"Strategy": "LendAndBorrow", "BorrowLimit": 100, "AbsoluteBorrowLimits": absolute}

    team = import_hyperpod(quota({"ResourceSharingConfig": sharing})).team("ml")

    assert team.borrow_limits == [
        BorrowLimit(percent_of_idle=100),
        BorrowLimit(resource="nvidia.com/gpu", flavor="ml.p4d.24xlarge", absolute=2),
        BorrowLimit(resource="cpu", flavor="ml.p4d.24xlarge", absolute="12.5"),
        BorrowLimit(resource="memory", flavor="ml.p4d.24xlarge", absolute="64Gi"),
        BorrowLimit(resource="aws.amazon.com/neuron", flavor="ml.trn1.32xlarge", absolute=8),
        BorrowLimit(resource="nvidia.com/mig-3g.20gb", flavor="ml.p4d.24xlarge", absolute=2),
    ]


def test_hyperpod_absolute_borrow_limit_in_whole_instances_is_resolved() -> None:
    """Count whole instances: that many instances' allocatable of each resource, as a quota
    Count resolves (it was a note, not imported, before the importer read the catalog)."""
    absolute = [{"InstanceType": "ml.g5.8xlarge", "Count": 2}]
    policy = import_hyperpod(quota({"ResourceSharingConfig": {"AbsoluteBorrowLimits": absolute}}))

    limits = {b.resource: b.absolute for b in policy.team("ml").borrow_limits[1:]}
    assert limits["nvidia.com/gpu"] == "2"
    assert limits["cpu"] == "63700m"  # 2 x 31.85 allocatable vCPUs
    assert set(limits) == {"nvidia.com/gpu", "cpu", "memory"}
    assert all(b.flavor == "ml.g5.8xlarge" for b in policy.team("ml").borrow_limits[1:])


@pytest.mark.parametrize(
    ("entry", "field", "reason"),
    [
        ({"InstanceType": "ml.g55.8xlarge", "Count": 1}, "InstanceType", "unknown instance type"),
        ({"InstanceType": "ml.m5.large", "Accelerators": 2}, "Accelerators", "has no accelerat"),
        (
            {
                "InstanceType": "ml.g5.8xlarge",
                "AcceleratorPartition": {"Type": "1g.5gb", "Count": 1},
            },
            "AcceleratorPartition.Type",
            "instance type ml.g5.8xlarge has no MIG profile 1g.5gb",
        ),
    ],
    ids=["unknown-type", "accelerators-of-a-cpu-type", "mig-profile-the-gpu-lacks"],
)
def test_hyperpod_amounts_the_instance_type_cannot_supply(
    entry: dict[str, Any], field: str, reason: str
) -> None:
    for where in ("ComputeQuotaResources", "AbsoluteBorrowLimits"):
        config: dict[str, Any] = (
            {"ComputeQuotaResources": [entry]}
            if where == "ComputeQuotaResources"
            else {"ResourceSharingConfig": {"AbsoluteBorrowLimits": [entry]}}
        )
        with pytest.raises(PolicyError) as excinfo:
            import_hyperpod(quota(config))
        found = {k: v for k, v in problems_of(excinfo).items() if k.endswith(f"[0].{field}")}
        assert found and reason in next(iter(found.values())), excinfo.value.problems


def test_hyperpod_quota_above_one_instance_is_that_many_instances() -> None:
    """16 accelerators of an 8-GPU type: HyperPod allocates per instance group ("16 out of 32
    total accelerators" is its own example), so this is two instances' worth, not an error."""
    resources = [{"InstanceType": "ml.p4d.24xlarge", "Accelerators": 16}]
    team = import_hyperpod(quota({"ComputeQuotaResources": resources})).team("ml")
    assert team.quota == [QuotaEntry(flavor="ml.p4d.24xlarge", accelerators=16)]


@pytest.mark.parametrize(
    ("instance_type", "resource"),
    [
        ("ml.g5.8xlarge", "nvidia.com/gpu"),
        ("ml.trn2.48xlarge", "aws.amazon.com/neuron"),
        ("ml.inf2.xlarge", "aws.amazon.com/neuron"),
        ("p4d.24xlarge", "nvidia.com/gpu"),
    ],
)
def test_accelerator_resource_by_family(instance_type: str, resource: str) -> None:
    assert accelerator_resource(instance_type) == resource


def test_hyperpod_activation_weight_and_idle_sharing() -> None:
    data = walkthrough()
    data["SchedulerConfig"]["SchedulerConfig"]["IdleResourceSharing"] = "Enabled"
    data["ComputeQuotas"][1]["ActivationState"] = "Disabled"
    data["ComputeQuotas"][1]["ComputeQuotaTarget"]["FairShareWeight"] = 75

    policy = import_hyperpod(data)

    assert policy.cluster.idle_resource_sharing is True
    assert policy.team("team-b").enabled is False
    assert policy.team("team-b").fair_share_weight == 75
    assert policy.team("team-a").enabled is True


def test_hyperpod_unknown_fields_are_noted_with_their_path() -> None:
    data = walkthrough()
    data["ComputeQuotas"][0]["ComputeQuotaConfig"]["Sparkle"] = True
    data["SchedulerConfig"]["SchedulerConfig"]["GangScheduling"] = "Enabled"

    notes = import_hyperpod(data).notes

    assert "ComputeQuotas[0].ComputeQuotaConfig.Sparkle = True: unknown field; ignored" in notes
    gang = "SchedulerConfig.SchedulerConfig.GangScheduling = Enabled: unknown field; ignored"
    assert gang in notes


# --- HyperPod: invalid input -------------------------------------------------------------------

SHARING = "ComputeQuotas[1].ComputeQuotaConfig.ResourceSharingConfig"


def set_in(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        name, _, index = part.partition("[")
        node = node[name] if not index else node[name][int(index.rstrip("]"))]
    node[last] = value


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        (f"{SHARING}.Strategy", "Hoard", "must be one of Lend, DontLend, LendAndBorrow"),
        (f"{SHARING}.BorrowLimit", -5, "must be from 0 to 10000, got -5"),
        ("ComputeQuotas[0].ComputeQuotaTarget.FairShareWeight", 101, "must be from 0 to 100"),
        ("ComputeQuotas[0].ComputeQuotaTarget.TeamName", "", "required"),
        ("ComputeQuotas[0].ComputeQuotaConfig.PreemptTeamTasks", "Always", "must be one of Never"),
        ("ComputeQuotas[0].ActivationState", "On", "must be one of Enabled, Disabled"),
        ("SchedulerConfig.SchedulerConfig.FairShare", "Yes", "must be one of Enabled, Disabled"),
        ("SchedulerConfig.SchedulerConfig.PriorityClasses[0].Weight", 120, "must be from 0 to 100"),
        (
            "ComputeQuotas[0].ComputeQuotaConfig.ComputeQuotaResources[0].Count",
            "two",
            "must be an integer",
        ),
    ],
    ids=[
        "unknown-strategy",
        "negative-borrow-limit",
        "fair-share-weight-over-100",
        "empty-team-name",
        "unknown-preempt-team-tasks",
        "unknown-activation-state",
        "unknown-fair-share",
        "priority-weight-over-100",
        "count-not-an-integer",
    ],
)
def test_hyperpod_invalid_values_name_the_json_path(path: str, value: Any, reason: str) -> None:
    data = walkthrough()
    set_in(data, path, value)

    with pytest.raises(PolicyError) as excinfo:
        import_hyperpod(data)

    assert problems_of(excinfo)[path].startswith(reason), excinfo.value.problems


def test_hyperpod_count_combined_with_other_amounts() -> None:
    data = walkthrough()
    data["ComputeQuotas"][0]["ComputeQuotaConfig"]["ComputeQuotaResources"][0]["Accelerators"] = 1

    with pytest.raises(PolicyError) as excinfo:
        import_hyperpod(data)

    path = "ComputeQuotas[0].ComputeQuotaConfig.ComputeQuotaResources[0].Count"
    assert "do not combine" in problems_of(excinfo)[path]


def test_hyperpod_bad_mig_profile() -> None:
    resources = [
        {"InstanceType": "ml.p4d.24xlarge", "AcceleratorPartition": {"Type": "big", "Count": 1}}
    ]

    with pytest.raises(PolicyError) as excinfo:
        import_hyperpod(quota({"ComputeQuotaResources": resources}))

    path = "ComputeQuotaConfig.ComputeQuotaResources[0].AcceleratorPartition.Type"
    assert problems_of(excinfo)[path].startswith("not a MIG profile: 'big'")


def test_hyperpod_team_with_two_compute_quotas() -> None:
    data = walkthrough()
    data["ComputeQuotas"][1]["ComputeQuotaTarget"]["TeamName"] = "team-a"

    with pytest.raises(PolicyError) as excinfo:
        import_hyperpod(data)

    reason = problems_of(excinfo)["ComputeQuotas[1].ComputeQuotaTarget.TeamName"]
    assert reason == "team 'team-a' already has a compute quota at ComputeQuotas[0]"


def test_hyperpod_only_one_scheduler_config() -> None:
    data = walkthrough()
    twice = [data["SchedulerConfig"], copy.deepcopy(data["SchedulerConfig"])]

    with pytest.raises(PolicyError) as excinfo:
        import_hyperpod(twice)

    assert "only one cluster scheduler config" in problems_of(excinfo)["[1]"]


@pytest.mark.parametrize(
    ("source", "path", "reason"),
    [
        ("{not json", "(top level)", "not valid JSON"),
        ("42", "(top level)", "expected a JSON object"),
        ('{"Hello": 1}', "(top level)", "not a cluster scheduler config"),
    ],
)
def test_hyperpod_unrecognised_input(source: str, path: str, reason: str) -> None:
    with pytest.raises(PolicyError) as excinfo:
        import_hyperpod(source)

    assert problems_of(excinfo)[path].startswith(reason)


def test_kueue_separate_cohorts_never_borrow_from_each_other() -> None:
    """Found by the Kueue generator trace: root cohorts hung under one cluster root could
    borrow across cohorts, which Kueue never allows."""
    from fleetshare.governance.admission import Engine
    from fleetshare.governance.snapshot import Snapshot
    from fleetshare.model.node import Node
    from fleetshare.model.workload import PodSet, Workload

    docs = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "default"},
        }
    ]
    for queue, cohort in (("a", "one"), ("b", "two")):
        docs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": queue},
                "spec": {
                    "cohort": cohort,
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {
                                    "name": "default",
                                    "resources": [{"name": "cpu", "nominalQuota": 4}],
                                }
                            ],
                        }
                    ],
                },
            }
        )
    engine = Engine(import_kueue(docs))
    node = Node("n", {"cpu": 8000})
    big = Workload("big", "a", (PodSet("main", 1, {"cpu": 2000}),), submit_time=1)
    fits = Workload("fits", "a", (PodSet("main", 1, {"cpu": 4000}),))
    result = engine.cycle(Snapshot(0, [node], [], [big, fits]))
    assert [a.workload.name for a in result.admissions] == ["fits"]
    assert "needs 2" in result.pending["big"].reason  # b's unused quota is not a's to take


# --- Kueue: resource groups and local queues ------------------------------------------------


def test_kueue_covered_resources_are_the_union_of_the_resource_groups() -> None:
    policy = kueue_fixture("kueue_resource_groups.yaml")
    assert policy.team("cpu-mem-cq").covered_resources == ["cpu", "memory"]
    assert policy.team("credits-cq").covered_resources == ["example.com/credits", "cpu"]


def test_kueue_queue_without_resource_groups_covers_nothing_and_says_so() -> None:
    policy = kueue_fixture("kueue_resource_groups.yaml")
    assert policy.team("empty-cq").covered_resources == []
    assert any(n.startswith("ClusterQueue/empty-cq: no resourceGroups") for n in policy.notes)


def test_kueue_second_group_with_one_unlabelled_flavor_is_quota_only() -> None:
    """The node group is the one whose flavor selects nodes (spot), wherever it is listed."""
    policy = kueue_fixture("kueue_resource_groups.yaml")
    team = policy.team("credits-cq")
    assert [(g.resources, g.flavor) for g in team.quota_groups] == [
        (["example.com/credits"], "credit-pool")
    ]
    assert QuotaEntry(flavor="credit-pool", resources={"example.com/credits": 14}) in team.quota
    path = "ClusterQueue/credits-cq.spec.resourceGroups[0]"
    assert any(n.startswith(f"{path}: quota only") for n in policy.notes)


def _two_node_groups() -> list[dict[str, Any]]:
    docs = list(yaml.safe_load_all((FIXTURES / "kueue_resource_groups.yaml").read_text()))
    queue = next(d for d in docs if d["metadata"]["name"] == "credits-cq")
    queue["spec"]["resourceGroups"][0]["flavors"].append(
        {"name": "on-demand", "resources": [{"name": "example.com/credits", "nominalQuota": 1}]}
    )
    return docs


def test_kueue_second_group_that_selects_nodes_is_rejected_with_the_reason() -> None:
    with pytest.raises(PolicyError) as excinfo:
        import_kueue(_two_node_groups())
    # both groups now select nodes: the first is the node group, the second is rejected
    reason = problems_of(excinfo)["ClusterQueue/credits-cq.spec.resourceGroups[1]"]
    assert "one node flavor" in reason and "quota only" in reason


def test_kueue_resource_in_two_groups_is_rejected() -> None:
    docs = list(yaml.safe_load_all((FIXTURES / "kueue_resource_groups.yaml").read_text()))
    queue = next(d for d in docs if d["metadata"]["name"] == "credits-cq")
    queue["spec"]["resourceGroups"][1]["coveredResources"].append("example.com/credits")
    queue["spec"]["resourceGroups"][1]["flavors"][0]["resources"].append(
        {"name": "example.com/credits", "nominalQuota": 1}
    )
    with pytest.raises(PolicyError) as excinfo:
        import_kueue(docs)
    path = "ClusterQueue/credits-cq.spec.resourceGroups[1].coveredResources"
    assert "already covered" in problems_of(excinfo)[path]


def _credits_run(until: float) -> dict[str, Any]:
    from fleetshare.scenario.loader import load_scenario
    from fleetshare.scenario.report import to_json
    from fleetshare.scenario.runner import run_scenario

    scenario = load_scenario(Path(__file__).parent / "scenarios/kueue-credits-resource-group.yaml")
    scenario.until = until
    return to_json(run_scenario(scenario))


def test_kueue_credits_group_caps_the_total_and_the_reason_names_it() -> None:
    workloads = _credits_run(50)["workloads"]
    assert [workloads[j]["state"] for j in ("j1", "j2", "j3", "j4")] == [
        "admitted",
        "admitted",
        "admitted",
        "pending",
    ]
    assert "needs 4 example.com/credits on credit-pool" in workloads["j4"]["pending_reason"]


@pytest.mark.parametrize(
    ("queue", "team"),
    [
        ("research/default", "cpu-mem-cq"),
        ("sandbox/default", "empty-cq"),
        ("batch", "credits-cq"),
        ("credits-cq", "credits-cq"),
    ],
)
def test_workloads_reach_a_cluster_queue_through_its_local_queues(queue: str, team: str) -> None:
    assert kueue_fixture("kueue_resource_groups.yaml").team_for(queue) == team


@pytest.mark.parametrize(
    ("queue", "message"),
    [
        ("default", "queue 'default' is ambiguous"),
        ("research/batch", "unknown team or queue 'research/batch'"),
        ("nobody", "unknown team or queue 'nobody'"),
    ],
)
def test_unknown_or_ambiguous_queues_are_rejected_naming_them(queue: str, message: str) -> None:
    from fleetshare.scenario.loader import ScenarioError, load_scenario_data

    data = {
        "name": "q",
        "cluster": {"nodes": []},
        "kueue": (FIXTURES / "kueue_resource_groups.yaml").read_text(),
        "workloads": [{"name": "w", "queue": queue, "requests": {"cpu": 1}}],
    }
    with pytest.raises(ScenarioError, match=rf"workloads\[0\]\(w\)\.team: {message}"):
        load_scenario_data(data, Path("."))


@pytest.mark.parametrize(
    ("given", "borrow", "preempt"),
    [
        (None, "Borrow", "TryNextFlavor"),  # Kueue's defaults
        ({"whenCanBorrow": "TryNextFlavor"}, "TryNextFlavor", "TryNextFlavor"),
        ({"whenCanPreempt": "Preempt"}, "Borrow", "Preempt"),
        # v1beta2 calls Borrow and Preempt MayStopSearch
        (
            {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"},
            "Borrow",
            "Preempt",
        ),
    ],
)
def test_kueue_flavor_fungibility(given: dict[str, str] | None, borrow: str, preempt: str) -> None:
    cq: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"namespaceSelector": {}},
    }
    if given is not None:
        cq["spec"]["flavorFungibility"] = given
    fungibility = import_kueue([cq]).team("cq").flavor_fungibility
    assert (fungibility.when_can_borrow, fungibility.when_can_preempt) == (borrow, preempt)


def test_kueue_flavor_fungibility_refuses_an_unknown_value() -> None:
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"flavorFungibility": {"whenCanBorrow": "Sometimes"}},
    }
    with pytest.raises(PolicyError) as excinfo:
        import_kueue([cq])
    assert (
        "must be one of"
        in problems_of(excinfo)["ClusterQueue/cq.spec.flavorFungibility.whenCanBorrow"]
    )
