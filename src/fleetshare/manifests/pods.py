"""A pod spec's effective request and placement constraints, as Kubernetes computes them.

The effective request of a pod, per resource (Kubernetes' ``PodRequests``, 1.29+):

- each container's request, or its limit when it gives a limit but no request for that
  resource (the API server defaults requests from limits);
- app containers and sidecars (init containers with ``restartPolicy: Always``) run together:
  their requests add up;
- a plain init container runs alone, beside the sidecars started before it: it needs its own
  request plus theirs;
- the pod needs the larger of the two, then ``spec.overhead`` on top;
- pod-level requests (``spec.resources``, Kubernetes 1.32+), where given, replace the sum for
  their resources (cpu, memory, hugepages).

Kubernetes' own validation of what is read is applied: a request above its limit, and an
extended resource (``nvidia.com/gpu``) or hugepages without a limit or with a request different
from it, are refused, as the API server refuses them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from fleetshare.fields import READ
from fleetshare.manifests.kueue_keys import is_kueue_key, key_note, key_rule
from fleetshare.manifests.values import Fields, join
from fleetshare.model.node import NodeSelectorRequirement, Toleration
from fleetshare.model.resources import Resources

Affinity = tuple[tuple[NodeSelectorRequirement, ...], ...]

_POD_LEVEL = ("cpu", "memory")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")

_NOTED_POD_FIELDS = {
    "topologySpreadConstraints": "topology spread is not modelled; pods are placed without it",
    "resourceClaims": "dynamic resource allocation (DRA) claims are not counted",
    "nodeName": "a pod bound to a named node is placed like any other pod",
}
"""Pod spec fields that matter to scheduling but are not modelled: each gives a note."""


@dataclass(frozen=True, slots=True)
class PodShape:
    """What a pod template asks of the cluster."""

    requests: Resources
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    affinity: Affinity
    priority_class: str | None
    notes: tuple[str, ...] = ()
    required_topology: str | None = None
    """Kueue's ``kueue.x-k8s.io/podset-required-topology`` template annotation."""
    preferred_topology: str | None = None
    """Kueue's ``kueue.x-k8s.io/podset-preferred-topology`` template annotation."""


def effective_requests(
    containers: Iterable[Mapping[str, int]],
    init_containers: Iterable[tuple[Mapping[str, int], bool]],
    overhead: Mapping[str, int] | None = None,
    pod_level: Mapping[str, int] | None = None,
) -> Resources:
    """The pod's request per resource (milli-units, zeros dropped), from each container's
    requests (limits already folded in), init containers as ``(requests, is_sidecar)`` in
    order, the pod overhead and pod-level requests (see the module docstring)."""
    total: dict[str, int] = {}
    for requests in containers:
        _add(total, requests)
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for requests, sidecar in init_containers:
        if sidecar:
            _add(total, requests)
            _add(sidecars, requests)
            need = dict(sidecars)
        else:
            need = dict(requests)
            _add(need, sidecars)
        for name, amount in need.items():
            init_peak[name] = max(init_peak.get(name, 0), amount)
    for name, amount in init_peak.items():
        total[name] = max(total.get(name, 0), amount)
    for name, amount in (pod_level or {}).items():
        total[name] = amount
    _add(total, overhead or {})
    return {name: amount for name, amount in total.items() if amount}


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def _non_overcommitable(resource: str) -> bool:
    """Extended resources (a domain outside kubernetes.io) and hugepages: Kubernetes requires a
    limit for them and a request equal to it."""
    if resource.startswith("hugepages-"):
        return True
    if "/" not in resource:
        return False
    domain = resource.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def resource_requirements(fields: Fields, value: Any, path: str) -> tuple[dict[str, int], str]:
    """A container's ``resources`` as requests (limits standing in for missing requests), and
    a note when it makes resource claims; checked as the API server checks them."""
    resources = fields.mapping(value, path)
    requests = fields.quantities(resources.get("requests"), join(path, "requests"))
    limits = fields.quantities(resources.get("limits"), join(path, "limits"))
    for name, request in requests.items():
        limit = limits.get(name)
        where = join(join(path, "requests"), name)
        if limit is not None and request > limit:
            raise fields.error(where, "must be less than or equal to its limit")
        if _non_overcommitable(name) and request and limit is None:
            raise fields.error(
                join(join(path, "limits"), name),
                "is required: Kubernetes needs a limit for extended resources and hugepages "
                "(give the same amount as the request)",
            )
        if _non_overcommitable(name) and limit is not None and request != limit:
            raise fields.error(where, "must equal its limit (extended resources and hugepages)")
    note = ""
    if fields.items(resources.get("claims"), join(path, "claims")):
        note = f"{join(path, 'claims')}: resource claims (DRA) are not counted"
    return {**limits, **requests}, note


