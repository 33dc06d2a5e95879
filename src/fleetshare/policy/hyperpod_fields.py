"""The HyperPod importer's field tables: every member of the SageMaker API shapes it imports,
and what it does with each (:mod:`fleetshare.fields`). :mod:`fleetshare.policy.hyperpod`
decides by these tables; ``tests/test_hyperpod_contract.py`` walks botocore's service model
and fails on a member no rule covers.

Three kinds of document: a compute quota (the members of CreateComputeQuota, UpdateComputeQuota
and DescribeComputeQuota requests and responses, and of a ListComputeQuotas summary), a cluster
scheduler config (likewise), and a bundle (the ListComputeQuotas / ListClusterSchedulerConfigs
request and response members, and fleetshare's own ``ComputeQuotas``, ``SchedulerConfig`` and
``ClusterSchedulerConfig``). Bookkeeping is passed over without a note.
"""

from __future__ import annotations

from fleetshare.fields import FieldRule, FieldTable, Verdict

__all__ = ["BUNDLE", "COMPUTE_QUOTA", "FLEETSHARE_MEMBERS", "SCHEDULER_CONFIG", "TABLES"]

SOURCE = "HyperPod"
_IN_FORCE = (
    "a Describe or List entry whose creation failed or that was deleted (CreateFailed, "
    "CreateRollbackFailed, Deleted) is not on the cluster: noted and not imported; another "
    "failed status is imported as written, noted"
)
_RESPONSE_METADATA = "botocore's response metadata (request id, HTTP status)"
_LIST_FILTER = "a List request's filter or paging: the request holds no policy"


def _r(path: str, verdict: Verdict, note: str = "") -> FieldRule:
    return FieldRule(path, verdict, note)


def _common(owner: str) -> list[FieldRule]:
    """Members of both documents: bookkeeping, and the Status of a Describe or List entry."""
    return [
        _r("Name", "bookkeeping", f"the {owner}'s name"),
        _r("Description", "bookkeeping", f"the {owner}'s description"),
        _r("ClusterArn", "bookkeeping", "the cluster the policy is for"),
        _r("Tags", "bookkeeping", "tags"),
        _r("TargetVersion", "bookkeeping", "the version an Update replaces"),
        _r("FailureReason", "bookkeeping", "shown in the note on a failed Status"),
        _r("CreationTime", "bookkeeping", "when it was created"),
        _r("CreatedBy", "bookkeeping", "who created it"),
        _r("LastModifiedTime", "bookkeeping", "when it was last modified"),
        _r("LastModifiedBy", "bookkeeping", "who last modified it"),
        _r("ResponseMetadata", "bookkeeping", _RESPONSE_METADATA),
        _r("Status", "as", _IN_FORCE),
    ]


def _amounts(base: str, what: str) -> list[FieldRule]:
    """A ComputeQuotaResourceConfig list (quota resources, absolute borrow limits)."""
    item = f"{base}[]"
    return [
        _r(
            f"{item}.InstanceType",
            "as",
            "an instance type of the catalog (ml. names are the EC2 "
            "type's hardware; every ClusterInstanceType of the model is in it)",
        ),
        _r(
            f"{item}.Count",
            "as",
            f"{what} in whole instances: that many instances' allocatable; not with other amounts",
        ),
        _r(
            f"{item}.Accelerators",
            "as",
            "accelerators (GPUs or Neuron devices) of a type that "
            "has them; above one instance's, that many instances' worth",
        ),
        _r(f"{item}.VCpu", "as", "vCPUs"),
        _r(f"{item}.MemoryInGiB", "as", "memory in GiB"),
        _r(f"{item}.AcceleratorPartition", "as", "MIG slices"),
        _r(
            f"{item}.AcceleratorPartition.Type",
            "as",
            "a MIG profile the type's GPUs offer (mig-1g.5gb or 1g.5gb)",
        ),
        _r(f"{item}.AcceleratorPartition.Count", "as", "how many slices"),
    ]


_CONFIG = "ComputeQuotaConfig"
_SHARING = f"{_CONFIG}.ResourceSharingConfig"

