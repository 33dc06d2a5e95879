"""Import Kueue objects (multi-document YAML) into a fleetshare :class:`Policy`.

Mapping, Kueue -> fleetshare:

- ``ResourceFlavor`` -> :class:`Flavor` (name, ``spec.nodeLabels``).
- ``Cohort`` -> :class:`Group`: parent (``spec.parent`` in v1alpha1/v1beta1, ``spec.parentName``
  in v1beta2), its own quota from ``spec.resourceGroups``, the borrowingLimit / lendingLimit
  it has towards its parent and ``fairSharing.weight`` (``fair_share_weight``). A cohort
  that is named (by a ClusterQueue or as a parent) but not declared becomes a group with no
  quota, as Kueue treats it. Root cohorts (no parent) are
  separate trees in Kueue: they get borrowing and lending limits of 0 towards the cluster.
- ``ClusterQueue`` -> :class:`Team`: group = ``spec.cohort`` / ``spec.cohortName``; one
  :class:`QuotaEntry` per flavor with ``resources = {name: nominalQuota}``; borrowingLimit and
  lendingLimit -> absolute :class:`BorrowLimit` / :class:`LendingLimit` on (resource, flavor); a
  queue without a cohort can neither lend nor borrow (``DontLend``);
  ``preemption.withinClusterQueue`` -> ``preempt_team_tasks`` and ``reclaimWithinCohort`` ->
  ``reclaim`` (both ``Never`` when absent, Kueue's default); ``preemption.borrowWithinCohort``
  -> ``borrow_within_cohort`` (its ``maxPriorityThreshold`` on the rescaled priorities; with
  ``reclaimWithinCohort: Never`` rejected, as Kueue's webhook does; with fair sharing noted as
  having no effect); ``queueingStrategy`` -> ``queueing_strategy``; ``admissionScope`` ->
  ``admission_fair_sharing``; ``fairSharing.weight`` -> ``fair_share_weight``;
  ``stopPolicy`` -> ``stop_policy``; an empty
  ``namespaceSelector`` (every namespace) is what fleetshare does anyway. ``coveredResources``
  of every resource group -> ``covered_resources`` (none for a queue without resourceGroups:
  its work waits, as in Kueue). The node group is the
  first group with a flavor that has nodeLabels (else the first); any other group must have
  one flavor without nodeLabels and becomes a :class:`QuotaGroup` (quota only, like credits),
  else it is rejected: fleetshare gives a pod set one node flavor.
- ``LocalQueue`` -> ``"namespace/name"`` in its ClusterQueue's ``local_queues``; workloads
  naming it reach that team (:meth:`Policy.team_for`); ``fairSharing.weight`` ->
  ``local_queue_weights``; ``stopPolicy`` -> ``local_queue_stop_policies``.
- ``WorkloadPriorityClass`` -> :class:`PriorityClass` (weight = value, rescaled into 0–100 when
  a value falls outside it, keeping order and distinctness).
- kueue ``Configuration`` ``resources``: ``transformations`` (input, strategy, outputs,
  multiplyBy) -> ``cluster.resource_transformations``, ``excludeResourcePrefixes`` ->
  ``cluster.excluded_resource_prefixes``;
  ``fairSharing`` -> ``cluster.fair_share`` (off without it);
  ``admissionFairSharing`` (``usageHalfLifeTime``, ``usageSamplingInterval`` as Go durations,
  ``resourceWeights``) -> ``cluster.admission_fair_sharing``. In Kueue only quota that queues
  lend can be borrowed, so ``cluster.idle_resource_sharing`` is off. Kueue has no starvation
  guard, so ``cluster.starvation_guard_seconds`` is null (a note says which of fleetshare's
  extras are off; a scenario's ``policy_overrides`` turns them on).

Which fields are read, refused or bookkeeping is decided by the tables of
:mod:`fleetshare.policy.kueue_fields` (docs/fields.md lists them): whatever is present but not
carried over is listed in ``Policy.notes``, naming object and field and the table's reason
(``status``, metadata other than name and a LocalQueue's namespace, and descriptions as not
policy; AdmissionCheck and ProvisioningRequestConfig objects as not implemented in governance);
invalid input raises :class:`PolicyError` with ``(field path, reason)`` pairs such as
``("ClusterQueue/team-a.spec.resourceGroups[0].flavors[0].resources[1].nominalQuota", "not a
Kubernetes quantity: 'abc' ...")``. An :class:`ImportReport` passed in records every path and
where it went.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from enum import StrEnum
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from fleetshare.fields import READ, FieldTable, FieldView
from fleetshare.inputs import InputError, parse_yaml_all, value_kind
from fleetshare.model.namespace import NAME_LABEL
from fleetshare.model.quantity import MILLI, QuantityError, parse_quantity
from fleetshare.policy.import_report import ImportReport
from fleetshare.policy.kueue_fields import (
    CLUSTER_QUEUE,
    CONFIGURATION,
    KINDS,
    LOCAL_QUEUE,
    OBJECTS,
    TOPOLOGY,
)
from fleetshare.policy.schema import (
    AdmissionFairSharing,
    BorrowLimit,
    BorrowWithinCohort,
    BorrowWithinCohortPolicy,
    ClusterPolicy,
    Flavor,
    FlavorFungibility,
    Group,
    LabelRequirement,
    LabelSelector,
    LendingLimit,
    Policy,
    PolicyError,
    PreemptTeamTasks,
    PriorityClass,
    Quantity,
    QueueingStrategy,
    QuotaEntry,
    QuotaGroup,
    ReclaimPolicy,
    ResourceTransformation,
    SharingStrategy,
    StopPolicy,
    Team,
    validation_problems,
)

__all__ = ["import_kueue", "rescale_priorities"]

SOURCE = "Kueue objects"
MAX_PRIORITY_CLASSES = 10  # what ClusterPolicy accepts
KUEUE_GROUPS = ("kueue.x-k8s.io", "config.kueue.x-k8s.io")
ADMISSION_FAIR_SHARING = "UsageBasedAdmissionFairSharing"

_E = TypeVar("_E", bound=StrEnum)


@dataclass(frozen=True)
class _Object:
    """One Kueue object; ``ref`` (``Kind/name``) starts every path that points into it, and
    ``doc`` is read through its kind's table."""

    kind: str
    name: str
    ref: str
    doc: FieldView
    namespace: str = ""

    @property
    def table(self) -> FieldTable:
        return CONFIGURATION if self.kind == "Configuration" else OBJECTS[self.kind]


