"""Run policy variants on one input (a trace or a scenario file), in parallel processes.

:class:`SimulationInput` is what every variant shares: nodes, workloads, the base policy,
seed and the assumptions to print. :func:`build_scenario` turns it and a
:class:`~fleetshare.simulate.variants.Variant` into a scenario for the ordinary
:class:`~fleetshare.scenario.runner.Runner`; :func:`run_variants` runs them and returns each
run's metrics (:mod:`fleetshare.simulate.metrics`), computed after the run from its events.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.settings import AutoscalerSpec, CloudSpec
from fleetshare.autoscaling.warm import WarmCapacity
from fleetshare.governance.quota import compile_policy
from fleetshare.model.catalog import GPU_PRODUCT_LABEL, Catalog, load_catalog
from fleetshare.model.node import Node
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import GPU, fits, render
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import load_policy
from fleetshare.scenario.loader import Scenario, ScenarioError, load_scenario
from fleetshare.scenario.runner import ProgressRunner
from fleetshare.scenario.schema import ClusterSpec, NodeEvent, ScenarioSpec
from fleetshare.simulate.metrics import Measured, measure, measured_resource, summarize
from fleetshare.simulate.variants import (
    CONSOLIDATE_AFTER_SECONDS,
    DISRUPTION_INTERVAL_SECONDS,
    Variant,
    autoscale_pools,
    autoscaler_settings,
    cloud_settings,
    gpu_model_price,
    node_price,
    stand_in_types,
)
from fleetshare.traces import load_trace, trace_options

KIND_LABEL = "fleetshare.io/kind"
"""The label the autoscaler reads to tell training from batch and inference pods."""
JOB_KINDS = ("training", "batch", "inference", "auto")
TRAINING_TRACES = frozenset({"helios", "philly"})
"""Traces of deep-learning training clusters: their jobs are labelled training by default."""

Progress = Callable[[str, float], None]
"""Called with (variant name, simulated seconds reached)."""


@dataclass
class SimulationInput:
    """What every variant of a comparison shares."""

    name: str
    description: str
    nodes: list[Node]
    workloads: list[Workload]
    policy: dict[str, Any]
    assumptions: list[str]
    duration: float
    """Seconds the input covers (runs continue until all admitted work finishes)."""
    seed: int
    stand_in: dict[str, str]
    """Per node class (``gpu``, ``cpu``), the instance type standing for the input's nodes
    that name none: fixed-cluster prices and the autoscaled pools' launches
    (:func:`~fleetshare.simulate.variants.stand_in_types`)."""
    source: str
    start: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    events: list[NodeEvent] = field(default_factory=list)
    node_pools: list[NodePool] = field(default_factory=list)
    cloud: CloudSpec | None = None
    autoscaler: AutoscalerSpec | None = None
    until: float | None = None
    warm_capacity: WarmCapacity | None = None
    """Warm capacity of the trace-built pool of ``-autoscale`` variants (None: reactive)."""

    @property
    def resource(self) -> str:
        """The resource measured: GPUs when there are any, else CPUs."""
        return measured_resource(self.nodes, [w.total_requests() for w in self.workloads])

    def pool(self, catalog: Catalog | None = None) -> list[NodePool]:
        """The node pools of ``-autoscale`` variants."""
        if self.node_pools:
            return list(self.node_pools)
        pools = autoscale_pools(self.nodes, self.stand_in, catalog or load_catalog())
        if self.warm_capacity is not None:  # on the measured class's pool (GPU nodes first)
            pools[0] = pools[0].model_copy(update={"warm_capacity": self.warm_capacity})
        return pools

    @property
    def instance_type(self) -> str:
        """The stand-in type of the measured resource's node class (GPU nodes when any)."""
        kind = "gpu" if self.resource == GPU else "cpu"
        return self.stand_in.get(kind) or next(iter(self.stand_in.values()))

    def cloud_spec(self) -> CloudSpec:
        """The simulated cloud (the scenario's, with this input's seed)."""
        base = self.cloud or cloud_settings(self.seed)
        return base.model_copy(update={"seed": self.seed})

    def autoscaler_spec(self) -> AutoscalerSpec:
        """The autoscaler settings (the scenario's, else the simulator's defaults)."""
        return self.autoscaler or autoscaler_settings()

    def all_assumptions(self, catalog: Catalog) -> list[str]:
        """The input's assumptions plus the simulator's: prices, the cloud, cost, no restarts."""
        out = list(self.assumptions)
        priced_as = Counter(node_price(n, catalog, self.stand_in) for n in self.nodes)
        priced = (
            ", ".join(
                f"{t} ${p:.4f}/h ({count} nodes)" for (t, p), count in sorted(priced_as.items())
            )
            or "none"
        )
        by_model = [n for n in self.nodes if gpu_model_price(n, catalog) is not None]
        cloud = self.cloud_spec()
        pools = self.pool(catalog)
        stand_ins = ", ".join(f"{t} for {k.upper()} nodes" for k, t in self.stand_in.items())
        out += [
            f"Fixed-cluster cost = Σ nodes × catalog on-demand price (us-east-1) × hours from t=0 "
            f"to the end of the run (when its last job finished, at least the input's "
            f"{self.duration / 3600:g} h: the cluster is released when the work is done); nodes "
            f"priced as: {priced}"
            + (
                ""
                if all(n.instance_type for n in self.nodes)
                else " (nodes that name no instance type are priced by GPU model and size: "
                "the share of the nearest catalog type with that GPU that the node's GPUs, "
                "vCPUs and memory amount to; models: "
                + ", ".join(
                    f"{m} -> {g}" for m, g in sorted(_models_priced(by_model, catalog).items())
                )
                + "; never above a type of that GPU with more of every resource"
                + (
                    f"; the others are priced as {stand_ins})"
                    if len(by_model) < len(self.nodes)
                    else ")"
                )
                if by_model
                else f" (the input's nodes name no instance type; stand-ins: {stand_ins})"
            )
            + ". 'Cost in window' counts only what was paid for during the input's "
            f"{self.duration / 3600:g} h, for fixed and autoscaled clusters alike.",
            "Autoscaled cost = the simulated cloud's bill: per-second billing from launch "
            "(including the launch latency, before the node is Ready) to termination, 60 s "
            "minimum per instance.",
            f"Simulated cloud: seed {cloud.seed}; launch latency "
            f"{cloud.launch_latency_seconds:g} s (+{cloud.launch_latency_jitter_seconds:g} s "
            f"jitter); spot price = a seeded {cloud.spot_discount_min:.0%}-"
            f"{cloud.spot_discount_max:.0%} discount off on-demand (a model, not AWS quotes); "
            f"spot interruptions {cloud.spot_interruption_rate_per_hour:g}/h; insufficient-"
            f"capacity probability {cloud.ice_probability:g}.",
            "Autoscaled variants start with "
            + ("the scenario's nodes" if self.node_pools and self.nodes else "no nodes")
            + "; "
            + "; ".join(
                f"pool {pool.name}: {', '.join(pool.instance_types) or 'any type'} "
                f"({', '.join(pool.capacity_types)}), limits {dict(pool.limits) or 'none'}, "
                f"consolidation {pool.disruption.consolidation_policy} after "
                f"{pool.disruption.consolidate_after_seconds:g} s"
                for pool in pools
            )
            + f"; evaluated every {self.autoscaler_spec().disruption_interval_seconds:g} s.",
            "No checkpointing: a preempted or consolidated job restarts from scratch when "
            "admitted again; the time it had run is counted as lost.",
            "Runs continue past the input's end until every admitted job finishes (and, "
            "autoscaled, every node is removed); work never admitted is reported as censored.",
        ]
        return out


