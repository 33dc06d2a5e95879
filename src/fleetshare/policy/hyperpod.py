"""Import SageMaker HyperPod task governance (JSON) into a fleetshare :class:`Policy`.

Accepted input, as JSON text or parsed: a ``CreateClusterSchedulerConfig`` request or
``DescribeClusterSchedulerConfig`` response, a ``CreateComputeQuota`` request or
``DescribeComputeQuota`` response (or a ``ListComputeQuotas`` summary), a list of any of those,
or a bundle ``{"SchedulerConfig" | "ClusterSchedulerConfig": ..., "ComputeQuotas": [...]}``.

Mapping, HyperPod -> fleetshare:

- ``SchedulerConfig.PriorityClasses[{Name, Weight}]`` -> ``cluster.priority_classes``;
  ``FairShare`` (default Enabled) -> ``cluster.fair_share``; ``IdleResourceSharing`` (default
  Disabled) -> ``cluster.idle_resource_sharing``.
- One compute quota -> one :class:`Team`: ``ComputeQuotaTarget.TeamName`` and
  ``FairShareWeight`` (default 0, HyperPod's lowest); each ``ComputeQuotaResources`` entry ->
  :class:`QuotaEntry` on flavor = ``InstanceType`` (Count / Accelerators / VCpu / MemoryInGiB /
  AcceleratorPartition kept as given; the engine resolves them against the catalog);
  ``ResourceSharingConfig.Strategy`` (default LendAndBorrow) -> ``sharing``; ``BorrowLimit``
  (default 50 for LendAndBorrow) -> ``BorrowLimit(percent_of_idle=...)`` as the API model
  words it (above 100 it never binds), or with ``borrow_limit_reading="quota"``
  ``percent_of_quota``, as HyperPod's walkthrough behaves; ``AbsoluteBorrowLimits`` ->
  absolute limits per (resource, instance type); ``PreemptTeamTasks`` (default LowerPriority);
  ``ActivationState`` Disabled -> ``enabled=False`` (not in force: the team holds no quota,
  its capacity is unallocated, its tasks wait); local queue
  ``hyperpod-ns-<team>/hyperpod-ns-<team>-localqueue``.
- Every instance type of the cluster is governed (``cluster.unnamed_capacity: unallocated``,
  said in a note): a team holds only what its allocations name; the capacity of an instance
  type no allocation names is unallocated idle compute, usable only by borrowing.
- ``InstanceType`` must be in the instance catalog (``ml.`` names map to EC2 names);
  ``Accelerators`` need a type with accelerators and ``AcceleratorPartition`` a MIG profile its
  GPUs offer. A quota above one instance (16 accelerators of an 8-GPU type) is valid: HyperPod
  allocates per instance group ("16 out of 32 total accelerators"), so it is that many
  instances' worth.
- An absolute borrow limit given as ``Count`` (whole instances) becomes per-resource limits of
  that many instances' allocatable (accelerators, vCPU, memory), as a quota ``Count`` does.

- A Describe or List entry whose ``Status`` is CreateFailed, CreateRollbackFailed or Deleted
  is not on the cluster: noted and not imported. An entry with only ``InstanceType`` (the one
  member ComputeQuotaResourceConfig requires) holds none of that type (``count: 0``), noted.

Which members are read, refused or bookkeeping is decided by the tables of
:mod:`fleetshare.policy.hyperpod_fields` (docs/fields.md lists them): refused and unknown
members go to ``Policy.notes``; bookkeeping (names, ARNs, ids, versions, times, tags,
StatusDetails) carries no policy and is skipped without a note. Invalid values raise
:class:`PolicyError` with JSON paths, e.g.
``("ComputeQuotas[1].ComputeQuotaConfig.ResourceSharingConfig.Strategy", "must be one of Lend,
DontLend, LendAndBorrow")``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from fleetshare.fields import FieldTable, FieldView, parent
from fleetshare.inputs import MAX_COUNT, InputError, parse_json, value_kind
from fleetshare.model.catalog import (
    InstanceType,
    UnknownInstanceTypeError,
    ec2_name,
    load_catalog,
    mig_profiles,
)
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import CPU, GPU, MEMORY, MIG_PREFIX, NEURON
from fleetshare.policy.hyperpod_fields import BUNDLE, COMPUTE_QUOTA, SCHEDULER_CONFIG
from fleetshare.policy.import_report import ImportReport
from fleetshare.policy.reading import DEFAULT_READING, READINGS, BorrowLimitReading
from fleetshare.policy.schema import (
    MAX_AMOUNT,
    AcceleratorPartition,
    BorrowLimit,
    ClusterPolicy,
    Policy,
    PolicyError,
    PreemptTeamTasks,
    PriorityClass,
    QuotaEntry,
    SharingStrategy,
    Team,
    validation_problems,
)

__all__ = [
    "DEFAULT_READING",
    "BorrowLimitReading",
    "accelerator_resource",
    "import_hyperpod",
    "local_queue_name",
]

SOURCE = "HyperPod task governance config"
DEFAULT_BORROW_LIMIT = 50
MAX_PRIORITY_CLASSES = 10
UNNAMED_NOTE = (
    "cluster: every instance type of the cluster is governed (unnamed_capacity: unallocated); "
    "one no compute quota names is unallocated idle compute, which a team uses only by "
    "borrowing (IdleResourceSharing Enabled, strategy LendAndBorrow, within its borrow limits)"
)
MAX_QUOTA_RESOURCES = 15

_STATES = ("Enabled", "Disabled")
_STRATEGIES = tuple(s.value for s in SharingStrategy)
_PREEMPT = ("Never", "LowerPriority")
_SETTINGS = tuple(
    r.path.split(".")[1] for r in SCHEDULER_CONFIG.rules if parent(r.path) == "SchedulerConfig"
)
"""The members of SchedulerConfig: a document holding one of them is the settings."""
_QUOTA_FIELDS = ("ComputeQuotaConfig", "ComputeQuotaTarget", "ActivationState")
_BUNDLE_QUOTAS = ("ComputeQuotas", "ComputeQuotaSummaries")
_BUNDLE_SCHEDULER = ("SchedulerConfig", "ClusterSchedulerConfig")
_SUMMARIES = ("ClusterSchedulerConfigSummaries",)
"""A bundle member that holds no policy (refused by the bundle's table)."""
_CONFIG = "ComputeQuotaConfig"
_RESOURCES = f"{_CONFIG}.ComputeQuotaResources[]"
_SHARING = f"{_CONFIG}.ResourceSharingConfig"
_ABSOLUTE = f"{_SHARING}.AbsoluteBorrowLimits[]"
_AMOUNTS = ("Count", "Accelerators", "VCpu", "MemoryInGiB", "AcceleratorPartition")
_MIG_PROFILE = re.compile(r"^(?:nvidia\.com/)?(?:mig-)?([1-9]\d*g\.[1-9]\d*gb)$")


@dataclass
class _Sources:
    """The documents found in the input, each with its JSON path."""

    schedulers: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    quotas: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True)