@dataclass
class _Quotas:
    entries: list[QuotaEntry] = field(default_factory=list)
    borrow: list[BorrowLimit] = field(default_factory=list)
    lend: list[LendingLimit] = field(default_factory=list)
    limit_paths: list[str] = field(default_factory=list)
    groups: list[tuple[str, list[str], list[str]]] = field(default_factory=list)
    """Per resource group: its path, covered resources and flavor names."""


@dataclass
class _LocalQueues:
    """A ClusterQueue's LocalQueues (``namespace/name``), with their admission fair sharing
    weights and stop policies where given."""

    names: list[str] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    stops: dict[str, StopPolicy] = field(default_factory=dict)


def import_kueue(source: str | list[dict[str, Any]], report: ImportReport | None = None) -> Policy:
    """Turn Kueue objects (YAML text or parsed documents) into a fleetshare policy.

    Raises :class:`PolicyError` listing every invalid field; ``Policy.notes`` lists what was
    present but could not be mapped. ``report``, if given, is filled with the path of every
    field and where it went (:meth:`ImportReport.account`), also when the import fails.
    """
    report = report if report is not None else ImportReport()
    objects = _objects(_documents(source), report)
    by_kind = {kind: _unique(objects, kind, report) for kind in OBJECTS}
    topologies = {name: _topology(obj, report) for name, obj in by_kind["Topology"].items()}
    flavors = [_flavor(obj, topologies, report) for obj in by_kind["ResourceFlavor"].values()]
    flavor_names = set(by_kind["ResourceFlavor"])
    labels = {f.name: f.node_labels for f in flavors}
    groups = [_group(obj, flavor_names, report) for obj in by_kind["Cohort"].values()]
    queues = _local_queues(by_kind["LocalQueue"].values(), set(by_kind["ClusterQueue"]), report)
    classes, priority_of = _priority_classes(by_kind["WorkloadPriorityClass"].values(), report)
    configurations = [obj for obj in objects if obj.kind == "Configuration"]
    fair_share, admission, resources = _configuration(configurations, report)
    teams = [
        _team(obj, flavor_names, labels, queues.get(name, _LocalQueues()), priority_of, report)
        for name, obj in by_kind["ClusterQueue"].items()
    ]
    _queue_settings_notes(teams, fair_share, admission, report)
    groups += _undeclared_groups(groups, teams, report)
    groups = [_isolated(g) if g.parent is None else g for g in groups]
    report.notes.append(_cluster_note(fair_share, bool(configurations)))
    if report.problems:
        raise PolicyError(report.problems, SOURCE)
    try:
        cluster = ClusterPolicy(
            priority_classes=classes,
            fair_share=fair_share,
            idle_resource_sharing=False,
            flavors=flavors,
            admission_fair_sharing=admission,
            resource_transformations=resources.transformations,
            excluded_resource_prefixes=resources.excluded,
            starvation_guard_seconds=None,  # Kueue has no such guard (see _cluster_note)
        )
        return Policy(cluster=cluster, groups=groups, teams=teams, notes=report.notes)
    except ValidationError as exc:
        raise PolicyError(validation_problems(exc, {}), SOURCE) from None


# --- documents and objects ---------------------------------------------------------------------


def _documents(source: str | list[dict[str, Any]]) -> list[Any]:
    """Parse YAML text (or take parsed documents), flattening ``kind: List`` wrappers."""
    if isinstance(source, str):
        try:
            loaded = parse_yaml_all(source, SOURCE)
        except InputError as exc:
            raise PolicyError([("(top level)", exc.why)], SOURCE) from None
    else:
        loaded = list(source)
    return list(_flatten_lists(loaded))


def _flatten_lists(docs: Iterable[Any]) -> Iterator[Any]:
    """Yield the items of ``kind: List`` / ``kind: ClusterQueueList`` (``kubectl get -o yaml``)."""
    for doc in docs:
        is_list = isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List")
        if is_list and isinstance(doc.get("items"), list):
            yield from _flatten_lists(doc["items"])
        else:
            yield doc


def _objects(docs: list[Any], report: ImportReport) -> list[_Object]:
    """Identify each document; unsupported kinds become notes, nameless objects problems."""
    objects = []
    for index, doc in enumerate(docs):
        where = f"document {index + 1}"
        if not isinstance(doc, dict):
            report.problem(where, "not a mapping (expected a Kubernetes object)")
            continue
        kind = doc.get("kind")
        if not isinstance(kind, str) or not kind:
            report.problem(f"{where}.kind", "required")
            continue
        metadata = doc.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        named = isinstance(name, str) and bool(name)
        label = f"{kind}/{name}" if named else f"{kind} ({where})"
        api_version = str(doc.get("apiVersion", ""))
        group = api_version.split("/")[0] if "/" in api_version else api_version and "core"
        rule = KINDS.rule(kind)
        if group and group not in KUEUE_GROUPS:
            report.note(label, f"{api_version} {kind} is not a Kueue object; ignored")
        elif rule is None or rule.verdict not in READ:
            read = [r.path for r in KINDS.read()]
            meant = get_close_matches(kind, read, n=1, cutoff=0.8) if rule is None else []
            hint = f" (did you mean {meant[0]}?)" if meant else ""
            reason = rule.note if rule is not None else "not supported"
            report.note(label, f"kind {kind}: {reason}; ignored{hint}")
        elif kind != "Configuration" and not named:
            report.problem(f"{label}.metadata.name", "required")
        else:
            objects.append(_object(kind, doc, report))
    return objects