def _models_priced(nodes: Sequence[Node], catalog: Catalog) -> dict[str, str]:
    """GPU model label -> the catalog GPU it was priced as, for the nodes given."""
    out: dict[str, str] = {}
    for n in nodes:
        price = gpu_model_price(n, catalog)
        if price is not None:
            out[n.labels[GPU_PRODUCT_LABEL]] = (
                price.gpu if price.gpu != "any" else "undisclosed: any NVIDIA type"
            )
    return out


def label_kind(workloads: Sequence[Workload], kind: str) -> list[Workload]:
    """The workloads, each without a ``fleetshare.io/kind`` label given ``kind``."""
    return [
        w if KIND_LABEL in w.labels else replace(w, labels={**w.labels, KIND_LABEL: kind})
        for w in workloads
    ]


def _kind_note(kind: str, default: bool) -> str:
    if kind == "auto":
        return (
            "Job kind: as the autoscaler infers it (multi-pod gangs are training, single pods "
            "batch); consolidation may evict batch pods, which then restart from scratch."
        )
    why = " (a deep-learning training cluster)" if default else ""
    if kind == "training":
        return (
            f"Jobs are labelled {KIND_LABEL}=training{why}: consolidation never evicts them "
            "(not preemptible); quota reclaim and fair share still preempt them."
        )
    return (
        f"Jobs are labelled {KIND_LABEL}={kind}: consolidation may evict them to pack nodes; "
        "they restart from scratch."
    )