class _Amounts:
    """One ComputeQuotaResourceConfig, validated."""

    instance_type: str
    count: int | None = None
    accelerators: int | None = None
    vcpu: float | None = None
    memory_gib: float | None = None
    partition: AcceleratorPartition | None = None
    instance: InstanceType | None = None
    """The catalog's entry for ``instance_type``."""

    @property
    def finer(self) -> bool:
        """Some amount finer than whole instances is given."""
        return any(
            amount is not None
            for amount in (self.accelerators, self.vcpu, self.memory_gib, self.partition)
        )


def import_hyperpod(
    source: str | dict[str, Any] | list[Any],
    *,
    borrow_limit_reading: BorrowLimitReading = DEFAULT_READING,
    report: ImportReport | None = None,
) -> Policy:
    """Turn HyperPod cluster scheduler config and compute quotas into a fleetshare policy.

    ``borrow_limit_reading`` says how to read BorrowLimit: ``"idle"`` (default) as a
    percentage of idle compute, as the API model words it; ``"quota"`` as a percentage of the
    team's own quota, which is how HyperPod's public walkthrough behaves. ``report``, if
    given, is filled with the path of every member and where it went, also when the import
    fails.
    """
    if borrow_limit_reading not in READINGS:
        raise ValueError(
            f"borrow_limit_reading must be 'idle' or 'quota', not {borrow_limit_reading!r}"
        )
    report = report if report is not None else ImportReport()
    sources = _Sources()
    _collect(_parse(source), "", sources, report)
    cluster = _cluster(sources.schedulers, report)
    report.notes.append(UNNAMED_NOTE)
    teams = _teams(sources.quotas, borrow_limit_reading, report)
    if report.problems:
        raise PolicyError(report.problems, SOURCE)
    try:
        return Policy(cluster=cluster, teams=teams, notes=report.notes)
    except ValidationError as exc:
        raise PolicyError(validation_problems(exc, {}), SOURCE) from None