def _object(kind: str, doc: dict[str, Any], report: ImportReport) -> _Object:
    """An object of a kind the importer reads, its fields accounted for by the kind's table; a
    LocalQueue's ref carries its namespace (``default`` when absent)."""
    table = CONFIGURATION if kind == "Configuration" else OBJECTS[kind]
    given = doc.get("metadata")
    metadata = FieldView(given if isinstance(given, dict) else {}, table, "metadata", report.reads)
    name = str(metadata.get("name") or "")
    ref = f"{kind}/{name}" if name or kind != "Configuration" else kind
    namespace = ""
    if kind == "LocalQueue":
        namespace = metadata.get("namespace") or ""
        if not isinstance(namespace, str) or not namespace:
            namespace = "default"
            report.remark(ref, "no metadata.namespace; assumed 'default'")
        ref = f"{kind}/{namespace}/{name}"
    top = report.fields(doc, ref, table)
    if isinstance(given, dict):
        report.fields(given, f"{ref}.metadata", table, "metadata")
    return _Object(kind, name, ref, top, namespace)


def _unique(objects: list[_Object], kind: str, report: ImportReport) -> dict[str, _Object]:
    """Objects of one kind by name (namespace/name for LocalQueues); repeats are problems."""
    out: dict[str, _Object] = {}
    for obj in objects:
        if obj.kind != kind:
            continue
        key = f"{obj.namespace}/{obj.name}" if obj.namespace else obj.name
        if key in out:
            report.problem(f"{obj.ref}.metadata.name", f"{kind} {key!r} is declared twice")
        out[key] = obj
    return out


# --- value helpers -----------------------------------------------------------------------------


def _read(value: Any, where: str, table: FieldTable, scope: str, report: ImportReport) -> FieldView:
    """``value`` as a mapping (``{}`` when absent; anything else is a problem), its fields
    accounted for by ``table`` at ``scope`` (:meth:`ImportReport.fields`), to be read through
    the view returned."""
    return report.fields(_mapping(value, where, report), where, table, scope)


def _mapping(value: Any, where: str, report: ImportReport) -> dict[str, Any]:
    """``value`` as a mapping (``{}`` when absent); anything else is a problem."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        report.problem(where, f"expected a mapping, got {value_kind(value)}")
        return {}
    return value


def _list(value: Any, where: str, report: ImportReport) -> list[Any]:
    """``value`` as a list (``[]`` when absent); anything else is a problem."""
    if value is None:
        return []
    if not isinstance(value, list):
        report.problem(where, f"expected a list, got {value_kind(value)}")
        return []
    return value


def _quantity(value: Any, where: str, report: ImportReport) -> Quantity | None:
    """A Kubernetes quantity kept as written, or ``None`` (with a problem when invalid)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        report.problem(where, f"not a Kubernetes quantity: {value!r}")
        return None
    try:
        parse_quantity(value)
    except QuantityError as exc:
        report.problem(where, str(exc))
        return None
    return value


def _enum(enum: type[_E], value: Any, default: _E, where: str, report: ImportReport) -> _E:
    """One of ``enum``'s values (``default`` when absent or invalid, with a problem if invalid)."""
    if value is None:
        return default
    try:
        return enum(value)
    except ValueError:
        report.problem(where, f"must be one of {', '.join(e.value for e in enum)}")
        return default


def _reference(
    spec: Mapping[str, Any], keys: tuple[str, str], where: str, report: ImportReport
) -> str | None:
    """A cohort name given under either of two field names (older and newer API versions)."""
    given = {key: spec[key] for key in keys if spec.get(key) not in (None, "")}
    if len(set(map(str, given.values()))) > 1:
        report.problem(f"{where}.{keys[1]}", f"{keys[0]} and {keys[1]} name different cohorts")
    for key, value in given.items():
        if not isinstance(value, str):
            report.problem(f"{where}.{key}", "must be a cohort name")
            return None
        return value
    return None


# --- resource groups ---------------------------------------------------------------------------

_GROUPS = "spec.resourceGroups"


