"""Turn a scenario file into nodes, a policy and workloads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleetshare.autoscaling.nodepool import pool_problems
from fleetshare.governance.quota import compile_policy
from fleetshare.inputs import InputError, load_yaml, read_text
from fleetshare.model.catalog import (
    Catalog,
    MigLayout,
    ec2_name,
    load_catalog,
    mig_allocatable,
    mig_profiles,
    normalize_mig_profile,
)
from fleetshare.model.node import Node, NodeSelectorRequirement, Taint, Toleration
from fleetshare.model.resources import GPU, MIG_PREFIX, parse_resources
from fleetshare.model.workload import PodSet, Workload
from fleetshare.policy.schema import Policy, PolicyError, load_policy, validation_problems
from fleetshare.scenario.errors import ScenarioError as ScenarioError
from fleetshare.scenario.schema import (
    NodeAffinitySpec,
    NodeEvent,
    NodeSpec,
    ScenarioSpec,
    TolerationSpec,
    WorkloadSpec,
)


@dataclass
class Scenario:
    """A loaded scenario, ready to run."""

    name: str
    description: str
    nodes: list[Node]
    events: list[NodeEvent]
    policy: Policy
    workloads: list[Workload]
    policy_changes: list[tuple[float, Policy]]
    until: float | None
    expect: dict[str, Any]
    catalog: Catalog
    spec: ScenarioSpec = field(repr=False)
    manifest_notes: list[str] = field(default_factory=list)
    """What the ``manifests:`` carry that is relevant to scheduling but not modelled."""


def build_nodes(spec: NodeSpec, catalog: Catalog, start: int = 0) -> list[Node]:
    """Expand one node spec (``count`` nodes) into :class:`Node` objects."""
    allocatable: dict[str, int] = {}
    if spec.instance_type is not None:
        allocatable.update(catalog.get(spec.instance_type).allocatable)
    allocatable.update(parse_resources(spec.allocatable))
    if spec.mig is not None:
        if spec.instance_type is None:
            raise ScenarioError("mig needs an instance_type with MIG-capable GPUs")
        instance = catalog.get(spec.instance_type)
        layout: MigLayout = [
            (None if d.devices == "all" else d.devices, d.mig_devices if d.mig_enabled else None)
            for d in spec.mig.layout
        ]
        try:
            if spec.mig.profile is not None:
                profile = normalize_mig_profile(spec.mig.profile)
                layout = [(None, {profile: mig_profiles(instance).get(profile, 0)})]
            mig = mig_allocatable(instance, layout)
        except ValueError as exc:
            raise ScenarioError(f"node {spec.name or spec.instance_type}: mig: {exc}") from None
        allocatable.pop(GPU, None)
        allocatable.update({k: v for k, v in mig.items() if k == GPU or k.startswith(MIG_PREFIX)})
    base = spec.name or ec2_name(spec.instance_type or "node")
    taints = tuple(Taint(t.key, t.value, t.effect) for t in spec.taints)
    out = []
    for i in range(spec.count):
        name = base if spec.count == 1 and spec.name else f"{base}-{start + i}"
        out.append(
            Node(
                name=name,
                allocatable=dict(allocatable),
                instance_type=spec.instance_type,
                zone=spec.zone,
                labels=dict(spec.labels),
                taints=taints,
                capacity_type=spec.capacity_type,
            )
        )
    return out


def _tolerations(specs: list[TolerationSpec]) -> tuple[Toleration, ...]:
    return tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in specs)


def _affinity(terms: NodeAffinitySpec) -> tuple[tuple[NodeSelectorRequirement, ...], ...]:
    return tuple(
        tuple(NodeSelectorRequirement(r.key, r.operator, tuple(r.values)) for r in term)
        for term in terms
    )


def _read(ref: str, base: Path, field: str) -> str:
    """Inline text, or the contents of a file named relative to the scenario. One line that
    is neither a JSON object/array nor a YAML mapping is a file name: missing, it is "not
    found", not a parse error of the name itself."""
    one_line = "\n" not in ref.strip()
    if one_line and (base / ref).is_file():
        try:
            return read_text(base / ref)
        except InputError as exc:
            raise ScenarioError(str(exc)) from None
    if one_line and not ref.lstrip().startswith(("{", "[")) and ": " not in ref:
        raise ScenarioError(
            f"{field}: file not found: {base / ref} (named relative to the scenario)"
        )
    return ref


