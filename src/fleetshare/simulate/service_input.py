"""A scenario's ``services:`` resolved for a run: team and priority against the policy, the
pod and scaler (written out, or imported from a KEDA ScaledObject / HPA manifest), and the
traffic (a generated pattern, a CSV file, or the DLRM trace's demand curve)."""

from __future__ import annotations

import math
from pathlib import Path

from fleetshare.inference.manifests import import_scalers
from fleetshare.inference.request_trace import Requests, from_pattern, read_requests
from fleetshare.inference.service import Service
from fleetshare.inference.spec import ServiceSpec, StartupSpec
from fleetshare.inference.startup import from_table
from fleetshare.inference.traffic import Traffic, generate
from fleetshare.inputs import InputError, read_text
from fleetshare.manifests.parse import documents
from fleetshare.model.resources import parse_resources
from fleetshare.model.workload import PodSet
from fleetshare.policy.schema import Policy
from fleetshare.scenario.loader import Scenario, ScenarioError
from fleetshare.traces.request_rates import from_csv, from_dlrm


def build_services(scenario: Scenario, base: Path) -> list[Service]:
    """Every service of the scenario; errors name ``services[i](name).field``."""
    return [
        _build(spec, scenario, base, f"services[{i}]({spec.name})")
        for i, spec in enumerate(scenario.spec.services)
    ]


def _priority(policy: Policy, name: str | None, where: str) -> int:
    try:
        return policy.priority_of(name)
    except KeyError as exc:
        raise ScenarioError(f"{where}: {exc.args[0]}") from None


def _traffic(
    spec: ServiceSpec, base: Path, where: str
) -> tuple[Traffic, Requests | None, tuple[str, ...]]:
    """The rate series the scaler follows and, with a serving model, the requests (read from
    a request trace, whose rate series is their arrivals binned; or drawn from the rate)."""
    ref = spec.traffic
    notes: tuple[str, ...] = ()
    try:
        if ref.requests is not None:
            requests = read_requests(ref.requests, base)
            step = ref.requests.step_seconds
            end = (math.floor(float(requests.arrival[-1]) / step) + 1) * step
            return requests.rates(step, end), requests, ()
        if ref.pattern is not None:
            traffic = generate(ref.pattern)
        elif ref.csv is not None:
            traffic = from_csv(ref.csv, base)
        else:
            assert ref.dlrm is not None
            traffic, note = from_dlrm(ref.dlrm)
            notes = (note,)
        if spec.serving is None:
            return traffic, None, notes
        return traffic, from_pattern(traffic, spec.serving.tokens), notes
    except (InputError, ValueError) as exc:
        raise ScenarioError(f"{where}.traffic: {exc}") from None


def _build(spec: ServiceSpec, scenario: Scenario, base: Path, where: str) -> Service:
    policy = scenario.policy
    if spec.team not in {t.name for t in policy.teams}:
        raise ScenarioError(f"{where}.team: unknown team {spec.team!r}")
    notes: list[str] = []
    floors = list(spec.floors)
    priority_class = spec.priority
    if spec.manifest is not None:
        path = base / spec.manifest
        try:
            imported = import_scalers(documents(read_text(path), str(path)))
        except InputError as exc:
            raise ScenarioError(f"{where}.manifest: {exc}") from None
        if len(imported) != 1:
            raise ScenarioError(
                f"{where}.manifest: {path} has {len(imported)} scaler objects; give one"
            )
        found = imported[0]
        shape = found.pod
        pod = PodSet(
            "main",
            1,
            shape.requests,
            dict(shape.node_selector),
            shape.tolerations,
            shape.affinity,
        )
        scaler = found.scaler
        floors += found.floors
        notes += found.notes
        priority_class = priority_class or shape.priority_class
    else:
        assert spec.replica is not None and spec.scaler is not None
        try:
            requests = parse_resources(spec.replica.requests)
        except ValueError as exc:
            raise ScenarioError(f"{where}.replica.requests: {exc}") from None
        pod = PodSet("main", 1, requests, dict(spec.replica.node_selector))
        scaler = spec.scaler
    priority = _priority(policy, priority_class, f"{where}.priority")
    placeholder = 0
    if spec.headroom is not None:
        placeholder = _priority(policy, spec.headroom.priority, f"{where}.headroom.priority")
        if placeholder >= priority:
            raise ScenarioError(
                f"{where}.headroom.priority: {spec.headroom.priority} (weight {placeholder}) must "
                f"be below the service's priority (weight {priority}) so replicas preempt it"
            )
        team = spec.headroom.team
        if team is not None and team not in {t.name for t in policy.teams}:
            raise ScenarioError(f"{where}.headroom.team: unknown team {team!r}")
    for i, trigger in enumerate(scaler.triggers):
        if trigger.metric == "running" and spec.serving is None:
            at = "manifest" if spec.manifest is not None else f"scaler.triggers[{i}].metric"
            raise ScenarioError(
                f"{where}.{at}: running (requests running, vLLM's num_requests_running) is "
                "read from the serving model: give serving and slo"
            )
    if spec.forecast is not None and not any(t.metric == "rps" for t in scaler.triggers):
        raise ScenarioError(f"{where}.forecast: needs an rps trigger to size replicas by")
    pools = {p.name for p in scenario.spec.node_pools}
    for i, pool in enumerate(spec.startup.preloaded_pools):
        if pool not in pools:
            raise ScenarioError(
                f"{where}.startup.preloaded_pools[{i}]: no node pool named {pool!r}"
            )
    traffic, trace, traffic_notes = _traffic(spec, base, where)
    startup = spec.startup
    if startup.profile is not None:
        table = from_table(startup.profile)
        startup = StartupSpec(
            image_pull_seconds=table.image_pull_seconds,
            model_load_seconds=table.model_load_seconds,
            preloaded_pools=startup.preloaded_pools,
        )
        notes += [f"start-up from the table: {s}" for s in table.sources]
    return Service(
        name=spec.name,
        team=spec.team,
        priority=priority,
        priority_class=priority_class,
        pod=pod,
        scaler=scaler,
        capacity_rps=spec.capacity_rps,
        request_seconds=spec.request_seconds,
        startup=startup,
        node_ready_from_table=spec.startup.profile is not None,
        traffic=traffic,
        headroom=spec.headroom,
        placeholder_priority=placeholder,
        floors=tuple(floors),
        forecast=spec.forecast,
        measure_from=spec.measure_from_seconds,
        notes=(*notes, *traffic_notes),
        requests=trace,
        serving=spec.serving,
        slo=spec.slo,
        observed=spec.observed_rate,
    )