def read_pod_spec(fields: Fields, value: Any, path: str) -> PodShape:
    """The effective request and the placement constraints of the pod spec at ``path``."""
    spec = fields.mapping(value, path, required=True)
    notes: list[str] = []
    containers = fields.items(spec.get("containers"), join(path, "containers"), required=True)
    if not containers:
        raise fields.error(join(path, "containers"), "must list at least one container")
    app: list[dict[str, int]] = []
    for i, item in enumerate(containers):
        where = join(join(path, "containers"), i)
        container = fields.mapping(item, where, required=True)
        requests, note = resource_requirements(
            fields, container.get("resources"), join(where, "resources")
        )
        app.append(requests)
        notes.extend([note] if note else [])
    init: list[tuple[dict[str, int], bool]] = []
    for i, item in enumerate(
        fields.items(spec.get("initContainers"), join(path, "initContainers"))
    ):
        where = join(join(path, "initContainers"), i)
        container = fields.mapping(item, where, required=True)
        requests, note = resource_requirements(
            fields, container.get("resources"), join(where, "resources")
        )
        notes.extend([note] if note else [])
        policy = fields.text(container.get("restartPolicy"), join(where, "restartPolicy"))
        if policy not in (None, "Always"):
            raise fields.error(
                join(where, "restartPolicy"),
                f"init containers take only Always (a sidecar), got {policy!r}",
            )
        init.append((requests, policy == "Always"))
    overhead = fields.quantities(spec.get("overhead"), join(path, "overhead"))
    if spec.get("runtimeClassName") and not overhead:
        notes.append(
            f"{join(path, 'runtimeClassName')}: the RuntimeClass's pod overhead is not known "
            "here; give spec.overhead to count it"
        )
    pod_level = _pod_level(fields, spec.get("resources"), join(path, "resources"))
    for field_name, why in _NOTED_POD_FIELDS.items():
        if spec.get(field_name):
            notes.append(f"{join(path, field_name)}: {why}")
    return PodShape(
        requests=effective_requests(app, init, overhead, pod_level),
        node_selector=fields.strings(spec.get("nodeSelector"), join(path, "nodeSelector")),
        tolerations=_tolerations(fields, spec.get("tolerations"), join(path, "tolerations")),
        affinity=_affinity(fields, spec.get("affinity"), join(path, "affinity"), notes),
        priority_class=fields.text(spec.get("priorityClassName"), join(path, "priorityClassName")),
        notes=tuple(notes),
    )


TOPOLOGY_ANNOTATIONS = {
    "kueue.x-k8s.io/podset-required-topology": "required",
    "kueue.x-k8s.io/podset-preferred-topology": "preferred",
}
"""Kueue's topology-aware scheduling annotations on a pod template: the topology level (a node
label) all the pod set's pods must / should share."""


def read_template(fields: Fields, value: Any, path: str) -> PodShape:
    """A pod template (``metadata`` + ``spec``) at ``path``; Kueue's labels and annotations in
    the template's metadata by their rules (:data:`.kueue_keys.KEYS`): the topology
    annotations read (:data:`TOPOLOGY_ANNOTATIONS`), others noted."""
    template = fields.mapping(value, path, required=True)
    meta_path = join(path, "metadata")
    metadata = fields.mapping(template.get("metadata"), meta_path)
    topology: dict[str, str] = {}
    notes = []
    for part in ("labels", "annotations"):
        part_path = join(meta_path, part)
        values = fields.mapping(metadata.get(part), part_path)
        for key in values:
            if not is_kueue_key(key):
                continue
            rule = key_rule(f"template {part.removesuffix('s')}", key)
            if rule is not None and rule.verdict in READ:
                level = fields.text(values[key], join(part_path, key), required=True)
                assert level is not None
                topology[TOPOLOGY_ANNOTATIONS[key]] = level
            elif note := key_note(rule):
                notes.append(f"{join(part_path, key)}: {note}")
    if len(topology) > 1:
        raise fields.error(
            join(meta_path, "annotations"),
            "give podset-required-topology or podset-preferred-topology, not both",
        )
    shape = read_pod_spec(fields, template.get("spec"), join(path, "spec"))
    if not notes and not topology:
        return shape
    return PodShape(
        shape.requests,
        shape.node_selector,
        shape.tolerations,
        shape.affinity,
        shape.priority_class,
        (*notes, *shape.notes),
        topology.get("required"),
        topology.get("preferred"),
    )


def _pod_level(fields: Fields, value: Any, path: str) -> dict[str, int] | None:
    if value is None:
        return None
    requests, _ = resource_requirements(fields, value, path)
    for name in requests:
        if name not in _POD_LEVEL and not name.startswith("hugepages-"):
            raise fields.error(
                join(join(path, "requests"), name),
                "pod-level resources take only cpu, memory and hugepages",
            )
    return requests