COMPUTE_QUOTA = FieldTable(
    "ComputeQuota",
    SOURCE,
    [
        *_common("allocation"),
        _r("ComputeQuotaArn", "bookkeeping", "the allocation's ARN"),
        _r("ComputeQuotaId", "bookkeeping", "the allocation's id"),
        _r("ComputeQuotaVersion", "bookkeeping", "the allocation's version"),
        _r(
            "ActivationState",
            "as",
            "Disabled: the allocation is not in force, the team holds "
            "no quota (its capacity is unallocated) and its tasks wait (noted); Enabled when "
            "absent",
        ),
        _r("ComputeQuotaTarget", "as", "one team per compute quota"),
        _r(
            "ComputeQuotaTarget.TeamName",
            "as",
            "the team; its local queue is hyperpod-ns-<team>/hyperpod-ns-<team>-localqueue",
        ),
        _r("ComputeQuotaTarget.FairShareWeight", "as", "fair_share_weight, 0-100 (0 when absent)"),
        _r(_CONFIG, "as"),
        _r(
            f"{_CONFIG}.ComputeQuotaResources",
            "as",
            "the team's quota, one entry per item on "
            "flavor = InstanceType (at most 15); an item with only InstanceType holds none of "
            "it (noted)",
        ),
        *_amounts(f"{_CONFIG}.ComputeQuotaResources", "quota"),
        _r(_SHARING, "as"),
        _r(
            f"{_SHARING}.Strategy",
            "as",
            "sharing: Lend, DontLend or LendAndBorrow (LendAndBorrow when absent)",
        ),
        _r(
            f"{_SHARING}.BorrowLimit",
            "differs",
            "read as a percentage of idle compute, as the "
            "API model words it (50 when absent; above 100 it never binds, noted); "
            "borrow_limit_reading='quota' reads it as a percentage of the team's quota, as "
            "HyperPod's walkthrough behaves; no effect with a strategy that does not borrow "
            "(noted)",
        ),
        _r(
            f"{_SHARING}.AbsoluteBorrowLimits",
            "as",
            "absolute borrow limits per (resource, "
            "instance type), applied with BorrowLimit: the tighter wins",
        ),
        *_amounts(f"{_SHARING}.AbsoluteBorrowLimits", "a limit"),
        _r(
            f"{_CONFIG}.PreemptTeamTasks",
            "as",
            "preempt_team_tasks: Never or LowerPriority (LowerPriority when absent)",
        ),
    ],
    title="Compute quota (Create/Update/DescribeComputeQuota, a ListComputeQuotas summary)",
    bookkeeping_noted=False,
)

SCHEDULER_CONFIG = FieldTable(
    "ClusterSchedulerConfig",
    SOURCE,
    [
        *_common("cluster policy"),
        _r("ClusterSchedulerConfigArn", "bookkeeping", "the cluster policy's ARN"),
        _r("ClusterSchedulerConfigId", "bookkeeping", "the cluster policy's id"),
        _r("ClusterSchedulerConfigVersion", "bookkeeping", "the cluster policy's version"),
        _r("StatusDetails", "bookkeeping", "the status of each of its components"),
        _r(
            "SchedulerConfig",
            "as",
            "the cluster policy (or the document itself when it holds "
            "only these members); one in force at most, HyperPod's defaults without one",
        ),
        _r("SchedulerConfig.PriorityClasses", "as", "priority classes, at most 10, names unique"),
        _r("SchedulerConfig.PriorityClasses[].Name", "as"),
        _r("SchedulerConfig.PriorityClasses[].Weight", "as", "0-100"),
        _r("SchedulerConfig.FairShare", "as", "fair_share (Enabled when absent)"),
        _r(
            "SchedulerConfig.IdleResourceSharing",
            "as",
            "idle_resource_sharing (Disabled when "
            "absent); every instance type of the cluster is governed either way, and capacity "
            "no allocation names is unallocated, usable only by borrowing",
        ),
    ],
    title="Cluster scheduler config (Create/Update/DescribeClusterSchedulerConfig, a "
    "ListClusterSchedulerConfigs summary)",
    bookkeeping_noted=False,
)

FLEETSHARE_MEMBERS = frozenset({"ComputeQuotas", "SchedulerConfig", "ClusterSchedulerConfig"})
"""The bundle's members that are fleetshare's, not the API model's."""

BUNDLE = FieldTable(
    "Bundle",
    SOURCE,
    [
        _r(
            "ComputeQuotaSummaries",
            "as",
            "ListComputeQuotas' response: each summary is a compute quota",
        ),
        _r(
            "ComputeQuotas",
            "differs",
            "fleetshare's own bundle, not a SageMaker shape: a list of compute quota documents",
        ),
        _r(
            "SchedulerConfig",
            "differs",
            "fleetshare's own bundle, not a SageMaker shape: a "
            "cluster scheduler config document, or its SchedulerConfig",
        ),
        _r(
            "ClusterSchedulerConfig",
            "differs",
            "fleetshare's own bundle, not a SageMaker shape: a cluster scheduler config document",
        ),
        _r(
            "ClusterSchedulerConfigSummaries",
            "refused",
            "a ListClusterSchedulerConfigs "
            "summary holds no SchedulerConfig, the policy (give the "
            "DescribeClusterSchedulerConfig response)",
        ),
        _r("NextToken", "bookkeeping", "paging"),
        _r("ResponseMetadata", "bookkeeping", _RESPONSE_METADATA),
        *(
            _r(name, "refused", _LIST_FILTER)
            for name in (
                "CreatedAfter",
                "CreatedBefore",
                "NameContains",
                "Status",
                "ClusterArn",
                "SortBy",
                "SortOrder",
                "MaxResults",
            )
        ),
    ],
    title="Bundle (ListComputeQuotas, ListClusterSchedulerConfigs, fleetshare's bundle)",
    bookkeeping_noted=False,
)

TABLES: tuple[FieldTable, ...] = (COMPUTE_QUOTA, SCHEDULER_CONFIG, BUNDLE)
"""Every table of the HyperPod importer, in the order docs/fields.md lists them."""