def local_queue_name(team: str) -> str:
    """The LocalQueue HyperPod creates for a team, as ``namespace/name``."""
    return f"hyperpod-ns-{team}/hyperpod-ns-{team}-localqueue"


# --- input shapes ------------------------------------------------------------------------------


def _parse(source: str | dict[str, Any] | list[Any]) -> Any:
    if not isinstance(source, str):
        return source
    try:
        return parse_json(source, SOURCE)
    except InputError as exc:
        raise PolicyError([("(top level)", exc.why)], SOURCE) from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _collect(data: Any, path: str, sources: _Sources, report: ImportReport) -> None:
    """Sort the input's documents into scheduler configs and compute quotas."""
    if isinstance(data, list):
        for index, item in enumerate(data):
            _collect(item, f"{path}[{index}]", sources, report)
    elif not isinstance(data, dict):
        report.problem(path or "(top level)", f"expected a JSON object, got {_json_kind(data)}")
    elif any(key in data for key in _QUOTA_FIELDS):
        sources.quotas.append((path, data))
    elif any(key in data for key in (*_BUNDLE_QUOTAS, *_SUMMARIES, "ClusterSchedulerConfig")):
        _collect_bundle(data, path, sources, report)
    elif "SchedulerConfig" in data or any(key in data for key in _SETTINGS):
        sources.schedulers.append((path, data))
    else:
        report.problem(
            path or "(top level)",
            "not a cluster scheduler config, compute quota or bundle of them",
        )


def _collect_bundle(
    data: dict[str, Any], path: str, sources: _Sources, report: ImportReport
) -> None:
    """``{"SchedulerConfig" | "ClusterSchedulerConfig": ..., "ComputeQuotas": [...]}``, or a
    ListComputeQuotas response."""
    bundle = report.fields(data, path, BUNDLE)
    for key in _BUNDLE_SCHEDULER:
        if key in bundle:
            sources.schedulers.append(
                (_join(path, key), _object(bundle[key], _join(path, key), report))
            )
    for key in _BUNDLE_QUOTAS:
        if key in bundle:
            where = _join(path, key)
            if not isinstance(bundle[key], list):
                report.problem(where, "expected a list of compute quotas")
                continue
            for index, quota in enumerate(bundle[key]):
                item = f"{where}[{index}]"
                sources.quotas.append((item, _object(quota, item, report)))


# --- value helpers -----------------------------------------------------------------------------


def _json_kind(value: Any) -> str:
    """What a JSON reader calls ``value``'s type (:func:`fleetshare.inputs.value_kind`)."""
    return value_kind(value, "an object")


def _read(value: Any, path: str, table: FieldTable, scope: str, report: ImportReport) -> FieldView:
    """``value`` as a JSON object (``{}`` when absent; anything else is a problem), its members
    accounted for by ``table`` at ``scope`` (:meth:`ImportReport.fields`), to be read through
    the view returned."""
    return report.fields(_object(value, path, report), path, table, scope)