@dataclass
class _QuotaReader:
    """Reads ``resourceGroups`` (the same shape in ClusterQueue and Cohort)."""

    flavors: set[str]
    table: FieldTable
    report: ImportReport
    quotas: _Quotas = field(default_factory=_Quotas)
    seen: dict[str, str] = field(default_factory=dict)

    def read(self, groups: Any, where: str) -> _Quotas:
        """Quota entries (one per flavor) and limits from every resource group."""
        for gi, group in enumerate(_list(groups, where, self.report)):
            gpath = f"{where}[{gi}]"
            group = _read(group, gpath, self.table, f"{_GROUPS}[]", self.report)
            covered = _list(group.get("coveredResources"), f"{gpath}.coveredResources", self.report)
            if not group.get("coveredResources"):
                self.report.problem(f"{gpath}.coveredResources", "required (at least one resource)")
            if not group.get("flavors"):
                self.report.problem(f"{gpath}.flavors", "required (at least one flavor)")
            names: list[str] = []
            for fi, flavor in enumerate(
                _list(group.get("flavors"), f"{gpath}.flavors", self.report)
            ):
                fpath = f"{gpath}.flavors[{fi}]"
                spec = _read(flavor, fpath, self.table, f"{_GROUPS}[].flavors[]", self.report)
                self._flavor(spec, covered, fpath)
                if isinstance(spec.get("name"), str):
                    names.append(spec["name"])
            resources = [str(r) for r in covered]
            for resource in resources:
                for other, taken, _ in self.quotas.groups:
                    if resource in taken:
                        self.report.problem(
                            f"{gpath}.coveredResources",
                            f"{resource!r} is already covered by {other}",
                        )
            self.quotas.groups.append((gpath, resources, names))
        return self.quotas

    def forbid_limits(self, reason: str) -> None:
        """Borrowing and lending limits need something to borrow from / lend to."""
        for path in self.quotas.limit_paths:
            self.report.problem(path, reason)

    def _flavor(self, flavor: FieldView, covered: list[Any], where: str) -> None:
        name = flavor.get("name")
        if not isinstance(name, str) or not name:
            self.report.problem(f"{where}.name", "required")
            return
        if name not in self.flavors:
            self.report.problem(f"{where}.name", f"ResourceFlavor {name!r} is not declared")
        if name in self.seen:
            self.report.problem(
                f"{where}.name", f"flavor {name!r} already appears at {self.seen[name]}"
            )
        self.seen[name] = where
        nominal: dict[str, Quantity] = {}
        resources = _list(flavor.get("resources"), f"{where}.resources", self.report)
        if not resources:
            self.report.problem(f"{where}.resources", "required (at least one resource)")
        for ri, resource in enumerate(resources):
            rpath = f"{where}.resources[{ri}]"
            scope = f"{_GROUPS}[].flavors[].resources[]"
            self._resource(
                _read(resource, rpath, self.table, scope, self.report),
                rpath,
                name,
                covered,
                nominal,
            )
        if nominal:
            self.quotas.entries.append(QuotaEntry(flavor=name, resources=nominal))

    def _resource(
        self,
        resource: FieldView,
        where: str,
        flavor: str,
        covered: list[Any],
        nominal: dict[str, Quantity],
    ) -> None:
        name = resource.get("name")
        if not isinstance(name, str) or not name:
            self.report.problem(f"{where}.name", "required")
            return
        if covered and name not in covered:
            self.report.problem(f"{where}.name", f"{name!r} is not listed in coveredResources")
        amount: Quantity | None = None
        if "nominalQuota" in resource:
            amount = _quantity(resource["nominalQuota"], f"{where}.nominalQuota", self.report)
        else:  # required in Kueue's API; a misspelling is the likely cause
            scope = f"{_GROUPS}[].flavors[].resources[]"
            unknown = [key for key in resource if self.table.rule(f"{scope}.{key}") is None]
            hint = f" (unknown field here: {', '.join(unknown)})" if unknown else ""
            self.report.problem(f"{where}.nominalQuota", f"required{hint}")
        if amount is not None:
            nominal[name] = amount
        if "borrowingLimit" in resource:
            limit = _quantity(resource["borrowingLimit"], f"{where}.borrowingLimit", self.report)
            self.quotas.limit_paths.append(f"{where}.borrowingLimit")
            if limit is not None:
                self.quotas.borrow.append(BorrowLimit(resource=name, flavor=flavor, absolute=limit))
        if "lendingLimit" in resource:
            self._lending_limit(
                resource["lendingLimit"], f"{where}.lendingLimit", name, flavor, amount
            )

    def _lending_limit(
        self, value: Any, where: str, resource: str, flavor: str, nominal: Quantity | None
    ) -> None:
        limit = _quantity(value, where, self.report)
        self.quotas.limit_paths.append(where)
        if limit is None:
            return
        if nominal is not None and parse_quantity(limit) > parse_quantity(nominal):
            self.report.problem(where, f"must not exceed nominalQuota ({nominal})")
        self.quotas.lend.append(LendingLimit(resource=resource, flavor=flavor, absolute=limit))


# --- kinds -------------------------------------------------------------------------------------


def _spec(obj: _Object, report: ImportReport) -> FieldView:
    """The object's ``spec``, read through its kind's table."""
    spec = _read(obj.doc.get("spec"), f"{obj.ref}.spec", obj.table, "spec", report)
    if "spec" in obj.doc and not spec:
        report.map(f"{obj.ref}.spec")  # an empty spec: Kueue's defaults, fleetshare's too
    return spec


def _topology(obj: _Object, report: ImportReport) -> list[str]:
    """Topology -> its levels' node labels, widest first (``spec.levels[].nodeLabel``)."""
    spec, where = _spec(obj, report), f"{obj.ref}.spec"
    levels = spec.get("levels")
    if not isinstance(levels, list) or not levels:
        report.problem(f"{where}.levels", "required: a list of {nodeLabel}")
        return []
    labels = []
    for i, level in enumerate(levels):
        item = _read(level, f"{where}.levels[{i}]", TOPOLOGY, "spec.levels[]", report)
        label = item.get("nodeLabel")
        if not isinstance(label, str) or not label:
            report.problem(f"{where}.levels[{i}].nodeLabel", "required (a node label key)")
            continue
        labels.append(label)
    return labels


def _flavor(obj: _Object, topologies: Mapping[str, list[str]], report: ImportReport) -> Flavor:
    """ResourceFlavor -> Flavor; node labels must be string to string; ``topologyName`` names
    a Topology whose levels the flavor's pod sets may ask for (none without it)."""
    spec, where = _spec(obj, report), f"{obj.ref}.spec"
    labels = _mapping(spec.get("nodeLabels"), f"{where}.nodeLabels", report)
    if "nodeLabels" in spec:
        report.map(f"{where}.nodeLabels")
    for key, value in labels.items():
        if not isinstance(value, str):
            report.problem(f"{where}.nodeLabels.{key}", f"label values are strings, got {value!r}")
    levels: list[str] = []
    topology = spec.get("topologyName")
    if topology is not None:
        if topology not in topologies:
            report.problem(f"{where}.topologyName", f"no Topology {topology!r} is given")
        else:
            levels = topologies[topology]
    return Flavor(
        name=obj.name,
        node_labels={str(k): str(v) for k, v in labels.items()},
        topology_levels=levels,
    )


def _group(obj: _Object, flavors: set[str], report: ImportReport) -> Group:
    """Cohort -> Group with its parent, own quota, limits towards the parent and fair-sharing
    weight."""
    spec, where = _spec(obj, report), f"{obj.ref}.spec"
    parent = _reference(spec, ("parent", "parentName"), where, report)
    reader = _QuotaReader(flavors, obj.table, report)
    quotas = reader.read(spec.get("resourceGroups"), f"{where}.resourceGroups")
    if parent is None:
        reader.forbid_limits("only allowed when the Cohort has a parent")
    return Group(
        name=obj.name,
        parent=parent,
        quota=quotas.entries,
        borrow_limits=quotas.borrow,
        lending_limits=quotas.lend,
        fair_share_weight=_weight(
            spec.get("fairSharing"), f"{where}.fairSharing", obj.table, report
        ),
    )


