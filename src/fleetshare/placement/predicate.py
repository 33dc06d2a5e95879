"""May this pod run on this node? The one rule, used by governance, the provisioner and disruption.

A pod may run on a node when

1. every ``node_selector`` entry equals the node's label (``nodeSelector``);
2. some term of its required node affinity matches, every requirement of the term holding
   (``requiredDuringSchedulingIgnoredDuringExecution``: terms ORed, requirements ANDed;
   operators ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt`` as in Kubernetes);
3. it tolerates every ``NoSchedule`` and ``NoExecute`` taint of the node
   (``PreferNoSchedule`` is a preference, not a rule).

Instance-type names compare with or without SageMaker HyperPod's ``ml.`` prefix: a selector
``node.kubernetes.io/instance-type: ml.g6.xlarge`` matches a node labelled ``g6.xlarge`` and the
other way round, since both name the same hardware. Labels are the node's own plus the
well-known ones its caller derives (instance type, zone, capacity type, pool).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fleetshare.model.catalog import ec2_name
from fleetshare.model.node import INSTANCE_TYPE_LABEL, NodeSelectorRequirement, Taint, Toleration


def label_value(key: str, value: str) -> str:
    """A label value in the form labels are compared in (instance types without ``ml.``)."""
    return ec2_name(value) if key == INSTANCE_TYPE_LABEL else value


def selector_matches(labels: Mapping[str, str], node_selector: Mapping[str, str]) -> bool:
    """Every selector entry equals the node's label (instance types with or without ``ml.``)."""
    for key, value in node_selector.items():
        have = labels.get(key)
        if have is None or label_value(key, have) != label_value(key, value):
            return False
    return True


def requirement_holds(labels: Mapping[str, str], req: NodeSelectorRequirement) -> bool:
    """One ``matchExpressions`` entry against a node's labels."""
    have = labels.get(req.key)
    if req.operator == "Exists":
        return have is not None
    if req.operator == "DoesNotExist":
        return have is None
    if req.operator in ("In", "NotIn"):
        inside = have is not None and label_value(req.key, have) in {
            label_value(req.key, v) for v in req.values
        }
        return inside if req.operator == "In" else not inside
    # Gt / Lt: the label must be an integer (a node without it does not match)
    if have is None:
        return False
    try:
        number, bound = int(have), int(req.values[0])
    except (ValueError, IndexError):
        return False
    return number > bound if req.operator == "Gt" else number < bound


def affinity_matches(
    labels: Mapping[str, str], affinity: Iterable[tuple[NodeSelectorRequirement, ...]]
) -> bool:
    """Required node affinity: no terms, or some term whose requirements all hold."""
    terms = list(affinity)
    return not terms or any(all(requirement_holds(labels, r) for r in term) for term in terms)


def tolerates_all(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> bool:
    """Every NoSchedule / NoExecute taint has a matching toleration."""
    tolerations = tuple(tolerations)
    return all(
        any(t.tolerates(taint) for t in tolerations)
        for taint in taints
        if taint.effect != "PreferNoSchedule"
    )


def may_run_on(
    labels: Mapping[str, str],
    taints: Iterable[Taint],
    node_selector: Mapping[str, str],
    tolerations: Iterable[Toleration] = (),
    affinity: Iterable[tuple[NodeSelectorRequirement, ...]] = (),
) -> bool:
    """True when a pod with this selector, affinity and tolerations may run on a node with
    these labels and taints (see the module docstring). Resources are not considered."""
    return (
        selector_matches(labels, node_selector)
        and affinity_matches(labels, affinity)
        and tolerates_all(taints, tolerations)
    )