def build_policy(spec: ScenarioSpec, base: Path) -> Policy:
    """The scenario's policy, from fleetshare's format or an imported Kueue/HyperPod one."""
    data = _policy_data(spec.policy, spec.kueue, spec.hyperpod, spec, base)
    return load_policy(data, "policy")


def _policy_data(
    policy: dict[str, Any] | None,
    kueue: str | list[dict[str, Any]] | None,
    hyperpod: str | dict[str, Any] | list[Any] | None,
    spec: ScenarioSpec,
    base: Path,
) -> dict[str, Any]:
    """A policy in fleetshare's format (as data), from whichever of the three is given; an
    imported one gets the scenario's ``policy_overrides``."""
    if policy is not None:
        return dict(policy)
    if kueue is not None:
        from fleetshare.policy.kueue import import_kueue

        source = _read(kueue, base, "kueue") if isinstance(kueue, str) else kueue
        data = import_kueue(source).model_dump(mode="json")
    else:
        from fleetshare.policy.hyperpod import import_hyperpod

        source_hp = _read(hyperpod, base, "hyperpod") if isinstance(hyperpod, str) else hyperpod
        assert source_hp is not None
        imported = import_hyperpod(source_hp, borrow_limit_reading=spec.hyperpod_borrow_limit)
        data = imported.model_dump(mode="json")
    for section, changes in spec.policy_overrides.items():
        if isinstance(changes, dict) and isinstance(data.get(section), dict):
            data[section] = {**data[section], **changes}
        else:
            data[section] = changes
    return data


def _team_of(queue: str, policies: list[Policy]) -> str:
    """The team behind a workload's team or queue, in the first policy that knows it (a
    policy change may add teams); KeyError with the first policy's message otherwise."""
    first: KeyError | None = None
    for policy in policies:
        try:
            return policy.team_for(queue)
        except KeyError as exc:
            first = first or exc
    assert first is not None
    raise first


def _local_queue_of(queue: str, policies: list[Policy]) -> str | None:
    """The local queue a workload naming ``queue`` comes through (None for a team name), in
    the first policy that knows it."""
    return next((q for p in policies if (q := p.local_queue_of(queue)) is not None), None)


def build_workloads(
    spec: ScenarioSpec,
    policy: Policy,
    later: list[Policy] | None = None,
    resolve_teams: bool = True,
) -> list[Workload]:
    """Workloads with priorities resolved against the policy's priority classes and, with
    ``resolve_teams``, teams from a team or local queue name (in ``policy`` or a ``later``
    one; unknown ones are rejected)."""
    return [
        build_workload(w, policy, f"workloads[{i}]({w.name})", later, resolve_teams)
        for i, w in enumerate(spec.workloads)
    ]


def build_workload(
    w: WorkloadSpec,
    policy: Policy,
    where: str,
    later: list[Policy] | None = None,
    resolve_teams: bool = True,
) -> Workload:
    """One workload (see :func:`build_workloads`); errors name ``where``."""
    try:
        priority = policy.priority_of(w.priority)
    except KeyError as exc:
        raise ScenarioError(f"{where}.priority: {exc.args[0]}") from None
    try:
        team = _team_of(w.team, [policy, *(later or [])]) if resolve_teams else w.team
    except KeyError as exc:
        raise ScenarioError(f"{where}.team: {exc.args[0]}") from None
    queue = _local_queue_of(w.team, [policy, *(later or [])])
    if w.podsets:
        podsets = tuple(
            PodSet(
                ps.name,
                ps.count,
                parse_resources(ps.requests),
                dict(ps.node_selector),
                _tolerations(ps.tolerations),
                _affinity(ps.node_affinity),
                ps.required_topology,
                ps.preferred_topology,
                ps.min_count,
            )
            for ps in w.podsets
        )
    else:
        podsets = (
            PodSet(
                "main",
                w.pods,
                parse_resources(w.requests),
                dict(w.node_selector),
                _tolerations(w.tolerations),
                _affinity(w.node_affinity),
                w.required_topology,
                w.preferred_topology,
                w.min_pods,
            ),
        )
    return Workload(
        name=w.name,
        team=team,
        podsets=podsets,
        submit_time=w.submit_at,
        priority=priority,
        priority_class=w.priority,
        duration=w.duration,
        labels=dict(w.labels),
        queue=queue,
    )