def _resource_groups(
    groups: list[tuple[str, list[str], list[str]]],
    labels: Mapping[str, Mapping[str, str]],
    ref: str,
    report: ImportReport,
) -> tuple[list[str], list[QuotaGroup], list[str]]:
    """Covered resources (all groups), the quota-only groups of a ClusterQueue, and the node
    flavors its work may run on (the node group's, in its order: Kueue assigns no others).

    Kueue assigns a flavor per resource group. fleetshare gives a pod set one node flavor: the
    node group is the first group with a flavor that selects nodes (nodeLabels), else the
    first group. Any other group must be quota only (one flavor selecting no nodes, like
    credits): its requests are charged to that flavor and not asked of nodes.
    """
    covered = list(dict.fromkeys(r for _, resources, _ in groups for r in resources))
    if not groups:
        report.remark(ref, "no resourceGroups: covers no resource, so its work waits (as in Kueue)")
    selecting = [i for i, (_, _, names) in enumerate(groups) if any(labels.get(n) for n in names)]
    node_group = selecting[0] if selecting else 0
    quota_groups: list[QuotaGroup] = []
    for i, (path, resources, names) in enumerate(groups):
        if i == node_group or not resources or not names:
            continue
        if len(names) != 1 or labels.get(names[0]):
            report.problem(
                path,
                "fleetshare gives a pod set one node flavor (from "
                f"{groups[node_group][0].rsplit('.', 1)[-1]}); another resource group must be "
                "quota only: one flavor without nodeLabels (like credits)",
            )
            continue
        quota_groups.append(QuotaGroup(resources=resources, flavor=names[0]))
        report.remark(
            path,
            f"quota only: requests for {', '.join(resources)} are charged to flavor "
            f"{names[0]!r} whatever node flavor the pods get, and are not asked of nodes",
        )
    node_flavors = list(groups[node_group][2]) if groups else []
    return covered, quota_groups, node_flavors


def _team(
    obj: _Object,
    flavors: set[str],
    labels: Mapping[str, Mapping[str, str]],
    local_queues: _LocalQueues,
    priority_of: Callable[[int], int],
    report: ImportReport,
) -> Team:
    """ClusterQueue -> Team; its covered resources are the only ones its work may use."""
    spec, where = _spec(obj, report), f"{obj.ref}.spec"
    cohort = _reference(spec, ("cohort", "cohortName"), where, report)
    reader = _QuotaReader(flavors, CLUSTER_QUEUE, report)
    quotas = reader.read(spec.get("resourceGroups"), f"{where}.resourceGroups")
    covered, quota_groups, node_flavors = _resource_groups(quotas.groups, labels, obj.ref, report)
    sharing = SharingStrategy.LEND_AND_BORROW
    if cohort is None:
        reader.forbid_limits("only allowed when the ClusterQueue has a cohort")
        sharing = SharingStrategy.DONT_LEND
        report.remark(obj.ref, "no cohort, so it can neither lend nor borrow: sharing DontLend")
    within, reclaim, borrow = _preemption(
        spec.get("preemption"), f"{where}.preemption", priority_of, report
    )
    strategy = _enum(
        QueueingStrategy,
        spec.get("queueingStrategy"),
        QueueingStrategy.BEST_EFFORT_FIFO,
        f"{where}.queueingStrategy",
        report,
    )
    return Team(
        name=obj.name,
        group=cohort,
        quota=quotas.entries,
        sharing=sharing,
        borrow_limits=quotas.borrow,
        lending_limits=quotas.lend,
        fair_share_weight=_weight(
            spec.get("fairSharing"), f"{where}.fairSharing", CLUSTER_QUEUE, report
        ),
        preempt_team_tasks=within,
        reclaim=reclaim,
        local_queues=local_queues.names,
        local_queue_weights=local_queues.weights,
        local_queue_stop_policies=local_queues.stops,
        namespace_selector=_namespace_selector(spec, f"{where}.namespaceSelector", obj.ref, report),
        stop_policy=_enum(
            StopPolicy, spec.get("stopPolicy"), StopPolicy.NONE, f"{where}.stopPolicy", report
        ),
        flavors=node_flavors,
        covered_resources=covered,
        quota_groups=quota_groups,
        queueing_strategy=strategy,
        borrow_within_cohort=borrow,
        flavor_fungibility=_fungibility(
            spec.get("flavorFungibility"), f"{where}.flavorFungibility", report
        ),
        admission_fair_sharing=_admission_scope(
            spec.get("admissionScope"), f"{where}.admissionScope", report
        ),
    )


NO_NAMESPACE = LabelSelector(
    match_expressions=[LabelRequirement(key=NAME_LABEL, operator="DoesNotExist")]
)
"""A selector no namespace matches (every namespace carries its name label): Kueue's absent
``namespaceSelector``."""

_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_SELECTOR = "spec.namespaceSelector"


def _namespace_selector(
    spec: Mapping[str, Any], where: str, ref: str, report: ImportReport
) -> LabelSelector | None:
    """``namespaceSelector`` -> ``namespace_selector``: ``{}`` admits every namespace (None);
    absent, Kueue's "nothing selector (no namespaces eligible)": :data:`NO_NAMESPACE`."""
    if "namespaceSelector" not in spec or spec["namespaceSelector"] is None:
        report.remark(
            ref,
            "no namespaceSelector: in Kueue that admits no namespace, so work reaching it "
            "through a local queue waits (give namespaceSelector: {} for every namespace)",
        )
        return NO_NAMESPACE
    selector = _read(spec["namespaceSelector"], where, CLUSTER_QUEUE, _SELECTOR, report)
    if not selector:
        report.map(where)
    labels = _mapping(selector.get("matchLabels"), f"{where}.matchLabels", report)
    if "matchLabels" in selector:
        report.map(f"{where}.matchLabels")
    for key, value in labels.items():
        if not isinstance(value, str):
            report.problem(f"{where}.matchLabels.{key}", f"label values are strings, got {value!r}")
    given = _list(selector.get("matchExpressions"), f"{where}.matchExpressions", report)
    requirements = [
        _requirement(item, f"{where}.matchExpressions[{i}]", report) for i, item in enumerate(given)
    ]
    if not labels and not given:
        return None  # {}: every namespace
    return LabelSelector(
        match_labels={str(k): str(v) for k, v in labels.items()},
        match_expressions=[r for r in requirements if r is not None],
    )