def _object(value: Any, path: str, report: ImportReport) -> dict[str, Any]:
    """``value`` as a JSON object (``{}`` when absent); anything else is a problem."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        report.problem(path, f"expected a JSON object, got {_json_kind(value)}")
        return {}
    return value


def _integer(value: Any, path: str, low: int, high: int, report: ImportReport) -> int | None:
    """An integer in ``[low, high]``, or ``None`` with a problem."""
    if isinstance(value, bool) or not isinstance(value, int):
        report.problem(path, f"must be an integer from {low} to {high}, got {value!r}")
        return None
    if not low <= value <= high:
        report.problem(path, f"must be from {low} to {high}, got {value}")
        return None
    return value


def _number(value: Any, path: str, report: ImportReport) -> float | None:
    """A non-negative number, or ``None`` with a problem."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        report.problem(path, f"must be a non-negative number, got {value!r}")
        return None
    if value > MAX_AMOUNT:
        report.problem(path, f"must be at most {MAX_AMOUNT:g}, got {value!r}")
        return None
    return float(value)


def _choice(
    value: Any, default: str, choices: tuple[str, ...], path: str, report: ImportReport
) -> str:
    """One of ``choices`` (``default`` when absent or invalid, with a problem if invalid)."""
    if value is None:
        return default
    if value not in choices:
        report.problem(path, f"must be one of {', '.join(choices)}")
        return default
    return str(value)


def _name(value: Any, path: str, report: ImportReport) -> str | None:
    if not isinstance(value, str) or not value:
        report.problem(path, "required (a non-empty name)")
        return None
    return value


# --- cluster scheduler config ------------------------------------------------------------------


def _cluster(schedulers: list[tuple[str, dict[str, Any]]], report: ImportReport) -> ClusterPolicy:
    """The cluster policy; HyperPod's defaults when no scheduler config in force is given."""
    in_force = [found for path, doc in schedulers if (found := _settings(path, doc, report))]
    for path, _, _ in in_force[1:]:
        report.problem(
            path,
            f"only one cluster scheduler config is allowed ({in_force[0][0]!r} is the first)",
        )
    if not in_force:
        report.notes.append(
            "cluster: no cluster scheduler config in force given; HyperPod's defaults used "
            "(FairShare Enabled, IdleResourceSharing Disabled, no priority classes)"
        )
        return ClusterPolicy(
            fair_share=True, idle_resource_sharing=False, unnamed_capacity="unallocated"
        )
    _, path, settings = in_force[0]
    fair = _choice(settings.get("FairShare"), "Enabled", _STATES, _join(path, "FairShare"), report)
    idle_path = _join(path, "IdleResourceSharing")
    idle = _choice(settings.get("IdleResourceSharing"), "Disabled", _STATES, idle_path, report)
    return ClusterPolicy(
        priority_classes=_priority_classes(settings.get("PriorityClasses"), path, report),
        fair_share=fair == "Enabled",
        idle_resource_sharing=idle == "Enabled",
        unnamed_capacity="unallocated",
    )


def _settings(
    path: str, doc: dict[str, Any], report: ImportReport
) -> tuple[str, str, FieldView] | None:
    """A cluster scheduler config's path, its settings' path and its settings (None when the
    config is not in force): a Create/Update request or a Describe response holds them in
    ``SchedulerConfig``, a bare document is the settings."""
    if "SchedulerConfig" not in doc:
        return path, path, report.fields(doc, path, SCHEDULER_CONFIG, "SchedulerConfig")
    top = report.fields(doc, path, SCHEDULER_CONFIG)
    if not _in_force(top, path, report):
        return None
    where = _join(path, "SchedulerConfig")
    settings = _read(top["SchedulerConfig"], where, SCHEDULER_CONFIG, "SchedulerConfig", report)
    return path, where, settings