def load_scenario_data(data: Any, base: Path, source: str = "scenario") -> Scenario:
    """Validate and build a scenario from parsed YAML."""
    try:
        spec = ScenarioSpec.model_validate(data)
    except ValidationError as exc:
        lines = "\n".join(f"  {p}: {r}" for p, r in validation_problems(exc, data))
        raise ScenarioError(f"invalid {source}:\n{lines}") from None
    catalog = load_catalog()
    try:
        policy = build_policy(spec, base)
        compile_policy(policy, catalog)
    except PolicyError as exc:
        raise ScenarioError(f"{source}: {exc}") from None
    nodes: list[Node] = []
    try:
        for node_spec in spec.cluster.nodes:
            nodes.extend(build_nodes(node_spec, catalog, _next_index(nodes, node_spec)))
    except KeyError as exc:
        raise ScenarioError(f"{source}: cluster.nodes: {exc.args[0]}") from None
    names = [n.name for n in nodes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ScenarioError(f"{source}: cluster.nodes: duplicate node names {dupes}")
    for i, pool in enumerate(spec.node_pools):
        for where, why in pool_problems(pool, catalog):
            raise ScenarioError(f"{source}: node_pools[{i}]({pool.name}){where}: {why}")
    changes = []
    for i, change in enumerate(spec.policy_changes):
        try:
            data = _policy_data(change.policy, change.kueue, change.hyperpod, spec, base)
            changed = load_policy(data, f"policy_changes[{i}].policy")
            compile_policy(changed, catalog)
            changes.append((change.at, changed))
        except PolicyError as exc:
            where = "" if change.policy is not None else f"policy_changes[{i}]: "
            raise ScenarioError(f"{source}: {where}{exc}") from None
    try:
        workloads = build_workloads(spec, policy, [p for _, p in changes])
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc}") from None
    manifest_notes: list[str] = []
    if spec.manifests:
        workloads, manifest_notes = _with_manifests(spec, base, policy, changes, workloads, source)
    return Scenario(
        name=spec.name,
        description=spec.description,
        nodes=nodes,
        events=sorted(spec.cluster.events, key=lambda e: e.at),
        policy=policy,
        workloads=workloads,
        policy_changes=sorted(changes, key=lambda c: c[0]),
        until=spec.until,
        expect=spec.expect,
        catalog=catalog,
        spec=spec,
        manifest_notes=manifest_notes,
    )


def _with_manifests(
    spec: ScenarioSpec,
    base: Path,
    policy: Policy,
    changes: list[tuple[float, Policy]],
    workloads: list[Workload],
    source: str,
) -> tuple[list[Workload], list[str]]:
    """``workloads`` and the workloads of ``spec.manifests`` (whose names must differ from
    theirs and may be named by PodDisruptionBudgets), and the manifests' notes."""
    from fleetshare.scenario.manifests import ManifestsError, manifest_workloads

    later = [p for _, p in changes]
    try:
        more, notes = manifest_workloads(
            spec,
            base,
            lambda q: _team_of(q, [policy, *later]),
            policy.priority_of,
            lambda q: _local_queue_of(q, [policy, *later]),
            policy.default_priority(),
        )
    except ManifestsError as exc:
        raise ScenarioError(f"{source}: {exc}") from None
    names = {w.name for w in workloads}
    for w in more:
        if w.name in names:
            raise ScenarioError(
                f"{source}: manifests: workload {w.name!r} is also in workloads; names must "
                "be unique"
            )
    named = names | {w.name for w in more}
    for pdb in spec.pdbs:
        unknown = sorted(set(pdb.workloads) - named)
        if unknown:
            raise ScenarioError(f"{source}: pdb {pdb.name} names unknown workloads {unknown}")
    return [*workloads, *more], notes


def _next_index(nodes: list[Node], spec: NodeSpec) -> int:
    base = spec.name or ec2_name(spec.instance_type or "node")
    return sum(1 for n in nodes if n.name.startswith(f"{base}-"))


def load_scenario(path: Path) -> Scenario:
    """Read a scenario YAML file."""
    try:
        data = load_yaml(path)
    except InputError as exc:
        raise ScenarioError(str(exc)) from None
    return load_scenario_data(data, path.parent, str(path))