def from_trace(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    seed: int | None = None,
    instance_type: str | None = None,
    job_kind: str | None = None,
    catalog: Catalog | None = None,
) -> SimulationInput:
    """A trace from :mod:`fleetshare.traces` with loader ``options`` (``seed`` is passed on
    when the loader takes one). ``job_kind`` labels the jobs for the autoscaler (default:
    ``training`` for Helios and Philly, else ``auto``: left to the autoscaler)."""
    if job_kind is not None and job_kind not in JOB_KINDS:
        raise ValueError(f"job kind must be one of {', '.join(JOB_KINDS)}, got {job_kind!r}")
    catalog = catalog or load_catalog()
    opts = dict(options or {})
    if seed is not None and "seed" in trace_options(name):
        opts.setdefault("seed", seed)
    trace = load_trace(name, **opts)
    problems = trace.problems()
    if problems:
        raise ValueError(f"trace {name}: {problems[0]} (and {len(problems) - 1} more)")
    shown = ", ".join(f"{k}={_option_text(v)}" for k, v in opts.items() if k != "data_dir")
    kind = job_kind or ("training" if name in TRAINING_TRACES else "auto")
    workloads = trace.workloads if kind == "auto" else label_kind(trace.workloads, kind)
    return SimulationInput(
        name=f"{name}" + (f" ({shown})" if shown else ""),
        description=trace.description,
        nodes=trace.nodes,
        workloads=workloads,
        policy=trace.policy,
        assumptions=[*trace.assumptions, _kind_note(kind, job_kind is None)],
        duration=trace.duration,
        seed=seed if seed is not None else 0,
        stand_in=stand_in_types(trace.nodes, catalog, instance_type),
        source=f"trace {name}",
        start=trace.start,
        facts=trace.summary(),
    )


