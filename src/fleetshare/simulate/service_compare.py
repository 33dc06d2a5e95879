"""Options to meet a service's SLA compared on the same traffic: what each run cost and how
often traffic found too little capacity (see docs/inference.md for every definition)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.inference.service import Service
from fleetshare.model.catalog import Catalog
from fleetshare.model.resources import GPU
from fleetshare.placement.first_fit import Room
from fleetshare.scenario.loader import Scenario, ScenarioError, load_scenario
from fleetshare.simulate.idle_gpus import NodeSpan, split_idle
from fleetshare.simulate.metrics import percentiles
from fleetshare.simulate.service_input import build_services
from fleetshare.simulate.services import ServiceRun, run_services
from fleetshare.simulate.sla import (
    above_max_replicas_minutes,
    gpu_hours,
    measure,
    request_slo,
    serving_steps,
    training_in_headroom,
)

OPTIONS = ("reactive", "headroom", "scheduled", "forecast", "all")
"""The capacity options, in the order they are compared (``all``: the three together)."""


@dataclass
class OptionResult:
    """One option's run: per-service metrics and the cluster's."""

    option: str
    services: dict[str, dict[str, Any]]
    cluster: dict[str, Any]
    curves: dict[str, dict[str, list[float]]]
    """Per service: ``t``, ``rps``, ``capacity`` (serving x capacity_rps) and ``needed`` (the
    perfect-foresight capacity) every 15 s, for charts."""


def cheapest_replica_hour(
    service: Service, pools: Sequence[NodePool], catalog: Catalog
) -> float | None:
    """The least USD per replica-hour any pool's on-demand instance type offers (price /
    replicas that fit): what the perfect-foresight capacity costs per replica at best."""
    best: float | None = None
    for instance in catalog:
        if instance.price_per_hour is None or not any(p.allows(instance) for p in pools):
            continue
        fit = Room(instance.name, {}, (), dict(instance.allocatable)).room_for(
            service.pod.requests, 10_000
        )
        if fit >= 1:
            price = instance.price_per_hour / fit
            best = price if best is None else min(best, price)
    return best


def summarize(run: ServiceRun, scenario: Scenario) -> OptionResult:
    """The metrics of one run."""
    end = run.end
    start = min((s.service.measure_from for s in run.services), default=0.0)
    autoscaler = run.result.autoscaler
    nodes = list(autoscaler.nodes.values()) if autoscaler is not None else []
    node_intervals = [
        (
            m.instance.launched_at,
            m.terminated_at if m.terminated_at is not None else end,
            m.node.allocatable.get(GPU, 0) / 1000,
        )
        for m in nodes
    ]
    paid = gpu_hours(node_intervals, start, end)
    launched = sum(1 for m in nodes if start <= m.instance.launched_at < end)
    terminated = sum(
        1 for m in nodes if m.terminated_at is not None and start <= m.terminated_at < end
    )
    cloud = run.result.cloud
    cost = cloud.cost(end) - cloud.cost(start) if cloud is not None else 0.0
    services: dict[str, dict[str, Any]] = {}
    curves: dict[str, dict[str, list[float]]] = {}
    held: list[tuple[float, float, float]] = []
    waiting: list[tuple[float, float, float]] = []
    headroom_pods: set[str] = set()
    needed_gpu_hours = headroom_total = lower_cost = training_ran = replica_hours = 0.0
    for state in run.services:
        s = state.service
        from_ = s.measure_from
        pods = state.pods.values()
        replicas = [p for p in pods if not p.placeholder]
        placeholders = [p for p in pods if p.placeholder]
        serving = serving_steps([iv for p in replicas for iv in p.serving])
        sla = measure(s.traffic, serving, s.capacity_rps, s.needed, from_, end)
        gpus = s.gpus_per_replica()
        held_gpus = gpus * s.headroom_gang()  # GPUs of one headroom workload
        headroom = gpu_hours(
            [(a, b, held_gpus) for p in placeholders for a, b in p.held], from_, end
        )
        starts = [st for p in replicas for st in p.starts if from_ <= st[0] and st[2] <= end]
        needed = sla.needed_replica_hours * gpus
        price = cheapest_replica_hour(s, scenario.spec.node_pools, scenario.catalog)
        bound = sla.needed_replica_hours * price if price is not None else None
        needed_gpu_hours += needed
        headroom_total += headroom
        lower_cost += bound or 0.0
        slo = request_slo(s, [iv for p in replicas for iv in p.serving], serving, from_, end)
        services[s.name] = {
            "capacity_short_minutes": round(sla.capacity_short_minutes, 2),
            "above_max_replicas_minutes": round(
                above_max_replicas_minutes(
                    s.traffic, s.capacity_rps, s.scaler.max_replicas, from_, end
                ),
                2,
            ),
            "requests": round(sla.requests),
            "requests_in_capacity_short": round(sla.requests_in_capacity_short),
            "requests_over_capacity": round(sla.requests_over_capacity),
            "demand_steps": sla.steps,
            "demand_steps_met_at_once": sla.steps_met,
            "time_to_capacity_seconds": _rounded(sla.time_to_capacity),
            "replica_start_seconds": {
                "wanted_to_serving": _rounded(percentiles(np.array([c - w for w, _, c in starts]))),
                "waiting_for_a_node": _rounded(
                    percentiles(np.array([a - w for w, a, _ in starts]))
                ),
                "pull_and_load": _rounded(percentiles(np.array([c - a for _, a, c in starts]))),
            },
            "replicas_created": sum(1 for p in replicas if from_ <= p.wanted_at < end),
            "replicas_deleted": sum(
                1 for p in replicas if p.deleted_at is not None and from_ <= p.deleted_at < end
            ),
            "placeholders_created": sum(1 for p in placeholders if from_ <= p.wanted_at < end),
            "headroom_gpu_hours": round(headroom, 2),
            "needed_gpu_hours": round(needed, 2),
            "perfect_foresight_cost": None if bound is None else round(bound, 2),
            "notes": list(s.notes),
        }
        if slo is not None:
            services[s.name]["slo"] = slo
        if s.headroom is not None and s.headroom.held_by == "training":
            done = training_in_headroom(
                [(p.held, p.deleted_at) for p in placeholders],
                held_gpus,
                s.headroom.checkpoint_seconds,
                from_,
                end,
                saved=s.headroom.saved_on_stop(),
            )
            training_ran += done.ran
            services[s.name]["training"] = {
                "gpu_hours": round(done.ran, 2),
                "lost_gpu_hours": round(done.lost, 2),
                "delayed_gpu_hours": round(done.delayed, 2),
                "useful_gpu_hours": round(done.ran - done.lost, 2),
                "lost_gpu_hours_independent_phases": round(done.lost_independent, 2),
                "useful_gpu_hours_independent_phases": round(done.ran - done.lost_independent, 2),
            }
        replica_hours += gpu_hours([(a, b, gpus) for p in replicas for a, b in p.held], from_, end)
        held += [(a, b, gpus) for p in replicas for a, b in p.held]
        held += [(a, b, held_gpus) for p in placeholders for a, b in p.held]
        waiting += [(a, b, held_gpus) for p in placeholders for a, b in p.waited(end)]
        headroom_pods.update(p.name for p in placeholders)
        grid = np.arange(from_, end, 15.0)
        curves[s.name] = {
            "t": [float(t) for t in grid],
            "rps": [s.traffic.at(float(t)) for t in grid],
            "capacity": [serving.at(float(t)) * s.capacity_rps for t in grid],
            "needed": [s.needed(s.traffic.at(float(t))) * s.capacity_rps for t in grid],
        }
    cluster = {
        "window_seconds": [start, end],
        "gpu_hours": round(paid, 2),
        "needed_gpu_hours": round(needed_gpu_hours, 2),
        "idle_gpu_hours": round(paid - needed_gpu_hours, 2),
        "headroom_gpu_hours": round(headroom_total, 2),
        "inference_gpu_hours": round(replica_hours, 2),
        "cost": round(cost, 2),
        "perfect_foresight_cost": round(lower_cost, 2),
        "nodes_launched": launched,
        "nodes_terminated": terminated,
        "idle_split_gpu_hours": split_idle(
            [
                NodeSpan(
                    m.instance.launched_at,
                    m.ready_at,
                    m.terminated_at if m.terminated_at is not None else end,
                    m.node.allocatable.get(GPU, 0) / 1000,
                    bool(m.for_workloads) and set(m.for_workloads) <= headroom_pods,
                )
                for m in nodes
            ],
            held,
            waiting,
            start,
            end,
        ).rounded(),
    }
    if any(s.service.headroom and s.service.headroom.held_by == "training" for s in run.services):
        spare = paid - replica_hours
        cluster["spare_gpu_hours"] = round(spare, 2)
        cluster["training_share_of_spare"] = round(training_ran / spare, 4) if spare > 0 else None
    return OptionResult(run.option, services, cluster, curves)


def _rounded(values: dict[str, float | None]) -> dict[str, float | None]:
    return {k: (None if v is None else round(v, 1)) for k, v in values.items()}


def compare(path: Path, options: Sequence[str] = OPTIONS) -> tuple[list[OptionResult], list[str]]:
    """Run the scenario at ``path`` once per option its services define; notes say which
    options were skipped and why."""
    scenario = load_scenario(path)
    if not scenario.spec.services:
        raise ScenarioError(f"{path}: has no services to compare options for")
    if not scenario.spec.node_pools:
        raise ScenarioError(f"{path}: services need node_pools (capacity that follows them)")
    try:
        services = build_services(scenario, path.parent)
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    results, notes = [], []
    for option in options:
        missing = [s.name for s in services if not s.has(option)]
        if missing:
            notes.append(f"{option}: skipped, not defined for {', '.join(missing)}")
            continue
        run = run_services(load_scenario(path), services, option)
        results.append(summarize(run, scenario))
    return results, notes


def run_as_written(path: Path) -> tuple[OptionResult, dict[str, Any]]:
    """``scenario run`` of a scenario with services: every option it defines at once (``all``);
    and the JSON its ``expect`` block is checked against (``services``, ``cluster``)."""
    (result,), _ = compare(path, ("all",))
    return result, {"services": result.services, "cluster": result.cluster}


def versus_reactive(results: Sequence[OptionResult]) -> dict[str, dict[str, float | None]]:
    """Per option, relative to reactive: capacity-short minutes (all services), and, where
    the services have SLOs, SLO-violation minutes and the share of requests that missed
    the SLO (all services' requests); GPU-hours."""
    base = next((r for r in results if r.option == "reactive"), None)
    if base is None:
        return {}
    base_short = _total(base, "capacity_short_minutes")
    base_slo = _slo_total(base, "slo_violation_minutes")
    base_hours = base.cluster["gpu_hours"]
    out: dict[str, dict[str, float | None]] = {}
    for r in results:
        short = _total(r, "capacity_short_minutes")
        row: dict[str, float | None] = {
            "capacity_short_minutes": round(short, 2),
            "fewer_capacity_short_minutes_x": _times(base_short, short),
        }
        slo = _slo_total(r, "slo_violation_minutes")
        if slo is not None and base_slo is not None:
            missed = _slo_total(r, "requests_missed_slo")
            requests = _slo_total(r, "requests")
            row["slo_violation_minutes"] = round(slo, 2)
            row["fewer_slo_violation_minutes_x"] = _times(base_slo, slo)
            row["requests_missed_slo_share"] = (
                round(missed / requests, 5) if missed is not None and requests else None
            )
        row["extra_gpu_hours"] = round(r.cluster["gpu_hours"] - base_hours, 2)
        row["extra_gpu_hours_percent"] = (
            round(100 * (r.cluster["gpu_hours"] / base_hours - 1), 1) if base_hours else None
        )
        out[r.option] = row
    return out


def _times(base: float, value: float) -> float | None:
    """How many times fewer ``value`` is than ``base`` (None when ``value`` is 0)."""
    return None if value == 0 else round(base / value, 2)


def _total(result: OptionResult, key: str) -> float:
    return float(sum(s[key] for s in result.services.values()))


def _slo_total(result: OptionResult, key: str) -> float | None:
    """The sum over services with SLOs (None when none has one)."""
    values = [s["slo"][key] for s in result.services.values() if "slo" in s]
    return float(sum(values)) if values else None


def to_json(name: str, results: Sequence[OptionResult], notes: Sequence[str]) -> dict[str, Any]:
    """One JSON object for the comparison."""
    return {
        "scenario": name,
        "options": {r.option: {"services": r.services, "cluster": r.cluster} for r in results},
        "versus_reactive": versus_reactive(results),
        "notes": list(notes),
    }


def table(results: Sequence[OptionResult]) -> Table:
    """The trade-off, one row per option and service."""
    t = Table(title="capacity options on the same traffic", title_justify="left")
    for column in (
        "option",
        "service",
        "capacity-short min",
        "SLO-violation min",
        "missed SLO %",
        "to capacity p50/p99 s",
        "GPU-h",
        "extra GPU-h vs reactive",
        "headroom GPU-h",
        "idle GPU-h",
        "cost $",
        "perfect-foresight $",
        "replica / node churn",
    ):
        t.add_column(column)
    relative = versus_reactive(results)
    for r in results:
        for name, s in r.services.items():
            ttc = s["time_to_capacity_seconds"]
            extra = relative.get(r.option, {})
            t.add_row(
                r.option,
                name,
                f"{s['capacity_short_minutes']:.1f}",
                "-" if "slo" not in s else f"{s['slo']['slo_violation_minutes']:.1f}",
                "-" if "slo" not in s else _percent(s["slo"]["requests_missed_slo_share"]),
                f"{_num(ttc['p50'])} / {_num(ttc['p99'])}",
                f"{r.cluster['gpu_hours']:.1f}",
                ""
                if not extra
                else f"{extra['extra_gpu_hours']:+.1f} ({extra['extra_gpu_hours_percent']:+.1f}%)",
                f"{s['headroom_gpu_hours']:.1f}",
                f"{r.cluster['idle_gpu_hours']:.1f}",
                f"{r.cluster['cost']:.2f}",
                f"{r.cluster['perfect_foresight_cost']:.2f}",
                f"{s['replicas_created'] + s['replicas_deleted']} / "
                f"{r.cluster['nodes_launched'] + r.cluster['nodes_terminated']}",
            )
    return t


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.2f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
