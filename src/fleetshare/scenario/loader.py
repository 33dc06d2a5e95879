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
    ec2_name,
    load_catalog,
    mig_profiles,
    normalize_mig_profile,
)
from fleetshare.model.node import Node, NodeSelectorRequirement, Taint, Toleration
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import GPU, parse_resources
from fleetshare.model.workload import PodSet, Workload
from fleetshare.policy.schema import Policy, PolicyError, load_policy, validation_problems
from fleetshare.scenario.schema import (
    NodeAffinitySpec,
    NodeEvent,
    NodeSpec,
    ScenarioSpec,
    TolerationSpec,
)


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the field and the reason."""


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


def build_nodes(spec: NodeSpec, catalog: Catalog, start: int = 0) -> list[Node]:
    """Expand one node spec (``count`` nodes) into :class:`Node` objects."""
    allocatable: dict[str, int] = {}
    if spec.instance_type is not None:
        allocatable.update(catalog.get(spec.instance_type).allocatable)
    allocatable.update(parse_resources(spec.allocatable))
    if spec.mig is not None:
        if spec.instance_type is None:
            raise ScenarioError("mig needs an instance_type with MIG-capable GPUs")
        profiles = mig_profiles(catalog.get(spec.instance_type))
        profile = normalize_mig_profile(spec.mig.profile)
        if profile not in profiles:
            known = ", ".join(sorted(profiles)) or "none"
            raise ScenarioError(
                f"{spec.instance_type} GPUs do not offer {profile} (offer: {known})"
            )
        gpus = allocatable.pop(GPU, 0) // MILLI
        allocatable[profile] = gpus * profiles[profile] * MILLI
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


def _read(ref: str, base: Path) -> str:
    """Inline text, or the contents of a file named relative to the scenario."""
    if "\n" not in ref and (base / ref).is_file():
        try:
            return read_text(base / ref)
        except InputError as exc:
            raise ScenarioError(str(exc)) from None
    return ref


def build_policy(spec: ScenarioSpec, base: Path) -> Policy:
    """The scenario's policy, from fleetshare's format or an imported Kueue/HyperPod one."""
    if spec.policy is not None:
        data: dict[str, Any] = dict(spec.policy)
    elif spec.kueue is not None:
        from fleetshare.policy.kueue import import_kueue

        source = _read(spec.kueue, base) if isinstance(spec.kueue, str) else spec.kueue
        data = import_kueue(source).model_dump(mode="json")
    else:
        from fleetshare.policy.hyperpod import import_hyperpod

        raw = spec.hyperpod
        source_hp = _read(raw, base) if isinstance(raw, str) else raw
        assert source_hp is not None
        imported = import_hyperpod(source_hp, borrow_limit_reading=spec.hyperpod_borrow_limit)
        data = imported.model_dump(mode="json")
    for section, changes in spec.policy_overrides.items():
        if isinstance(changes, dict) and isinstance(data.get(section), dict):
            data[section] = {**data[section], **changes}
        else:
            data[section] = changes
    return load_policy(data, "policy")


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


def build_workloads(
    spec: ScenarioSpec,
    policy: Policy,
    later: list[Policy] | None = None,
    resolve_teams: bool = True,
) -> list[Workload]:
    """Workloads with priorities resolved against the policy's priority classes and, with
    ``resolve_teams``, teams from a team or local queue name (in ``policy`` or a ``later``
    one; unknown ones are rejected)."""
    out = []
    for i, w in enumerate(spec.workloads):
        try:
            priority = policy.priority_of(w.priority)
        except KeyError as exc:
            raise ScenarioError(f"workloads[{i}]({w.name}).priority: {exc.args[0]}") from None
        try:
            team = _team_of(w.team, [policy, *(later or [])]) if resolve_teams else w.team
        except KeyError as exc:
            raise ScenarioError(f"workloads[{i}]({w.name}).team: {exc.args[0]}") from None
        if w.podsets:
            podsets = tuple(
                PodSet(
                    ps.name,
                    ps.count,
                    parse_resources(ps.requests),
                    dict(ps.node_selector),
                    _tolerations(ps.tolerations),
                    _affinity(ps.node_affinity),
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
                ),
            )
        out.append(
            Workload(
                name=w.name,
                team=team,
                podsets=podsets,
                submit_time=w.submit_at,
                priority=priority,
                priority_class=w.priority,
                duration=w.duration,
                labels=dict(w.labels),
            )
        )
    return out


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
            changed = load_policy(change.policy, f"policy_changes[{i}].policy")
            compile_policy(changed, catalog)
            changes.append((change.at, changed))
        except PolicyError as exc:
            raise ScenarioError(f"{source}: {exc}") from None
    try:
        workloads = build_workloads(spec, policy, [p for _, p in changes])
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc}") from None
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
    )


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