def _requirement(value: Any, where: str, report: ImportReport) -> LabelRequirement | None:
    """One ``matchExpressions`` entry (None, with a problem, when invalid)."""
    item = _read(value, where, CLUSTER_QUEUE, f"{_SELECTOR}.matchExpressions[]", report)
    key, operator = item.get("key"), item.get("operator")
    values = _list(item.get("values"), f"{where}.values", report)
    if not isinstance(key, str) or not key:
        report.problem(f"{where}.key", "required (a label key)")
    elif operator not in _SELECTOR_OPERATORS:
        report.problem(f"{where}.operator", f"must be one of {', '.join(_SELECTOR_OPERATORS)}")
    elif operator in ("In", "NotIn") and not values:
        report.problem(f"{where}.values", f"operator {operator} needs at least one value")
    elif operator in ("Exists", "DoesNotExist") and values:
        report.problem(f"{where}.values", f"operator {operator} takes no values")
    else:
        return LabelRequirement(key=key, operator=operator, values=[str(v) for v in values])
    return None


_WHEN_CAN_BORROW: dict[str, Literal["Borrow", "TryNextFlavor"]] = {
    "Borrow": "Borrow",
    "MayStopSearch": "Borrow",  # v1beta2's name for Borrow
    "TryNextFlavor": "TryNextFlavor",
}
_WHEN_CAN_PREEMPT: dict[str, Literal["Preempt", "TryNextFlavor"]] = {
    "Preempt": "Preempt",
    "MayStopSearch": "Preempt",  # v1beta2's name for Preempt
    "TryNextFlavor": "TryNextFlavor",
}


def _fungibility(value: Any, where: str, report: ImportReport) -> FlavorFungibility:
    """``flavorFungibility`` -> :class:`FlavorFungibility`; each field absent is Kueue's
    default (whenCanBorrow Borrow, whenCanPreempt TryNextFlavor)."""
    spec = _read(value, where, CLUSTER_QUEUE, "spec.flavorFungibility", report)
    borrow = spec.get("whenCanBorrow", "Borrow")
    if borrow not in _WHEN_CAN_BORROW:
        report.problem(f"{where}.whenCanBorrow", f"must be one of {', '.join(_WHEN_CAN_BORROW)}")
        borrow = "Borrow"
    preempt = spec.get("whenCanPreempt", "TryNextFlavor")
    if preempt not in _WHEN_CAN_PREEMPT:
        report.problem(f"{where}.whenCanPreempt", f"must be one of {', '.join(_WHEN_CAN_PREEMPT)}")
        preempt = "TryNextFlavor"
    return FlavorFungibility(
        when_can_borrow=_WHEN_CAN_BORROW[borrow], when_can_preempt=_WHEN_CAN_PREEMPT[preempt]
    )


def _admission_scope(value: Any, where: str, report: ImportReport) -> bool:
    """``admissionScope.admissionMode``: UsageBasedAdmissionFairSharing turns admission fair
    sharing on (with the Configuration's ``admissionFairSharing``)."""
    spec = _read(value, where, CLUSTER_QUEUE, "spec.admissionScope", report)
    mode = spec.get("admissionMode")
    if mode is None or mode == "NoAdmissionFairSharing":
        return False
    if mode != ADMISSION_FAIR_SHARING:
        report.problem(
            f"{where}.admissionMode",
            f"must be one of {ADMISSION_FAIR_SHARING}, NoAdmissionFairSharing",
        )
        return False
    return True


def _preemption(
    value: Any, where: str, priority_of: Callable[[int], int], report: ImportReport
) -> tuple[PreemptTeamTasks, ReclaimPolicy, BorrowWithinCohort]:
    """withinClusterQueue, reclaimWithinCohort (both Never when absent, as in Kueue) and
    borrowWithinCohort (its threshold in fleetshare's priority weights)."""
    spec = _read(value, where, CLUSTER_QUEUE, "spec.preemption", report)
    within = _enum(
        PreemptTeamTasks,
        spec.get("withinClusterQueue"),
        PreemptTeamTasks.NEVER,
        f"{where}.withinClusterQueue",
        report,
    )
    reclaim = _enum(
        ReclaimPolicy,
        spec.get("reclaimWithinCohort"),
        ReclaimPolicy.NEVER,
        f"{where}.reclaimWithinCohort",
        report,
    )
    borrow = _borrow_within(
        spec.get("borrowWithinCohort"), f"{where}.borrowWithinCohort", priority_of, report
    )
    if borrow.policy != BorrowWithinCohortPolicy.NEVER and reclaim == ReclaimPolicy.NEVER:
        report.problem(
            f"{where}.borrowWithinCohort.policy",
            "needs reclaimWithinCohort other than Never (Kueue rejects this ClusterQueue)",
        )
        borrow = BorrowWithinCohort()
    return within, reclaim, borrow


def _borrow_within(
    value: Any, where: str, priority_of: Callable[[int], int], report: ImportReport
) -> BorrowWithinCohort:
    """``borrowWithinCohort``: policy (Never when absent) and maxPriorityThreshold, a Kueue
    priority value turned into the highest fleetshare weight of a class at or below it."""
    spec = _read(value, where, CLUSTER_QUEUE, "spec.preemption.borrowWithinCohort", report)
    policy = _enum(
        BorrowWithinCohortPolicy,
        spec.get("policy"),
        BorrowWithinCohortPolicy.NEVER,
        f"{where}.policy",
        report,
    )
    threshold = spec.get("maxPriorityThreshold")
    if threshold is None:
        return BorrowWithinCohort(policy=policy)
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        report.problem(f"{where}.maxPriorityThreshold", f"must be an integer, got {threshold!r}")
        return BorrowWithinCohort(policy=policy)
    weight = priority_of(threshold)
    if weight != threshold:
        report.remark(
            f"{where}.maxPriorityThreshold",
            f"priority {threshold} is weight {weight} on fleetshare's rescaled priorities",
        )
    return BorrowWithinCohort(policy=policy, max_priority_threshold=weight)


def _weight(value: Any, where: str, table: FieldTable, report: ImportReport) -> float:
    """``spec.fairSharing.weight`` (a quantity such as ``2`` or ``500m``); 1 when absent."""
    spec = _read(value, where, table, "spec.fairSharing", report)
    if spec.get("weight") is None:
        return 1.0
    amount = _quantity(spec["weight"], f"{where}.weight", report)
    return parse_quantity(amount) / MILLI if amount is not None else 1.0


