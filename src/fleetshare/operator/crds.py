"""fleetshare's CustomResourceDefinitions (group ``fleetshare.io``, version ``v1alpha1``) and
the conversion between them and a :class:`~fleetshare.policy.schema.Policy`.

- ``ClusterPolicy`` (cluster-scoped; the operator reads the one named ``default``, or the only
  one): ``spec`` holds the policy's ``cluster`` settings (priority classes, flavors, fair
  share, preemption guards, starvation guard) and its ``groups`` (cohorts), in fleetshare's
  own policy format (snake_case, as in a policy file).
- ``NodePool`` (cluster-scoped): ``metadata.name`` is the pool, ``spec`` the rest of a pool
  entry of a ``--pools`` file (instance types, zones, capacity types, limits, disruption).
- ``NodeClaim`` (cluster-scoped, Karpenter's shape, written by the operator): one launched
  instance; ``spec.requirements`` (instance type, zone, capacity type, pool), ``spec.taints``;
  ``status.providerID``, ``nodeName``, ``capacity``/``allocatable`` and the conditions
  ``Launched``, ``Registered`` and ``Initialized``.
- ``Team`` (cluster-scoped, like Kueue's ClusterQueue): ``metadata.name`` is the team's name,
  ``spec`` the rest of the team in the policy format (quota, sharing, borrow and lending limits,
  local queues, ...). ``status`` shows quota, used and borrowed per resource (maps and one-line
  texts for ``kubectl get teams``), admitted and pending workload counts, and a ``PolicyValid``
  condition.

The OpenAPI schemas are generated from the pydantic models (:func:`structural`), so the API
server checks types and enums while the operator checks the rest with the same validation
as a policy file.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from fleetshare.autoscaling.nodepool import NodePool, PoolSet, pool_problems
from fleetshare.model.catalog import Catalog
from fleetshare.policy.schema import (
    ClusterPolicy,
    Group,
    Policy,
    Team,
    load_policy,
    validation_problems,
)

GROUP = "fleetshare.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
DEFAULT_POLICY = "default"
_DROP = {"title", "default", "additionalProperties", "$defs", "discriminator", "examples"}


def structural(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema as a Kubernetes structural schema: references inlined,
    ``X | None`` as ``nullable``, quantities (string or number) as int-or-string, maps kept
    as ``additionalProperties``; anything else a CRD schema cannot say is left open
    (``x-kubernetes-preserve-unknown-fields``)."""
    defs = schema.get("$defs", {})

    def conv(node: Mapping[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            return conv(defs[str(node["$ref"]).rsplit("/", 1)[-1]])
        if "anyOf" in node:
            options = [o for o in node["anyOf"] if o.get("type") != "null"]
            nullable = len(options) < len(node["anyOf"])
            types = {o.get("type") for o in options}
            out: dict[str, Any]
            if len(options) == 1:
                out = conv(options[0])
            elif types <= {"string", "integer", "number"} and "string" in types:
                out = {"x-kubernetes-int-or-string": True}
            else:
                out = {"x-kubernetes-preserve-unknown-fields": True}
            if nullable:
                out["nullable"] = True
            if "description" in node:
                out["description"] = node["description"]
            return out
        out = {k: v for k, v in node.items() if k not in _DROP and k != "properties"}
        if "const" in out:  # a one-value Literal: Kubernetes' schemas have no const
            out["enum"] = [out.pop("const")]
        # JSON Schema 2020-12 writes exclusive bounds as numbers, OpenAPI v3 as a flag
        for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(out.get(bound), int | float) and not isinstance(out[bound], bool):
                out[flag] = out.pop(bound)
                out[bound] = True
        if "prefixItems" in out:  # a tuple: one item schema when its members agree, else open
            members = [conv(m) for m in out.pop("prefixItems")]
            same = all(m == members[0] for m in members)
            out["items"] = (
                members[0] if members and same else {"x-kubernetes-preserve-unknown-fields": True}
            )
        if "items" in out:
            out["items"] = conv(out["items"])
        if node.get("type") == "object" or "properties" in node:
            out["type"] = "object"
            if "properties" in node:
                props = {k: conv(v) for k, v in node["properties"].items()}
                if "flavor" in props and "instance_type" not in props:
                    props["instance_type"] = copy.deepcopy(props["flavor"])  # the alias
                out["properties"] = props
            extra = node.get("additionalProperties")
            if isinstance(extra, Mapping):
                out["additionalProperties"] = conv(extra)
            elif "properties" not in node:
                out["x-kubernetes-preserve-unknown-fields"] = True
        if "required" in out:
            out["required"] = [r for r in out["required"] if r != "flavor"]
            if not out["required"]:
                del out["required"]
        if "description" in out:
            out["description"] = str(out["description"])[:500]
        return out

    return conv(schema)


def _status_schema() -> dict[str, Any]:
    amounts = {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "quota": amounts,
            "used": amounts,
            "borrowed": amounts,
            "quotaText": {"type": "string"},
            "usedText": {"type": "string"},
            "borrowedText": {"type": "string"},
            "admitted": {"type": "integer"},
            "pending": {"type": "integer"},
            "conditions": {
                "type": "array",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
    }


def _crd(
    kind: str,
    plural: str,
    spec: dict[str, Any],
    columns: list[dict[str, Any]],
    short: list[str],
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status or _status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def team_crd() -> dict[str, Any]:
    spec = structural(Team.model_json_schema())
    spec["properties"].pop("name", None)
    spec.pop("required", None)
    spec["description"] = "A team: its guaranteed quota and how it shares (fleetshare policy)."
    columns = [
        {"name": "Group", "type": "string", "jsonPath": ".spec.group"},
        {"name": "Quota", "type": "string", "jsonPath": ".status.quotaText"},
        {"name": "Used", "type": "string", "jsonPath": ".status.usedText"},
        {"name": "Borrowed", "type": "string", "jsonPath": ".status.borrowedText"},
        {"name": "Admitted", "type": "integer", "jsonPath": ".status.admitted"},
        {"name": "Pending", "type": "integer", "jsonPath": ".status.pending"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd("Team", "teams", spec, columns, ["fsteam"])


def cluster_policy_crd() -> dict[str, Any]:
    spec = structural(ClusterPolicy.model_json_schema())
    group = structural(Group.model_json_schema())
    spec.setdefault("properties", {})["groups"] = {"type": "array", "items": group}
    spec["description"] = "Cluster-wide governance settings and groups (fleetshare policy)."
    columns = [
        {"name": "Fair-Share", "type": "boolean", "jsonPath": ".spec.fair_share"},
        {"name": "Teams", "type": "integer", "jsonPath": ".status.teams"},
        {"name": "Valid", "type": "string",
         "jsonPath": ".status.conditions[?(@.type=='PolicyValid')].status"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]  # fmt: skip
    return _crd("ClusterPolicy", "clusterpolicies", spec, columns, ["fspolicy"])


def node_pool_crd() -> dict[str, Any]:
    spec = structural(NodePool.model_json_schema())
    spec["properties"].pop("name", None)
    spec.pop("required", None)
    spec["description"] = "A node pool the autoscaler launches into (fleetshare node pool)."
    columns = [
        {"name": "Types", "type": "string", "jsonPath": ".spec.instance_types"},
        {"name": "Capacity", "type": "string", "jsonPath": ".spec.capacity_types"},
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodes"},
        {"name": "Valid", "type": "string",
         "jsonPath": ".status.conditions[?(@.type=='PoolValid')].status"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]  # fmt: skip
    status = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {"nodes": {"type": "integer"}, "conditions": _conditions()},
    }
    return _crd("NodePool", "nodepools", spec, columns, ["fspool"], status)


def _conditions() -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }


def node_claim_crd() -> dict[str, Any]:
    """Karpenter's NodeClaim shape (the fields fleetshare writes)."""
    strings = {"type": "array", "items": {"type": "string"}}
    amounts = {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": True}}
    spec = {
        "type": "object",
        "description": "One instance the autoscaler launched for a node pool.",
        "properties": {
            "requirements": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string"},
                        "operator": {"type": "string"},
                        "values": strings,
                    },
                },
            },
            "taints": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "effect"],
                    "properties": {
                        "key": {"type": "string"},
                        "value": {"type": "string"},
                        "effect": {"type": "string"},
                    },
                },
            },
            "resources": {"type": "object", "properties": {"requests": amounts}},
        },
    }
    status = {
        "type": "object",
        "properties": {
            "providerID": {"type": "string"},
            "nodeName": {"type": "string"},
            "capacity": amounts,
            "allocatable": amounts,
            "pricePerHour": {"type": "string"},
            "launchReason": {"type": "string"},
            "conditions": _conditions(),
        },
    }
    columns = [
        {"name": "Type", "type": "string",
         "jsonPath": ".metadata.labels.node\\.kubernetes\\.io/instance-type"},
        {"name": "Zone", "type": "string",
         "jsonPath": ".metadata.labels.topology\\.kubernetes\\.io/zone"},
        {"name": "Node", "type": "string", "jsonPath": ".status.nodeName"},
        {"name": "Ready", "type": "string",
         "jsonPath": ".status.conditions[?(@.type=='Initialized')].status"},
        {"name": "Pool", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/nodepool"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]  # fmt: skip
    return _crd("NodeClaim", "nodeclaims", spec, columns, ["fsclaim"], status)


def crds() -> list[dict[str, Any]]:
    return [cluster_policy_crd(), team_crd(), node_pool_crd(), node_claim_crd()]


def pools_from(objects: Sequence[Mapping[str, Any]], catalog: Catalog) -> list[NodePool]:
    """The node pools of NodePool objects (in name order); raises ``ValueError`` naming the
    pool and field of every problem (schema, or names the catalog does not know)."""
    data = {
        "pools": [{"name": o["metadata"]["name"], **(o.get("spec") or {})}
                  for o in sorted(objects, key=lambda o: str(o["metadata"]["name"]))]
    }  # fmt: skip
    try:
        pools = PoolSet.model_validate(data).pools
    except ValidationError as exc:
        problems = "; ".join(f"{p}: {r}" for p, r in validation_problems(exc, data))
        raise ValueError(f"NodePools: {problems}") from None
    for i, pool in enumerate(pools):
        for where, why in pool_problems(pool, catalog):
            raise ValueError(f"NodePools: pools[{i}]({pool.name}){where}: {why}")
    return pools


# -- policy <-> objects ---------------------------------------------------------------------


def policy_objects(policy: Policy, name: str = DEFAULT_POLICY) -> list[dict[str, Any]]:
    """A policy as one ClusterPolicy and a Team per team (for ``kubectl apply``)."""
    cluster = policy.cluster.model_dump(mode="json", exclude_defaults=True)
    groups = [g.model_dump(mode="json", exclude_defaults=True) for g in policy.groups]
    spec: dict[str, Any] = {**cluster}
    if groups:
        spec["groups"] = groups
    out: list[dict[str, Any]] = [
        {"apiVersion": API_VERSION, "kind": "ClusterPolicy", "metadata": {"name": name},
         "spec": spec},
    ]  # fmt: skip
    for team in policy.teams:
        data = team.model_dump(mode="json", exclude_defaults=True)
        data.pop("name")
        out.append(
            {"apiVersion": API_VERSION, "kind": "Team", "metadata": {"name": team.name},
             "spec": data}
        )  # fmt: skip
    return out


def policy_data(
    cluster_policy: Mapping[str, Any] | None, teams: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The policy document the objects describe (validate it with :func:`policy_from`)."""
    spec = dict((cluster_policy or {}).get("spec") or {})
    groups = spec.pop("groups", [])
    team_docs = []
    for team in sorted(teams, key=lambda t: str(t["metadata"]["name"])):
        team_docs.append({"name": team["metadata"]["name"], **(team.get("spec") or {})})
    return {"cluster": spec, "groups": groups, "teams": team_docs}


def policy_from(
    cluster_policy: Mapping[str, Any] | None, teams: Sequence[Mapping[str, Any]]
) -> Policy:
    """The policy of the objects; raises :class:`~fleetshare.policy.schema.PolicyError` with
    field paths (``teams[0](team-a).quota[0].count``)."""
    return load_policy(policy_data(cluster_policy, teams), "ClusterPolicy and Teams")