def _option_text(value: Any) -> str:
    """A loader option as the input's name shows it: lists as ``[a, b]``."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def demand_before(
    name: str, options: Mapping[str, Any], days: float, resource: str
) -> list[tuple[float, float]]:
    """The demand of the ``days`` of trace ``name`` before its window (``start_day`` of
    ``options``), as (time, units) change points with times shifted to end at 0: what its jobs
    requested while they ran, had they run when submitted (the history a forecaster would have
    seen). Empty when the window starts at day 0."""
    start = float(options.get("start_day", 0) or 0)
    days = min(days, start)
    if days <= 0:
        return []
    opts = {**options, "start_day": start - days, "days": days}
    trace = load_trace(name, **opts)
    changes: dict[float, float] = {}
    for wl in trace.workloads:
        amount = wl.total_requests().get(resource, 0) / MILLI
        if amount and wl.duration is not None:
            begin = wl.submit_time - days * 86_400.0
            end = min(begin + wl.duration, 0.0)
            changes[begin] = changes.get(begin, 0.0) + amount
            changes[end] = changes.get(end, 0.0) - amount
    out: list[tuple[float, float]] = []
    level = 0.0
    for at in sorted(changes):
        level += changes[at]
        if at < 0 or not out:
            out.append((at, max(0.0, round(level, 6))))
    return out


def from_scenario(
    path: Path,
    *,
    seed: int | None = None,
    instance_type: str | None = None,
    job_kind: str | None = None,
    catalog: Catalog | None = None,
) -> SimulationInput:
    """A fleetshare scenario file: its nodes, policy, workloads and (for ``-autoscale``
    variants) its node pools, cloud and autoscaler sections when it has them."""
    catalog = catalog or load_catalog()
    scenario = load_scenario(path)
    spec = scenario.spec
    notes: list[str] = []
    if job_kind is not None and job_kind not in JOB_KINDS:
        raise ValueError(f"job kind must be one of {', '.join(JOB_KINDS)}, got {job_kind!r}")
    workloads = scenario.workloads
    _teams_in_base_policy(scenario, path)
    if job_kind is not None and job_kind != "auto":
        workloads = label_kind(workloads, job_kind)
        notes.append(_kind_note(job_kind, False))
    endless = sum(1 for w in scenario.workloads if w.duration is None)
    if endless and scenario.until is None:
        notes.append(
            f"{endless} workload(s) have no duration and the scenario no 'until': they run "
            "until the simulation has nothing else to do, which differs between policies, so "
            "totals over time are not comparable; give durations or 'until'."
        )
    if scenario.policy_changes:
        notes.append(
            f"The scenario's {len(scenario.policy_changes)} policy change(s) are ignored: each "
            "variant runs one policy throughout."
        )
    has_pools = bool(spec.node_pools)
    nodes = scenario.nodes
    ends = [w.submit_time + (w.duration or 0.0) for w in scenario.workloads]
    shape_from = nodes or []
    if not shape_from and not instance_type and has_pools:
        instance_type = _pool_type(spec.node_pools[0], catalog)
    return SimulationInput(
        name=scenario.name,
        description=scenario.description,
        nodes=nodes,
        workloads=workloads,
        policy=scenario.policy.model_dump(mode="json"),
        assumptions=[f"Scenario file {path}.", *notes],
        duration=max([*ends, scenario.until or 0.0, 0.0]),
        seed=seed if seed is not None else spec.cloud.seed,
        stand_in=stand_in_types(shape_from, catalog, instance_type),
        source=f"scenario {path}",
        events=scenario.events,
        node_pools=list(spec.node_pools),
        cloud=spec.cloud if has_pools else None,
        autoscaler=spec.autoscaler if has_pools else None,
        until=scenario.until,
    )


def _teams_in_base_policy(scenario: Scenario, path: Path) -> None:
    """Every workload's team must be in the scenario's base policy: simulate runs one policy
    throughout (policy changes are ignored), so work of a team that only a policy change
    brings would wait for ever, never admitted. ScenarioError naming the first such workload
    and team (the scenario loader already rejects teams no policy knows)."""
    known = {t.name for t in scenario.policy.teams}
    missing = [(i, w) for i, w in enumerate(scenario.workloads) if w.team not in known]
    if not missing:
        return
    i, first = missing[0]
    more = f" (and {len(missing) - 1} more workloads)" if len(missing) > 1 else ""
    teams = ", ".join(sorted(known)) or "none"
    raise ScenarioError(
        f"{path}: workloads[{i}]({first.name}).team: team {first.team!r} is not in the base "
        f"policy (teams: {teams}); only a policy change brings it, and simulate runs each "
        f"policy throughout, ignoring policy_changes: its work would never be admitted{more}"
    )


def _pool_type(pool: NodePool, catalog: Catalog) -> str:
    allowed = [i for i in catalog if pool.allows(i) and i.price_per_hour is not None]
    if not allowed:
        raise ValueError(f"node pool {pool.name} allows no priced instance type")
    return min(allowed, key=lambda i: (i.price_per_hour or 0.0, i.name)).name


def build_scenario(inp: SimulationInput, variant: Variant, catalog: Catalog) -> Scenario:
    """The scenario one variant runs: the input with the variant's policy and cluster."""
    data = variant.policy(inp.policy, catalog)
    policy = load_policy(data, f"variant {variant.name} policy")
    compile_policy(policy, catalog)
    if variant.autoscale:
        nodes = list(inp.nodes) if inp.node_pools else []
        spec = ScenarioSpec(
            name=f"{inp.name}: {variant.name}",
            cluster=ClusterSpec(),
            policy=data,
            node_pools=inp.pool(catalog),
            cloud=inp.cloud_spec(),
            autoscaler=inp.autoscaler_spec(),
        )
    else:
        nodes = list(inp.nodes)
        spec = ScenarioSpec(
            name=f"{inp.name}: {variant.name}",
            cluster=ClusterSpec(),
            policy=data,
        )
    return Scenario(
        name=spec.name,
        description=variant.description,
        nodes=nodes,
        events=list(inp.events),
        policy=policy,
        workloads=list(inp.workloads),
        policy_changes=[],
        until=inp.until,
        expect={},
        catalog=catalog,
        spec=spec,
    )