def _local_queues(
    objects: Iterable[_Object], cluster_queues: set[str], report: ImportReport
) -> dict[str, _LocalQueues]:
    """ClusterQueue name -> its LocalQueues as ``namespace/name``, with their admission fair
    sharing weights (``fairSharing.weight``) and stop policies (``stopPolicy``) where given."""
    out: dict[str, _LocalQueues] = {}
    for obj in objects:
        spec, where = _spec(obj, report), f"{obj.ref}.spec"
        weight: float | None = None
        if spec.get("fairSharing") is not None:
            weight = _weight(spec["fairSharing"], f"{where}.fairSharing", LOCAL_QUEUE, report)
        stop = _enum(
            StopPolicy, spec.get("stopPolicy"), StopPolicy.NONE, f"{where}.stopPolicy", report
        )
        target = spec.get("clusterQueue")
        if not isinstance(target, str) or not target:
            report.problem(f"{where}.clusterQueue", "required")
        elif target not in cluster_queues:
            report.note(
                f"{where}.clusterQueue", f"ClusterQueue {target!r} is not declared; ignored"
            )
        else:
            queues = out.setdefault(target, _LocalQueues())
            name = f"{obj.namespace}/{obj.name}"
            queues.names.append(name)
            if weight is not None:
                queues.weights[name] = weight
            if stop != StopPolicy.NONE:
                queues.stops[name] = stop
    return out


def _isolated(group: Group) -> Group:
    """A root cohort: in Kueue, separate cohort trees never lend to or borrow from each other."""
    return group.model_copy(
        update={
            "borrow_limits": [BorrowLimit(absolute=0)],
            "lending_limits": [LendingLimit(absolute=0)],
        }
    )


def _undeclared_groups(groups: list[Group], teams: list[Team], report: ImportReport) -> list[Group]:
    """Groups for cohorts that are named (by a queue or as a parent) but not declared."""
    declared = {g.name for g in groups}
    referrers = [(g.parent, f"Cohort/{g.name}") for g in groups]
    referrers += [(t.group, f"ClusterQueue/{t.name}") for t in teams]
    added: dict[str, Group] = {}
    for name, referrer in referrers:
        if name is None or name in declared or name in added:
            continue
        added[name] = Group(name=name)
        note = f"named by {referrer} but not declared; imported as a group with no quota"
        report.note(f"Cohort/{name}", note)
    return list(added.values())


def _priority_classes(
    objects: Iterable[_Object], report: ImportReport
) -> tuple[list[PriorityClass], Callable[[int], int]]:
    """WorkloadPriorityClasses; values outside 0–100 are rescaled (noted with the mapping).
    Also: a Kueue priority value (a threshold) -> the weight of the highest class at or below
    it (-1 when none is)."""
    values: dict[str, int] = {}
    for obj in objects:
        value = obj.doc.get("value")
        if isinstance(value, bool) or not isinstance(value, int):
            report.problem(f"{obj.ref}.value", f"required integer, got {value!r}")
        else:
            values[obj.name] = value
    if len(values) > MAX_PRIORITY_CLASSES:
        reason = f"fleetshare allows at most {MAX_PRIORITY_CLASSES} classes; found {len(values)}"
        report.problem("WorkloadPriorityClass", reason)
    weights = values
    rescaled = any(not 0 <= v <= 100 for v in values.values())
    if rescaled:
        weights = rescale_priorities(values)
        mapping = ", ".join(
            f"{n} {values[n]}→{w}" for n, w in sorted(weights.items(), key=lambda i: -values[i[0]])
        )
        report.notes.append(
            "WorkloadPriorityClass: values fall outside fleetshare's 0–100 weights; rescaled "
            f"keeping their order: {mapping} (work without a class keeps priority 0)"
        )
    # Kueue priority values -> fleetshare weights (work without a class has priority 0)
    levels = {values[name]: weights[name] for name in values}
    levels[0] = rescale_priorities({**values, "": 0})[""] if rescaled else 0

    def priority_of(threshold: int) -> int:
        if not rescaled:
            return threshold
        at_or_below = [weight for value, weight in levels.items() if value <= threshold]
        return max(at_or_below, default=-1)

    classes = [PriorityClass(name=name, weight=weight) for name, weight in weights.items()]
    return classes, priority_of


def rescale_priorities(values: Mapping[str, int]) -> dict[str, int]:
    """Spread priority values evenly over 0–100 by rank, keeping order and distinctness.

    Kueue gives work without a priority class priority 0, so 0 takes part in the ranking and
    keeps weight 0 whenever no value is negative: ``{"high": 1000, "medium": 100, "low": 10}``
    -> ``{"high": 100, "medium": 67, "low": 33}``.
    """
    levels = sorted(set(values.values()) | {0})
    step = 100 / max(len(levels) - 1, 1)
    weight = {level: round(rank * step) for rank, level in enumerate(levels)}
    return {name: weight[value] for name, value in values.items()}


@dataclass
class _Resources:
    """The Configuration's ``resources``: transformations and excluded resource prefixes."""

    transformations: list[ResourceTransformation] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)


def _configuration(
    objects: list[_Object], report: ImportReport
) -> tuple[bool, AdmissionFairSharing | None, _Resources]:
    """The kueue Configuration's ``fairSharing``, ``admissionFairSharing`` and ``resources``."""
    if len(objects) > 1:
        report.problem(objects[1].ref, "only one kueue Configuration may be given")
    if not objects:
        return False, None, _Resources()
    obj = objects[0]
    admission = None
    if obj.doc.get("admissionFairSharing") is not None:
        where = f"{obj.ref}.admissionFairSharing"
        admission = _admission_fair_sharing(obj.doc["admissionFairSharing"], where, report)
    resources = _resources(obj.doc.get("resources"), f"{obj.ref}.resources", report)
    return _fair_share(obj, report), admission, resources


_STRATEGIES = ("Retain", "Replace")