def _priority_classes(value: Any, path: str, report: ImportReport) -> list[PriorityClass]:
    """``PriorityClasses[{Name, Weight}]``: at most 10, names unique, weights 0–100."""
    where = _join(path, "PriorityClasses")
    if value is None:
        return []
    if not isinstance(value, list):
        report.problem(where, "expected a list of {Name, Weight}")
        return []
    if len(value) > MAX_PRIORITY_CLASSES:
        report.problem(where, f"at most {MAX_PRIORITY_CLASSES} priority classes, got {len(value)}")
    classes: dict[str, PriorityClass] = {}
    for index, item in enumerate(value):
        item_path = f"{where}[{index}]"
        item = _read(item, item_path, SCHEDULER_CONFIG, "SchedulerConfig.PriorityClasses[]", report)
        name = _name(item.get("Name"), f"{item_path}.Name", report)
        weight = _integer(item.get("Weight"), f"{item_path}.Weight", 0, 100, report)
        if name in classes:
            report.problem(f"{item_path}.Name", f"priority class {name!r} is defined twice")
        elif name is not None and weight is not None:
            classes[name] = PriorityClass(name=name, weight=weight)
    return list(classes.values())


# --- compute quotas ----------------------------------------------------------------------------


def _teams(
    quotas: list[tuple[str, dict[str, Any]]], reading: BorrowLimitReading, report: ImportReport
) -> list[Team]:
    """One team per compute quota; a team named twice is a problem."""
    teams: dict[str, tuple[str, Team]] = {}
    for path, doc in quotas:
        team = _team(path, doc, reading, report)
        if team is None:
            continue
        if team.name in teams:
            first = teams[team.name][0]
            where = _join(path, "ComputeQuotaTarget.TeamName")
            report.problem(where, f"team {team.name!r} already has a compute quota at {first}")
        teams[team.name] = (path, team)
    if any(team.sharing is SharingStrategy.LEND_AND_BORROW for _, team in teams.values()):
        report.notes.append(_reading_note(reading))
    return [team for _, team in teams.values()]


def _reading_note(reading: BorrowLimitReading) -> str:
    if reading == "quota":
        return (
            "BorrowLimit: read as a percentage of each team's own quota (as HyperPod's "
            "walkthrough behaves; borrow_limit_reading='quota'); the API model reads it as a "
            "percentage of idle compute, the default"
        )
    return (
        'BorrowLimit: read as a percentage of idle compute, as the API model words it ("1 - '
        '500 percent of idle compute that the team is allowed to borrow"); '
        "borrow_limit_reading='quota' reads it as a percentage of the team's own quota, as "
        "HyperPod's walkthrough behaves"
    )


def _team(
    path: str, doc: dict[str, Any], reading: BorrowLimitReading, report: ImportReport
) -> Team | None:
    """One compute quota -> a Team (``None`` when it has no usable team name)."""
    top = report.fields(doc, path, COMPUTE_QUOTA)
    if not _in_force(top, path, report):
        return None
    name, weight = _target(top.get("ComputeQuotaTarget"), _join(path, "ComputeQuotaTarget"), report)
    where = _join(path, "ComputeQuotaConfig")
    config = _read(top.get("ComputeQuotaConfig"), where, COMPUTE_QUOTA, _CONFIG, report)
    quota = _quota(config.get("ComputeQuotaResources"), f"{where}.ComputeQuotaResources", report)
    sharing, limits = _sharing(config.get("ResourceSharingConfig"), where, reading, report)
    preempt_path = f"{where}.PreemptTeamTasks"
    preempt = _choice(
        config.get("PreemptTeamTasks"), "LowerPriority", _PREEMPT, preempt_path, report
    )
    state_path = _join(path, "ActivationState")
    state = _choice(top.get("ActivationState"), "Enabled", _STATES, state_path, report)
    if name is None:
        return None
    if state == "Disabled":
        report.note(
            state_path,
            f"Disabled: the allocation is not in force; team {name} holds no quota (its "
            "capacity is unallocated) and its tasks wait",
        )
    return Team(
        name=name,
        quota=quota,
        sharing=sharing,
        borrow_limits=limits,
        fair_share_weight=weight,
        preempt_team_tasks=PreemptTeamTasks(preempt),
        enabled=state == "Enabled",
        local_queues=[local_queue_name(name)],
    )