def never_served(scenario: Scenario, catalog: Catalog) -> str | None:
    """A warning when some workloads can never run in ``scenario``: a pod of theirs asks for
    more than any node has and any instance type its node pools may launch offers (a pool
    naming no types may launch any catalog type). None when every workload could run."""
    shapes = {tuple(sorted(n.allocatable.items())) for n in scenario.nodes}
    for pool in scenario.spec.node_pools:
        types = pool.instance_types or [i.name for i in catalog]
        shapes |= {tuple(sorted(catalog.get(t).allocatable.items())) for t in types}
    hosts = [dict(shape) for shape in shapes]
    served: dict[tuple[tuple[str, int], ...], bool] = {}
    stuck = []
    for wl in scenario.workloads:
        for ps in wl.podsets:
            key = tuple(sorted(ps.requests.items()))
            ok = served.get(key)
            if ok is None:
                ok = served[key] = any(fits(ps.requests, host) for host in hosts)
            if not ok:
                stuck.append((wl, ps))
    if not stuck:
        return None
    names = list(dict.fromkeys(wl.name for wl, _ in stuck))
    wl, ps = stuck[0]
    where = "node and no instance type of the node pools" if scenario.spec.node_pools else "node"
    return (
        f"{len(names):,} of {len(scenario.workloads):,} workloads can never run: no {where} "
        f"offers what a pod of theirs asks for (e.g. {wl.name}: {render(ps.requests)} per pod); "
        "they wait to the end of the run"
    )


@dataclass
class VariantResult:
    """One variant's run: what was measured, its numbers (cluster, per team) and
    how long it took."""

    variant: Variant
    measured: Measured
    run_seconds: float
    measure_seconds: float
    warnings: list[str]
    cpu_seconds: float = 0.0
    """Processor time of the run (wall time suffers when other processes share the cores)."""
    cluster: dict[str, Any] = field(default_factory=dict)
    teams: dict[str, dict[str, Any]] = field(default_factory=dict)
    never_served: str | None = None
    """Why some workloads can never run here (see :func:`never_served`), shown first."""

    @property
    def name(self) -> str:
        """The variant's name."""
        return self.variant.name

    @property
    def end(self) -> float:
        """When the run ended (at least the input window)."""
        return self.measured.end

    def to_json(self) -> dict[str, Any]:
        """``{"cluster": {...}, "teams": {...}}`` (with the run's wall time in the cluster)."""
        cluster = dict(self.cluster)
        cluster["description"] = self.variant.description
        cluster["autoscale"] = self.variant.autoscale
        cluster["run_seconds"] = round(self.run_seconds, 3)
        cluster["run_cpu_seconds"] = round(self.cpu_seconds, 3)
        cluster["measure_seconds"] = round(self.measure_seconds, 3)
        cluster["warnings"] = len(self.warnings)
        cluster["never_served"] = self.never_served
        return {"cluster": cluster, "teams": self.teams}


