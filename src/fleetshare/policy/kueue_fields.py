"""The Kueue importer's field tables: every field of the kinds it reads, and what it does with
each (:mod:`fleetshare.fields`). :mod:`fleetshare.policy.kueue` decides by these tables; the
field list they must cover is ``tests/fixtures/contracts/kueue-fields.txt``, written from
Kueue's API types.
"""

from __future__ import annotations

from fleetshare.fields import FieldRule, FieldTable, Verdict

__all__ = ["CONFIGURATION", "KINDS", "OBJECTS", "TABLES"]

SOURCE = "Kueue"
_SETTING = "a Kueue controller setting with no fleetshare equivalent"
_CHECKS = (
    "admission checks (such as provisioning requests) are not implemented in governance: "
    "work is admitted on quota and node room alone"
)


def _r(path: str, verdict: Verdict, note: str = "") -> FieldRule:
    return FieldRule(path, verdict, note)


def _object(kind: str, namespaced: bool = False, status: bool = True) -> list[FieldRule]:
    """The fields every Kueue object has (and ``spec``)."""
    namespace = (
        _r("metadata.namespace", "as", "the LocalQueue's namespace ('default' when absent)")
        if namespaced
        else _r("metadata.namespace", "refused", "a cluster-scoped object has no namespace")
    )
    rules = [
        _r(
            "apiVersion",
            "differs",
            "any version of the group is read, with v1beta1's and "
            "v1beta2's field names alike; another group is not a Kueue object (noted)",
        ),
        _r("kind", "as"),
        _r("metadata", "as"),
        _r("metadata.name", "as", f"the {kind}'s name"),
        namespace,
        _r("metadata.*", "bookkeeping", "metadata, not policy"),
    ]
    if status:
        rules.append(_r("status", "bookkeeping", "observed state, not policy"))
    return rules


def _resource_groups(groups: FieldRule) -> list[FieldRule]:
    """``spec.resourceGroups`` (the same shape in ClusterQueue and Cohort), under ``groups``."""
    g = "spec.resourceGroups"
    r = f"{g}[].flavors[].resources"
    return [
        groups,
        _r(
            f"{g}[].coveredResources",
            "as",
            "the resources the group's flavors give quota for; a resource in two groups is refused",
        ),
        _r(f"{g}[].flavors", "as", "in order (the order flavors are tried in)"),
        _r(f"{g}[].flavors[].name", "as", "a declared ResourceFlavor, once per queue"),
        _r(r, "as"),
        _r(f"{r}[].name", "as", "one of the group's coveredResources"),
        _r(f"{r}[].nominalQuota", "as", "a Kubernetes quantity"),
        _r(
            f"{r}[].borrowingLimit",
            "as",
            "an absolute borrow limit on (resource, flavor); "
            "only with a cohort (a parent, for a Cohort)",
        ),
        _r(
            f"{r}[].lendingLimit",
            "as",
            "an absolute lending limit on (resource, flavor), at "
            "most nominalQuota; only with a cohort (a parent, for a Cohort)",
        ),
    ]


def _fair_sharing(owner: str) -> list[FieldRule]:
    return [
        _r("spec.fairSharing", "as"),
        _r(
            "spec.fairSharing.weight",
            "as",
            f"the {owner}'s fair_share_weight (a quantity; 1 when absent)",
        ),
    ]