def _target(value: Any, path: str, report: ImportReport) -> tuple[str | None, int]:
    """``ComputeQuotaTarget``: team name and fair-share weight (0–100, HyperPod's default 0)."""
    target = _read(value, path, COMPUTE_QUOTA, "ComputeQuotaTarget", report)
    name = _name(target.get("TeamName"), f"{path}.TeamName", report)
    weight = target.get("FairShareWeight")
    if weight is None:
        return name, 0
    return name, _integer(weight, f"{path}.FairShareWeight", 0, 100, report) or 0


_NOT_IN_FORCE = ("CreateFailed", "CreateRollbackFailed", "Deleted")
"""Statuses (SchedulerResourceStatus) of a config that does not exist on the cluster."""


def _in_force(doc: Mapping[str, Any], path: str, report: ImportReport) -> bool:
    """Whether a Describe/List entry is in force on the cluster: one whose creation failed or
    that was deleted is not (noted, not imported); another failed status is imported as
    written, and noted."""
    status = doc.get("Status")
    if not isinstance(status, str) or not ("Failed" in status or status.startswith("Delet")):
        return True
    reason = f" ({doc['FailureReason']})" if doc.get("FailureReason") else ""
    if status in _NOT_IN_FORCE:
        report.note(_join(path, "Status"), f"{status}{reason}: not in force, so not imported")
        return False
    report.note(_join(path, "Status"), f"{status}{reason}: still in force; imported as written")
    return True


def _quota(value: Any, path: str, report: ImportReport) -> list[QuotaEntry]:
    """``ComputeQuotaResources`` -> quota entries, one per entry, on flavor = InstanceType."""
    if value is None:
        return []
    if not isinstance(value, list):
        report.problem(path, "expected a list of ComputeQuotaResourceConfig")
        return []
    if len(value) > MAX_QUOTA_RESOURCES:
        report.problem(path, f"at most {MAX_QUOTA_RESOURCES} entries, got {len(value)}")
    entries = []
    for index, item in enumerate(value):
        amounts = _amounts(item, f"{path}[{index}]", _RESOURCES, report)
        if amounts is not None:
            named_only = amounts.count is None and not amounts.finer
            entries.append(
                QuotaEntry(
                    flavor=amounts.instance_type,
                    count=0 if named_only else amounts.count,
                    accelerators=amounts.accelerators,
                    vcpu=amounts.vcpu,
                    memory_gib=amounts.memory_gib,
                    accelerator_partition=amounts.partition,
                )
            )
    return entries


def _amounts(value: Any, path: str, scope: str, report: ImportReport) -> _Amounts | None:
    """A ComputeQuotaResourceConfig (at ``scope`` of the compute quota's table): InstanceType
    plus Count, or any of the finer amounts."""
    if not isinstance(value, dict):
        report.problem(path, f"expected a JSON object, got {_json_kind(value)}")
        return None
    item = report.fields(value, path, COMPUTE_QUOTA, scope)
    before = len(report.problems)
    instance_type = _name(item.get("InstanceType"), f"{path}.InstanceType", report)
    instance = _instance(instance_type, f"{path}.InstanceType", report)
    given = [key for key in _AMOUNTS if item.get(key) is not None]
    if not given:
        report.note(
            path,
            "only InstanceType (the one member the API model requires): no amount of "
            f"{instance_type} is given, so none is held or limited",
        )
    elif "Count" in given and len(given) > 1:
        reason = "Count gives whole instances; do not combine it with other amounts"
        report.problem(f"{path}.Count", reason)
    amounts = _Amounts(
        instance_type=instance_type or "",
        count=_optional_int(item.get("Count"), f"{path}.Count", report),
        accelerators=_optional_int(item.get("Accelerators"), f"{path}.Accelerators", report),
        vcpu=_optional_number(item.get("VCpu"), f"{path}.VCpu", report),
        memory_gib=_optional_number(item.get("MemoryInGiB"), f"{path}.MemoryInGiB", report),
        partition=_partition(
            item.get("AcceleratorPartition"), f"{path}.AcceleratorPartition", scope, report
        ),
        instance=instance,
    )
    if instance is not None:
        _fits_instance(amounts, instance, path, report)
    return amounts if len(report.problems) == before else None