def run_variant(
    inp: SimulationInput,
    variant: Variant,
    progress: Callable[[float], None] | None = None,
    catalog: Catalog | None = None,
) -> VariantResult:
    """Run one variant to the end and measure it."""
    catalog = catalog or load_catalog()
    scenario = build_scenario(inp, variant, catalog)
    began = time.perf_counter()
    cpu = time.process_time()
    result = ProgressRunner(scenario, progress).run()
    ran = time.perf_counter() - began
    cpu_ran = time.process_time() - cpu
    measured = measure(
        result,
        resource=inp.resource,
        catalog=catalog,
        stand_in=inp.stand_in,
        duration=inp.duration,
    )
    if progress is not None:
        progress(result.end_time)
    warnings = list(result.warnings)
    stuck = never_served(scenario, catalog)
    out = VariantResult(
        variant,
        measured,
        ran,
        time.perf_counter() - began - ran,
        [stuck, *warnings] if stuck else warnings,
        cpu_ran,
    )
    out.never_served = stuck
    out.cluster, out.teams = summarize(measured)
    return out


# -- parallel runs ------------------------------------------------------------------------------

_QUEUE: Any = None
_PARENT = 0


def _init_worker(q: Any, parent: int) -> None:
    global _QUEUE, _PARENT
    _QUEUE, _PARENT = q, parent


def _worker(inp: SimulationInput, variant: Variant) -> VariantResult:
    q = _QUEUE

    def report(now: float) -> None:
        if os.getppid() != _PARENT:  # the parent is gone (killed): do not run on as an orphan
            os._exit(1)
        if q is not None:
            q.put((variant.name, now))

    return run_variant(inp, variant, report)


def run_variants(
    inp: SimulationInput,
    variants: Sequence[Variant],
    *,
    jobs: int = 1,
    progress: Progress | None = None,
    on_start: Callable[[], None] | None = None,
) -> list[VariantResult]:
    """Run every variant (``jobs`` at a time, in worker processes when ``jobs > 1``) and
    return the results in the order given. ``on_start`` is called once the workers exist (start
    a progress display there: forking while its thread runs is unsafe)."""
    jobs = max(1, min(jobs, len(variants)))
    if jobs == 1:
        if on_start is not None:
            on_start()
        catalog = load_catalog()
        out = []
        for variant in variants:
            report = None
            if progress is not None:
                name = variant.name

                def report(now: float, name: str = name) -> None:
                    progress(name, now)

            out.append(run_variant(inp, variant, report, catalog))
        return out
    context = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    q: Any = (context or mp).Queue()
    results: dict[str, VariantResult] = {}
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=context,
        initializer=_init_worker,
        initargs=(q, os.getpid()),
    ) as pool:
        futures: dict[Future[VariantResult], str] = {
            pool.submit(_worker, inp, v): v.name for v in variants
        }
        if on_start is not None:
            on_start()
        pending = set(futures)
        while pending:
            try:
                name, now = q.get(timeout=0.1)
                if progress is not None:
                    progress(name, now)
            except queue_mod.Empty:
                pass
            for future in [f for f in pending if f.done()]:
                pending.discard(future)
                results[futures[future]] = future.result()
        while True:  # drain what is left of the progress reports
            try:
                name, now = q.get_nowait()
            except queue_mod.Empty:
                break
            if progress is not None:
                progress(name, now)
    return [results[v.name] for v in variants]


__all__ = [
    "CONSOLIDATE_AFTER_SECONDS",
    "DISRUPTION_INTERVAL_SECONDS",
    "ProgressRunner",
    "SimulationInput",
    "VariantResult",
    "build_scenario",
    "from_scenario",
    "from_trace",
    "run_variant",
    "run_variants",
]