CLUSTER_QUEUE = FieldTable(
    "ClusterQueue",
    SOURCE,
    [
        *_object("ClusterQueue"),
        _r("spec", "as", "a team"),
        _r("spec.cohort", "as", "the team's group (v1beta1)"),
        _r(
            "spec.cohortName",
            "as",
            "the team's group (v1beta2); without a cohort the queue "
            "neither lends nor borrows (DontLend)",
        ),
        *_resource_groups(
            _r(
                "spec.resourceGroups",
                "differs",
                "the team's quota, one entry per flavor; "
                "fleetshare gives a pod set one node flavor: the first group with a flavor that "
                "has nodeLabels is the node group, any other must be quota only (one flavor "
                "without nodeLabels, like credits), else it is refused; pod sets one flavor takes "
                "all share it (docs/architecture.md, 'Flavor per pod set')",
            )
        ),
        _r("spec.queueingStrategy", "as", "queueing_strategy (BestEffortFIFO when absent)"),
        _r(
            "spec.namespaceSelector",
            "as",
            "namespace_selector: absent admits no namespace, {} "
            "every namespace, matched against the scenario's cluster.namespaces",
        ),
        _r("spec.namespaceSelector.matchLabels", "as"),
        _r("spec.namespaceSelector.matchExpressions", "as"),
        _r("spec.namespaceSelector.matchExpressions[].key", "as"),
        _r(
            "spec.namespaceSelector.matchExpressions[].operator",
            "as",
            "In, NotIn, Exists or DoesNotExist",
        ),
        _r("spec.namespaceSelector.matchExpressions[].values", "as"),
        _r(
            "spec.flavorFungibility",
            "differs",
            "flavor_fungibility, without Kueue's memory of "
            "the last flavor tried (docs/architecture.md, 'Flavor per pod set')",
        ),
        _r(
            "spec.flavorFungibility.whenCanBorrow",
            "as",
            "Borrow (v1beta2: MayStopSearch) or TryNextFlavor",
        ),
        _r(
            "spec.flavorFungibility.whenCanPreempt",
            "as",
            "Preempt (v1beta2: MayStopSearch) or TryNextFlavor",
        ),
        _r(
            "spec.flavorFungibility.preference",
            "refused",
            "the feature-gated choice between "
            "borrowing and preemption when every flavor needs one is not modelled (fleetshare "
            "tries options within quota, then borrowing, then preemption)",
        ),
        _r("spec.preemption", "as"),
        _r("spec.preemption.withinClusterQueue", "as", "preempt_team_tasks (Never when absent)"),
        _r("spec.preemption.reclaimWithinCohort", "as", "reclaim (Never when absent)"),
        _r(
            "spec.preemption.borrowWithinCohort",
            "as",
            "borrow_within_cohort; with "
            "reclaimWithinCohort Never it is refused, as Kueue's webhook does; no effect with "
            "fair sharing on (noted)",
        ),
        _r("spec.preemption.borrowWithinCohort.policy", "as", "Never or LowerPriority"),
        _r(
            "spec.preemption.borrowWithinCohort.maxPriorityThreshold",
            "differs",
            "a Kueue priority, turned into the weight of the highest class at or below it when "
            "priorities are rescaled into 0-100",
        ),
        _r("spec.admissionChecks", "refused", _CHECKS),
        _r("spec.admissionChecksStrategy", "refused", _CHECKS),
        _r("spec.stopPolicy", "as", "stop_policy: Hold, HoldAndDrain (None when absent)"),
        *_fair_sharing("team"),
        _r(
            "spec.admissionScope",
            "as",
            "admission_fair_sharing (with the Configuration's "
            "admissionFairSharing; noted as having no effect without it)",
        ),
        _r(
            "spec.admissionScope.admissionMode",
            "as",
            "UsageBasedAdmissionFairSharing or NoAdmissionFairSharing",
        ),
        _r(
            "spec.concurrentAdmissionPolicy",
            "refused",
            "workloads pursuing several flavors at "
            "once and migrating to a preferred one are not modelled",
        ),
    ],
)

COHORT = FieldTable(
    "Cohort",
    SOURCE,
    [
        *_object("Cohort"),
        _r(
            "spec",
            "as",
            "a group; a cohort named but not declared is a group with no quota, "
            "and a root cohort neither lends to nor borrows from other trees",
        ),
        _r("spec.parent", "as", "the group's parent (v1alpha1, v1beta1)"),
        _r("spec.parentName", "as", "the group's parent (v1beta2)"),
        *_resource_groups(
            _r(
                "spec.resourceGroups",
                "as",
                "the group's own quota, shared by its members and lendable to its parent",
            )
        ),
        *_fair_sharing("group"),
    ],
)