def _instance(name: str | None, path: str, report: ImportReport) -> InstanceType | None:
    """The catalog's instance type called ``name`` (a problem when it has none)."""
    if name is None:
        return None
    try:
        return load_catalog().get(name)
    except UnknownInstanceTypeError as exc:
        report.problem(path, str(exc))
        return None


def _fits_instance(
    amounts: _Amounts, instance: InstanceType, path: str, report: ImportReport
) -> None:
    """Amounts the instance type cannot supply at all: accelerators of a type without any,
    a MIG profile its GPUs do not offer."""
    name = amounts.instance_type
    accel = instance.accelerator_resource
    if amounts.accelerators is not None and not instance.allocatable.get(accel or "", 0):
        report.problem(f"{path}.Accelerators", f"instance type {name} has no accelerators")
    if amounts.partition is not None:
        profile = amounts.partition.type.removeprefix("mig-")
        offered = [p.removeprefix(MIG_PREFIX) for p in mig_profiles(instance)]
        if profile not in offered:
            shown = ", ".join(offered) or "none"
            report.problem(
                f"{path}.AcceleratorPartition.Type",
                f"instance type {name} has no MIG profile {profile} (its GPUs offer: {shown})",
            )


def _optional_int(value: Any, path: str, report: ImportReport) -> int | None:
    return None if value is None else _integer(value, path, 0, MAX_COUNT, report)


def _optional_number(value: Any, path: str, report: ImportReport) -> float | None:
    return None if value is None else _number(value, path, report)


def _partition(
    value: Any, path: str, scope: str, report: ImportReport
) -> AcceleratorPartition | None:
    """``{Type, Count}`` with Type a MIG profile (``mig-1g.5gb`` or ``1g.5gb``)."""
    if value is None:
        return None
    item = _read(value, path, COMPUTE_QUOTA, f"{scope}.AcceleratorPartition", report)
    profile = _mig_profile(item.get("Type"), f"{path}.Type", report)
    count = _integer(item.get("Count"), f"{path}.Count", 0, MAX_COUNT, report)
    if profile is None or count is None:
        return None
    return AcceleratorPartition(type=f"mig-{profile}", count=count)


def _mig_profile(value: Any, path: str, report: ImportReport) -> str | None:
    """``"mig-1g.5gb"`` / ``"1g.5gb"`` -> ``"1g.5gb"``."""
    match = _MIG_PROFILE.match(value.strip().lower()) if isinstance(value, str) else None
    if match is None:
        report.problem(path, f"not a MIG profile: {value!r} (examples: mig-1g.5gb, 3g.40gb)")
        return None
    return match[1]


# --- resource sharing --------------------------------------------------------------------------


