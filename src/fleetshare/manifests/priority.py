"""A workload's priority, as Kueue resolves it: pure.

Kueue takes a workload's priority from its WorkloadPriorityClass label
(``kueue.x-k8s.io/priority-class``: the policy's priority classes here) and, without one, from
its pod priority class: the ``priorityClassName`` of its pod templates (a Kubeflow job's
``schedulingPolicy.priorityClass`` first), the ``value`` of that Kubernetes PriorityClass
(``scheduling.k8s.io/v1``). Without either, the workload gets the cluster's default: the policy's
default class here, else the PriorityClass marked ``globalDefault`` (the lowest value if
several are), else 0. A pod priority class no PriorityClass defines resolves, as fleetshare
always read it, to the policy class of that name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

PRIORITY_CLASS_KIND = "PriorityClass"
PRIORITY_CLASS_API = "scheduling.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class PodPriorityClass:
    """A Kubernetes PriorityClass: its name, value and whether it is the global default."""

    name: str
    value: int
    global_default: bool = False


def pod_priority_class(obj: Mapping[str, Any]) -> PodPriorityClass | None:
    """A PriorityClass object as served (None when it is not one)."""
    name = (obj.get("metadata") or {}).get("name")
    value = obj.get("value")
    if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, int):
        return None
    return PodPriorityClass(name, value, obj.get("globalDefault") is True)


def resolve_priority(
    source: Literal["label", "pod", "none"],
    name: str | None,
    policy_class: Callable[[str], int],
    policy_default: int | None,
    pod_classes: Mapping[str, PodPriorityClass],
) -> int:
    """The priority of a workload whose priority class ``name`` came from ``source`` (see the
    module docstring). ``policy_class`` gives a policy class's weight (KeyError naming the
    known ones otherwise), ``policy_default`` the policy's default class's (None: none)."""
    if source == "label" and name is not None:
        return policy_class(name)
    if source == "pod" and name is not None:
        found = pod_classes.get(name)
        if found is not None:
            return found.value
        try:
            return policy_class(name)
        except KeyError as exc:
            raise KeyError(
                f"no PriorityClass {name!r} (scheduling.k8s.io/v1) and {exc.args[0]}"
            ) from None
    if policy_default is not None:
        return policy_default
    defaults = [c.value for c in pod_classes.values() if c.global_default]
    return min(defaults) if defaults else 0
