"""The Kueue labels and annotations the manifest reader knows, and what it does with each
(:mod:`fleetshare.fields`): on the object (``label``, ``annotation``) and on a pod template
(``template label``, ``template annotation``). :mod:`fleetshare.manifests.parse` and
:mod:`fleetshare.manifests.pods` decide by :data:`KEYS`; a Kueue key it has no rule for is
noted as not modelled.
"""

from __future__ import annotations

from fleetshare.fields import FieldRule, FieldTable, Verdict

__all__ = ["KEYS", "KUEUE_PREFIXES", "NOT_MODELLED", "is_kueue_key", "key_note", "key_rule"]

KUEUE_PREFIXES = ("kueue.x-k8s.io/", "provreq.kueue.x-k8s.io/")
"""The prefixes of the keys Kueue reads or writes."""
_BY_KUEUE = "set by Kueue on what it manages"
_GROUP = "on a Pod, with kueue.x-k8s.io/pod-group-name (noted on other kinds and without it)"


def _r(path: str, verdict: Verdict, note: str = "") -> FieldRule:
    return FieldRule(path, verdict, note)


KEYS = FieldTable(
    "workload",
    "Kueue",
    [
        _r(
            "label kueue.x-k8s.io/queue-name",
            "as",
            "the LocalQueue in the object's namespace: "
            "the workload's queue is namespace/name (or fleetshare.io/team, not both)",
        ),
        _r(
            "label kueue.x-k8s.io/priority-class",
            "as",
            "the WorkloadPriorityClass, before a "
            "pod priority class (Kueue's order); fleetshare.io/priority-class is a synonym",
        ),
        _r(
            "label kueue.x-k8s.io/pod-group-name",
            "as",
            "pods sharing it in a namespace form one workload (on a Pod; noted on other kinds)",
        ),
        _r(
            "label kueue.x-k8s.io/prebuilt-workload-name",
            "refused",
            "a Workload object made beforehand is not read: the object's own pods are queued",
        ),
        _r(
            "label kueue.x-k8s.io/pod-group-role",
            "refused",
            "roles within a pod group are not modelled",
        ),
        _r("label kueue.x-k8s.io/job-uid", "bookkeeping", _BY_KUEUE),
        _r("label kueue.x-k8s.io/managed", "bookkeeping", _BY_KUEUE),
        _r("label kueue.x-k8s.io/tas", "bookkeeping", _BY_KUEUE),
        _r("label kueue.x-k8s.io/pod-group-pod-index", "bookkeeping", _BY_KUEUE),
        _r(
            "annotation kueue.x-k8s.io/job-min-parallelism",
            "as",
            "partial admission: the "
            "Job's pod set may run with as few pods, more than 0 and fewer than it has (a "
            "batch/v1 Job; noted on other kinds)",
        ),
        _r(
            "annotation kueue.x-k8s.io/job-completions-equal-parallelism",
            "refused",
            "completions following a partial admission are not modelled: a Job runs for its "
            "duration",
        ),
        _r(
            "annotation kueue.x-k8s.io/pod-group-total-count",
            "as",
            f"the group's pods, {_GROUP}; required there",
        ),
        _r(
            "annotation kueue.x-k8s.io/pod-group-fast-admission",
            "as",
            "'true': the group is "
            f"admitted once its first pod exists, counting its total count of pods, {_GROUP}",
        ),
        _r(
            "annotation kueue.x-k8s.io/pod-group-serving",
            "differs",
            "accepted, "
            f"{_GROUP}: a group runs for its duration, so whether its pods are replaced "
            "(serving) or finish changes nothing",
        ),
        _r(
            "annotation kueue.x-k8s.io/retriable-in-group",
            "refused",
            "pods failing within a group are not simulated",
        ),
        _r(
            "annotation kueue.x-k8s.io/queue-name",
            "refused",
            "Kueue reads the queue from the "
            "label (the annotation is deprecated): an error naming the label",
        ),
        _r(
            "annotation kueue.x-k8s.io/priority-class",
            "refused",
            "Kueue reads the class from the label: an error naming the label",
        ),
        _r(
            "annotation kueue.x-k8s.io/node-avoidance-policy",
            "refused",
            "node avoidance is not modelled",
        ),
        _r(
            "annotation provreq.kueue.x-k8s.io/*",
            "refused",
            "provisioning request parameters: "
            "provisioning requests are not implemented in governance",
        ),
        _r("annotation kueue.x-k8s.io/parent-workload", "bookkeeping", _BY_KUEUE),
        _r("annotation kueue.x-k8s.io/workload", "bookkeeping", _BY_KUEUE),
        _r("annotation kueue.x-k8s.io/stopping", "bookkeeping", _BY_KUEUE),
        _r("annotation kueue.x-k8s.io/original-pod-sets-info", "bookkeeping", _BY_KUEUE),
        _r("annotation kueue.x-k8s.io/original-node-selectors", "bookkeeping", _BY_KUEUE),
        _r("annotation kueue.x-k8s.io/role-hash", "bookkeeping", _BY_KUEUE),
        _r("annotation kueue.x-k8s.io/pod-suspending-parent", "bookkeeping", _BY_KUEUE),
        _r("annotation kueue.x-k8s.io/is-group-workload", "bookkeeping", _BY_KUEUE),
        _r("annotation kueue.x-k8s.io/pod-group-sets", "bookkeeping", _BY_KUEUE),
        _r("annotation kueue.x-k8s.io/pod-group-pod-index-label", "bookkeeping", _BY_KUEUE),
        _r(
            "template annotation kueue.x-k8s.io/podset-required-topology",
            "as",
            "required_topology: the node label (a topology level) all the pod set's pods "
            "share; not with podset-preferred-topology",
        ),
        _r(
            "template annotation kueue.x-k8s.io/podset-preferred-topology",
            "as",
            "preferred_topology: the level the pod set should share, else placed as any",
        ),
        _r(
            "template annotation kueue.x-k8s.io/podset-unconstrained-topology",
            "refused",
            "topology-aware admission without a level is not modelled",
        ),
        _r(
            "template annotation kueue.x-k8s.io/podset-slice-required-topology",
            "refused",
            "topology slices of a pod set are not modelled",
        ),
        _r(
            "template annotation kueue.x-k8s.io/podset-slice-size",
            "refused",
            "topology slices of a pod set are not modelled",
        ),
        _r(
            "template annotation kueue.x-k8s.io/podset-group-name",
            "refused",
            "pod set groups (a unit of flavor assignment and topology fitting) are not modelled",
        ),
        _r("template annotation kueue.x-k8s.io/workload", "bookkeeping", _BY_KUEUE),
        _r("template label kueue.x-k8s.io/tas", "bookkeeping", _BY_KUEUE),
    ],
    title="Workload labels and annotations (Kubernetes manifests)",
    bookkeeping_noted=False,
    nested=False,
)

NOT_MODELLED = "not modelled"
"""The note on a Kueue key no rule names."""


def is_kueue_key(key: str) -> bool:
    """A key Kueue reads or writes (``kueue.x-k8s.io/``, ``provreq.kueue.x-k8s.io/``)."""
    return key.startswith(KUEUE_PREFIXES)


def key_rule(place: str, key: str) -> FieldRule | None:
    """The rule of ``key`` at ``place`` (``label``, ``annotation``, ``template label``, ...)."""
    return KEYS.rule(f"{place} {key}")


def key_note(rule: FieldRule | None) -> str | None:
    """The note on a Kueue key that is not read: its rule's reason, ``not modelled`` without
    a rule, None for bookkeeping passed over in silence."""
    if rule is None:
        return NOT_MODELLED
    if rule.verdict == "refused" or (rule.verdict == "bookkeeping" and KEYS.bookkeeping_noted):
        return rule.note
    return None