def _tolerations(fields: Fields, value: Any, path: str) -> tuple[Toleration, ...]:
    out = []
    for i, item in enumerate(fields.items(value, path)):
        where = join(path, i)
        entry = fields.mapping(item, where, required=True)
        key = fields.text(entry.get("key"), join(where, "key")) or ""
        operator = fields.text(entry.get("operator"), join(where, "operator")) or "Equal"
        if operator not in ("Equal", "Exists"):
            raise fields.error(
                join(where, "operator"), f"must be Equal or Exists, got {operator!r}"
            )
        tol_value = fields.text(entry.get("value"), join(where, "value")) or ""
        effect = fields.text(entry.get("effect"), join(where, "effect")) or ""
        if effect not in _EFFECTS:
            raise fields.error(
                join(where, "effect"),
                f"must be NoSchedule, PreferNoSchedule or NoExecute, got {effect!r}",
            )
        if operator == "Exists" and tol_value:
            raise fields.error(join(where, "value"), "must be empty when operator is Exists")
        if not key and operator != "Exists":
            raise fields.error(join(where, "operator"), "must be Exists when key is empty")
        if entry.get("tolerationSeconds") is not None:
            fields.whole(
                entry.get("tolerationSeconds"),
                join(where, "tolerationSeconds"),
                default=0,
                minimum=-(2**63),
            )
            if effect != "NoExecute":
                raise fields.error(
                    join(where, "tolerationSeconds"), "is allowed only with effect NoExecute"
                )
        out.append(Toleration(key, cast(Literal["Equal", "Exists"], operator), tol_value, effect))
    return tuple(out)


def _affinity(fields: Fields, value: Any, path: str, notes: list[str]) -> Affinity:
    affinity = fields.mapping(value, path)
    for name in ("podAffinity", "podAntiAffinity"):
        if affinity.get(name):
            notes.append(f"{join(path, name)}: inter-pod affinity is not modelled")
    node_path = join(path, "nodeAffinity")
    node = fields.mapping(affinity.get("nodeAffinity"), node_path)
    if node.get("preferredDuringSchedulingIgnoredDuringExecution"):
        notes.append(
            f"{join(node_path, 'preferredDuringSchedulingIgnoredDuringExecution')}: "
            "preferences are not modelled (only required node affinity is)"
        )
    req_path = join(node_path, "requiredDuringSchedulingIgnoredDuringExecution")
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return ()
    terms_path = join(req_path, "nodeSelectorTerms")
    terms = fields.items(
        fields.mapping(required, req_path).get("nodeSelectorTerms"), terms_path, required=True
    )
    if not terms:
        raise fields.error(terms_path, "must list at least one term")
    out = []
    for i, item in enumerate(terms):
        where = join(terms_path, i)
        term = fields.mapping(item, where, required=True)
        if term.get("matchFields"):
            raise fields.error(
                join(where, "matchFields"),
                "is not supported (it selects nodes by name); use matchExpressions on labels",
            )
        expressions = fields.items(term.get("matchExpressions"), join(where, "matchExpressions"))
        if not expressions:
            raise fields.error(where, "an empty term matches no node; give matchExpressions")
        out.append(
            tuple(
                _requirement(fields, expr, join(join(where, "matchExpressions"), j))
                for j, expr in enumerate(expressions)
            )
        )
    return tuple(out)


def _requirement(fields: Fields, value: Any, path: str) -> NodeSelectorRequirement:
    entry = fields.mapping(value, path, required=True)
    key = fields.text(entry.get("key"), join(path, "key"), required=True)
    operator = fields.text(entry.get("operator"), join(path, "operator"), required=True)
    if operator not in _OPERATORS:
        raise fields.error(join(path, "operator"), f"must be one of {', '.join(_OPERATORS)}")
    values = []
    for i, item in enumerate(fields.items(entry.get("values"), join(path, "values"))):
        if not isinstance(item, str):
            raise fields.error(join(join(path, "values"), i), f"must be a string, got {item!r}")
        values.append(item)
    if operator in ("In", "NotIn") and not values:
        raise fields.error(join(path, "values"), f"operator {operator} needs at least one value")
    if operator in ("Exists", "DoesNotExist") and values:
        raise fields.error(join(path, "values"), f"operator {operator} takes no values")
    if operator in ("Gt", "Lt") and not (len(values) == 1 and values[0].lstrip("-").isdigit()):
        raise fields.error(join(path, "values"), f"operator {operator} needs one integer value")
    assert key is not None
    op = cast(Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"], operator)
    return NodeSelectorRequirement(key, op, tuple(values))