def _sharing(
    value: Any, config_path: str, reading: BorrowLimitReading, report: ImportReport
) -> tuple[SharingStrategy, list[BorrowLimit]]:
    """Strategy and borrow limits; only LendAndBorrow teams borrow, so only they get limits."""
    path = _join(config_path, "ResourceSharingConfig")
    config = _read(value, path, COMPUTE_QUOTA, _SHARING, report)
    strategy = SharingStrategy(
        _choice(config.get("Strategy"), "LendAndBorrow", _STRATEGIES, f"{path}.Strategy", report)
    )
    given = config.get("BorrowLimit")
    percent = _integer(
        DEFAULT_BORROW_LIMIT if given is None else given, f"{path}.BorrowLimit", 0, 10000, report
    )
    absolute = _absolute_limits(
        config.get("AbsoluteBorrowLimits"), f"{path}.AbsoluteBorrowLimits", report
    )
    if strategy is not SharingStrategy.LEND_AND_BORROW:
        if given is not None or absolute:
            report.note(
                path,
                f"strategy {strategy.value} does not borrow, so its borrow limits have no effect",
            )
        return strategy, []
    limits = [] if percent is None else [_percent_limit(percent, path, reading, report)]
    if absolute and limits:
        report.note(
            f"{path}.AbsoluteBorrowLimits",
            "applies together with BorrowLimit; the tighter bound wins",
        )
    return strategy, limits + absolute


def _percent_limit(
    percent: int, path: str, reading: BorrowLimitReading, report: ImportReport
) -> BorrowLimit:
    """BorrowLimit as a percentage of the team's quota, or of idle compute. Above 100% of idle
    compute it never binds: a team cannot borrow more than is idle (HyperPod takes 1-500)."""
    if reading == "quota":
        return BorrowLimit(percent_of_quota=percent)
    if percent > 100:
        report.note(
            f"{path}.BorrowLimit",
            f"{percent}% of idle compute: above 100% it never binds (a team cannot borrow more "
            "than is idle), so the team may borrow all idle compute",
        )
    return BorrowLimit(percent_of_idle=percent)


def _absolute_limits(value: Any, path: str, report: ImportReport) -> list[BorrowLimit]:
    """``AbsoluteBorrowLimits``: one absolute limit per amount given, on its instance type."""
    if value is None:
        return []
    if not isinstance(value, list):
        report.problem(path, "expected a list of ComputeQuotaResourceConfig")
        return []
    limits = []
    for index, item in enumerate(value):
        amounts = _amounts(item, f"{path}[{index}]", _ABSOLUTE, report)
        if amounts is not None:
            limits += _limits_for(amounts, f"{path}[{index}]", report)
    return limits


def _limits_for(amounts: _Amounts, path: str, report: ImportReport) -> list[BorrowLimit]:
    """Per-resource absolute limits for one AbsoluteBorrowLimits entry."""
    flavor = amounts.instance_type
    limits = []
    if amounts.count is not None and amounts.instance is not None:
        for resource, amount in sorted(amounts.instance.allocatable.items()):
            if resource != "pods":  # whole instances: each resource of that many
                total = amount * amounts.count
                exact = str(total // MILLI) if total % MILLI == 0 else f"{total}m"
                limits.append(BorrowLimit(resource=resource, flavor=flavor, absolute=exact))
    if amounts.accelerators is not None:
        resource = accelerator_resource(flavor)
        limits.append(BorrowLimit(resource=resource, flavor=flavor, absolute=amounts.accelerators))
    if amounts.vcpu is not None:
        limits.append(BorrowLimit(resource=CPU, flavor=flavor, absolute=_plain(amounts.vcpu)))
    if amounts.memory_gib is not None:
        memory = f"{_plain(amounts.memory_gib)}Gi"
        limits.append(BorrowLimit(resource=MEMORY, flavor=flavor, absolute=memory))
    if amounts.partition is not None:
        resource = MIG_PREFIX + amounts.partition.type.removeprefix("mig-")
        limits.append(
            BorrowLimit(resource=resource, flavor=flavor, absolute=amounts.partition.count)
        )
    return limits


def accelerator_resource(instance_type: str) -> str:
    """Kubernetes resource of an instance type's accelerators: Neuron for trn*/inf*, else GPU."""
    family = ec2_name(instance_type).split(".")[0]
    return NEURON if family.startswith(("trn", "inf")) else GPU


def _plain(number: float) -> str:
    """``2.0`` -> ``"2"``, ``0.5`` -> ``"0.5"``: a number a Kubernetes quantity accepts."""
    return format(Decimal(repr(number)).normalize(), "f")