RESOURCE_FLAVOR = FieldTable(
    "ResourceFlavor",
    SOURCE,
    [
        *_object("ResourceFlavor", status=False),
        _r("spec", "as", "a flavor"),
        _r(
            "spec.nodeLabels",
            "differs",
            "node_labels (string values): the flavor's nodes; a flavor admits a pod set "
            "by its Ready nodes, not by matching nodeLabels to the pod's selector",
        ),
        _r(
            "spec.nodeTaints",
            "refused",
            "flavor taints are not carried over: which work may "
            "use a flavor follows the taints its nodes carry",
        ),
        _r(
            "spec.tolerations",
            "refused",
            "flavor tolerations (added to admitted pods) are not supported",
        ),
        _r(
            "spec.topologyName",
            "as",
            "a declared Topology whose levels the flavor's pod sets may ask for",
        ),
        _r(
            "spec.resourceWeights", "refused", "per-resource fair-sharing weights are not supported"
        ),
    ],
)

LOCAL_QUEUE = FieldTable(
    "LocalQueue",
    SOURCE,
    [
        *_object("LocalQueue", namespaced=True),
        _r(
            "spec",
            "as",
            "'namespace/name' among its ClusterQueue's local_queues; workloads "
            "naming it reach that team",
        ),
        _r("spec.clusterQueue", "as", "required; one not declared is noted and the queue ignored"),
        _r("spec.stopPolicy", "as", "local_queue_stop_policies"),
        _r("spec.fairSharing", "as"),
        _r("spec.fairSharing.weight", "as", "local_queue_weights (admission fair sharing)"),
        _r("spec.wallTimePolicy", "refused", "wall-time limits are not supported"),
    ],
)

WORKLOAD_PRIORITY_CLASS = FieldTable(
    "WorkloadPriorityClass",
    SOURCE,
    [
        *_object("WorkloadPriorityClass", status=False),
        _r(
            "value",
            "differs",
            "a priority class's weight; values outside 0-100 are rescaled "
            "into it keeping their order (noted), at most 10 classes",
        ),
        _r("description", "bookkeeping", "a description, not policy"),
    ],
)

TOPOLOGY = FieldTable(
    "Topology",
    SOURCE,
    [
        *_object("Topology", status=False),
        _r("spec", "as"),
        _r(
            "spec.levels",
            "as",
            "the topology levels its flavors' pod sets may ask for, widest first",
        ),
        _r("spec.levels[].nodeLabel", "as", "a node label key"),
    ],
)

OBJECTS: dict[str, FieldTable] = {
    t.name: t
    for t in (
        TOPOLOGY,
        RESOURCE_FLAVOR,
        COHORT,
        CLUSTER_QUEUE,
        LOCAL_QUEUE,
        WORKLOAD_PRIORITY_CLASS,
    )
}
"""The kinds imported as objects, in the order the importer reads them."""