def _resources(value: Any, where: str, report: ImportReport) -> _Resources:
    """``resources``: ``excludeResourcePrefixes`` and ``transformations`` (input, strategy,
    outputs, multiplyBy), as Kueue applies them to every workload's requests."""
    spec = _read(value, where, CONFIGURATION, "resources", report)
    out = _Resources()
    for i, prefix in enumerate(
        _list(spec.get("excludeResourcePrefixes"), f"{where}.excludeResourcePrefixes", report)
    ):
        if not isinstance(prefix, str) or not prefix:
            report.problem(f"{where}.excludeResourcePrefixes[{i}]", "a resource name prefix")
        else:
            out.excluded.append(prefix)
    seen: set[str] = set()
    for i, item in enumerate(
        _list(spec.get("transformations"), f"{where}.transformations", report)
    ):
        found = _transformation(item, f"{where}.transformations[{i}]", report)
        if found is None:
            continue
        if found.input in seen:
            report.problem(
                f"{where}.transformations[{i}].input", f"{found.input!r} is transformed twice"
            )
            continue
        seen.add(found.input)
        out.transformations.append(found)
    return out


def _transformation(value: Any, where: str, report: ImportReport) -> ResourceTransformation | None:
    """One ``transformations`` entry (None, with a problem, when invalid)."""
    item = _read(value, where, CONFIGURATION, "resources.transformations[]", report)
    name = item.get("input")
    if not isinstance(name, str) or not name:
        report.problem(f"{where}.input", "required (a resource name)")
        return None
    strategy = item.get("strategy", "Retain")
    if strategy not in _STRATEGIES:
        report.problem(f"{where}.strategy", f"must be one of {', '.join(_STRATEGIES)}")
        return None
    outputs: dict[str, Quantity] = {}
    given = _mapping(item.get("outputs"), f"{where}.outputs", report)
    if "outputs" in item:
        report.map(f"{where}.outputs")
    for output, amount in given.items():
        quantity = _quantity(amount, f"{where}.outputs.{output}", report)
        if quantity is None:
            return None
        outputs[str(output)] = quantity
    multiply_by = item.get("multiplyBy")
    if multiply_by is not None and (not isinstance(multiply_by, str) or not multiply_by):
        report.problem(f"{where}.multiplyBy", "a resource name")
        return None
    return ResourceTransformation(
        input=name, strategy=strategy, outputs=outputs, multiply_by=multiply_by
    )


def _duration(value: Any, where: str, report: ImportReport) -> float | None:
    """A Go duration (``168h``, ``5m``, ``1h30m``, ``10s``) in seconds."""
    text = value if isinstance(value, str) else ""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        report.problem(where, f"not a duration such as 168h or 5m: {value!r}")
        return None
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in parts)


def _admission_fair_sharing(
    value: Any, where: str, report: ImportReport
) -> AdmissionFairSharing | None:
    """``admissionFairSharing``: half-life, sampling interval and resource weights."""
    spec = _read(value, where, CONFIGURATION, "admissionFairSharing", report)
    settings: dict[str, Any] = {}
    if spec.get("usageHalfLifeTime") is not None:
        half_life = _duration(spec["usageHalfLifeTime"], f"{where}.usageHalfLifeTime", report)
        settings["usage_half_life_seconds"] = half_life
    else:
        report.notes.append(
            f"{where}: no usageHalfLifeTime, so usage is forgotten at once (as in Kueue)"
        )
    if spec.get("usageSamplingInterval") is not None:
        path = f"{where}.usageSamplingInterval"
        settings["usage_sampling_seconds"] = _duration(spec["usageSamplingInterval"], path, report)
    weights = _mapping(spec.get("resourceWeights"), f"{where}.resourceWeights", report)
    if "resourceWeights" in spec:
        report.map(f"{where}.resourceWeights")
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
            report.problem(f"{where}.resourceWeights.{name}", f"not a weight: {weight!r}")
    settings["resource_weights"] = {str(k): float(v) for k, v in weights.items()}
    if any(v is None for v in settings.values()) or report.problems:
        return None
    try:
        return AdmissionFairSharing.model_validate(settings)
    except ValidationError as exc:
        for path, reason in validation_problems(exc, settings):
            report.problem(f"{where}.{path}", reason)
        return None


def _queue_settings_notes(
    teams: list[Team],
    fair_share: bool,
    admission: AdmissionFairSharing | None,
    report: ImportReport,
) -> None:
    """Queue settings that the cluster-wide ones switch off, as in Kueue."""
    for team in teams:
        ref = f"ClusterQueue/{team.name}.spec"
        if fair_share and team.borrow_within_cohort.policy != BorrowWithinCohortPolicy.NEVER:
            report.remark(
                f"{ref}.preemption.borrowWithinCohort",
                "no effect with fair sharing on (in Kueue it belongs to classic preemption)",
            )
        if team.admission_fair_sharing and admission is None:
            report.remark(
                f"{ref}.admissionScope",
                "no effect without the Configuration's admissionFairSharing (as in Kueue)",
            )


def _fair_share(obj: _Object, report: ImportReport) -> bool:
    """Configuration ``fairSharing``: on when present (``enable: false`` turns it off)."""
    if obj.doc.get("fairSharing") is None:
        return False
    where = f"{obj.ref}.fairSharing"
    spec = _read(obj.doc["fairSharing"], where, CONFIGURATION, "fairSharing", report)
    enable = spec.get("enable", True)  # config v1beta2 dropped `enable`: the section turns it on
    if not isinstance(enable, bool):
        report.problem(f"{where}.enable", "must be true or false")
        return False
    return enable


def _cluster_note(fair_share: bool, configured: bool) -> str:
    """How the cluster-wide settings were chosen."""
    source = "from the kueue Configuration" if configured else "no kueue Configuration given"
    return (
        f"cluster: fair_share {'on' if fair_share else 'off'} ({source}); idle_resource_sharing "
        "off (in Kueue only quota that queues lend is borrowable); fleetshare's extras off, as "
        "Kueue has none: starvation_guard_seconds null (set it to hold back resources for "
        "work pending that long), preemption.min_runtime_seconds and reclaim_grace_seconds 0"
    )