CONFIGURATION = FieldTable(
    "Configuration",
    SOURCE,
    [
        _r("apiVersion", "as", "config.kueue.x-k8s.io"),
        _r("kind", "as"),
        _r("metadata", "as"),
        _r("metadata.name", "as"),
        _r("metadata.*", "bookkeeping", "metadata, not policy"),
        _r("fairSharing", "as", "fair_share on while the section is there"),
        _r("fairSharing.enable", "as", "v1beta1's switch (v1beta2 dropped it)"),
        _r(
            "fairSharing.preemptionStrategies",
            "refused",
            "fleetshare's fair-sharing preemption rules are fixed",
        ),
        _r("admissionFairSharing", "as", "admission_fair_sharing"),
        _r(
            "admissionFairSharing.usageHalfLifeTime",
            "as",
            "a Go duration; absent, usage is forgotten at once (noted)",
        ),
        _r("admissionFairSharing.usageSamplingInterval", "as", "a Go duration"),
        _r("admissionFairSharing.resourceWeights", "as"),
        _r("resources", "as"),
        _r("resources.excludeResourcePrefixes", "as", "excluded_resource_prefixes"),
        _r(
            "resources.transformations",
            "as",
            "resource_transformations, applied to every workload's requests",
        ),
        _r("resources.transformations[].input", "as"),
        _r("resources.transformations[].strategy", "as", "Retain (default) or Replace"),
        _r("resources.transformations[].outputs", "as"),
        _r("resources.transformations[].multiplyBy", "as"),
        _r(
            "resources.deviceClassMappings",
            "refused",
            "dynamic resource allocation (device classes) is not modelled",
        ),
        _r("namespace", "refused", _SETTING),
        _r(
            "manageJobsWithoutQueueName",
            "refused",
            f"{_SETTING}: a workload reaches a team "
            "by its queue label or the scenario's default queue",
        ),
        _r("managedJobsNamespaceSelector", "refused", _SETTING),
        _r("internalCertManagement", "refused", _SETTING),
        _r(
            "waitForPodsReady",
            "refused",
            f"{_SETTING}: pod start-up is not simulated, so there is no readiness timeout",
        ),
        _r("clientConnection", "refused", _SETTING),
        _r("integrations", "refused", f"{_SETTING}: the job kinds read are those of docs/kinds.md"),
        _r("queueVisibility", "refused", _SETTING),
        _r("multiKueue", "refused", "MultiKueue (dispatching to other clusters) is not supported"),
        _r("featureGates", "refused", _SETTING),
        _r("objectRetentionPolicies", "refused", _SETTING),
        _r("webhook", "refused", _SETTING),
        _r("leaderElection", "refused", _SETTING),
        _r("metrics", "refused", _SETTING),
        _r("health", "refused", _SETTING),
        _r("pprofBindAddress", "refused", _SETTING),
        _r("controller", "refused", _SETTING),
        _r("tls", "refused", _SETTING),
    ],
    title="Configuration (config.kueue.x-k8s.io)",
)

_KIND_NOTES = {
    "Topology": "topology levels its flavors name",
    "ResourceFlavor": "a flavor",
    "Cohort": "a group of teams (nested by parent)",
    "ClusterQueue": "a team",
    "LocalQueue": "a queue of its ClusterQueue's team",
    "WorkloadPriorityClass": "a priority class",
}

KINDS = FieldTable(
    "kinds",
    SOURCE,
    [
        *(_r(name, "as", f"{_KIND_NOTES[name]}; fields below") for name in OBJECTS),
        _r(
            "Configuration",
            "as",
            "cluster-wide settings (config.kueue.x-k8s.io; one at most); fields below",
        ),
        _r(
            "AdmissionCheck",
            "refused",
            "admission checks are not implemented in governance "
            "(work is admitted on quota and node room alone)",
        ),
        _r(
            "ProvisioningRequestConfig",
            "refused",
            "provisioning requests are not implemented "
            "in governance (fleetshare's own autoscaler provisions for admitted work)",
        ),
        _r(
            "MultiKueueConfig",
            "refused",
            "MultiKueue (dispatching to other clusters) is not supported",
        ),
        _r(
            "MultiKueueCluster",
            "refused",
            "MultiKueue (dispatching to other clusters) is not supported",
        ),
        _r(
            "Workload",
            "refused",
            "Kueue Workload objects are not read as policy (give workloads in the scenario)",
        ),
    ],
    title="Kinds",
)

TABLES: tuple[FieldTable, ...] = (KINDS, *OBJECTS.values(), CONFIGURATION)
"""Every table of the Kueue importer, in the order docs/fields.md lists them."""
