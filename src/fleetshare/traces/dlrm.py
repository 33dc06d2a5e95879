"""Alibaba's disaggregated DLRM inference trace (cluster-trace-gpu-v2025), for autoscaling.

File (``alibaba-dlrm/disaggregated_DLRM_trace.csv.gz`` of the data folder, see the README's
``alibaba-dlrm/`` row): 23,871 inference instances of 156 applications over 31 days. Each
has a ``role`` -- ``HN`` (7,386 instances, 1 GPU each) or ``CN`` (16,485 CPU-only
instances) -- ``cpu_request`` (cores), ``gpu_request``, ``memory_request`` (GiB), ``rdma``
and ``disk`` requests, ``max_instance_per_node`` and ``creation_time`` / ``scheduled_time`` /
``deletion_time`` (seconds; empty creation: the instance existed when the trace began, 7,280
of them; empty deletion: it still ran when it ended, 8,878).

What the loader builds (one team, ``dlrm``):

- **Workloads** (``jobs="instances"``, default): one single-pod workload per instance, named
  after it, requesting its cpu, memory and GPU; submitted at its creation (0 when it existed
  at the start) and running ``deletion - scheduled`` (to the end of the trace when it has no
  deletion; labelled ``fleetshare.io/censored``). Instances with zero run time (16) are
  skipped. ``rdma``, ``disk`` and ``max_instance_per_node`` are not modelled.
- ``jobs="synthesized"``: instead, 1-GPU jobs whose concurrent count reproduces the GPU demand
  curve, as for Helios (:func:`~fleetshare.traces.common.jobs_from_counts`); CPU-only
  instances are left out and only GPU nodes are built.
- **Demand curves** (exact step functions of the workloads as submitted): ``gpus``, ``cpus``,
  ``memory_gib`` and ``instances``.
- **Cluster** (the trace has no node list): GPU nodes of 8 GPUs with 8x the largest HN
  instance's CPU and memory (so GPUs are what fills them), as many as the peak GPU demand
  needs; CPU nodes the size of the largest CN instance (192 cores, 1000 GiB), as many as the
  peak CN CPU or memory demand needs. Packing losses may leave some work pending at peaks;
  an autoscaler adds nodes. The team's quota is every GPU and CPU.
- **Trace end**: the last time in the file, 2,677,541 s (30.99 days). **Window**:
  ``start_day`` / ``days`` keep instances overlapping it, submitted at
  ``max(creation, start)`` and cut at its end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fleetshare.inputs import InputError, read_gzip_text
from fleetshare.model.node import Node
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import CPU, GPU, MEMORY
from fleetshare.model.workload import Workload
from fleetshare.traces.common import (
    CENSORED_LABEL,
    DAY,
    GIB,
    MINUTE,
    SYNTHETIC_LABEL,
    TRACE_LABEL,
    EndOrder,
    Trace,
    cell,
    clip,
    csv_rows,
    data_root,
    gpu_nodes,
    jobs_from_counts,
    node_names,
    optional_cell,
    require,
    single_pod,
    step_curve,
    window,
)

FILE = "alibaba-dlrm/disaggregated_DLRM_trace.csv.gz"
SECTION = "alibaba-dlrm/"
TEAM = "dlrm"
GPUS_PER_NODE = 8
APP_LABEL = "alibaba.com/app"
ROLE_LABEL = "alibaba.com/role"


@dataclass(frozen=True, slots=True)
class Instance:
    """One row of the trace (times None when empty)."""

    name: str
    role: str
    app: str
    cpu: int
    gpu: int
    memory_gib: float
    creation: float | None
    scheduled: float | None
    deletion: float | None


COLUMNS = (
    "instance_sn",
    "role",
    "app_name",
    "cpu_request",
    "gpu_request",
    "memory_request",
    "creation_time",
    "scheduled_time",
    "deletion_time",
)


def read_instances(path: Path) -> list[Instance]:
    """Every row of the trace, checked (numbers finite and non-negative, counts whole, at
    least one time in the file); problems name the file and the row."""
    source = str(path)
    out = []
    for row in csv_rows(source, read_gzip_text(path), COLUMNS):
        values = row[1]
        if not values["instance_sn"]:
            raise InputError(source, f"row {row[0]}: instance_sn is empty")
        out.append(
            Instance(
                name=values["instance_sn"],
                role=values["role"],
                app=values["app_name"],
                cpu=int(cell(source, row, "cpu_request", whole=True)),
                gpu=int(cell(source, row, "gpu_request", whole=True)),
                memory_gib=cell(source, row, "memory_request"),
                creation=optional_cell(source, row, "creation_time"),
                scheduled=optional_cell(source, row, "scheduled_time"),
                deletion=optional_cell(source, row, "deletion_time"),
            )
        )
    if not any(t is not None for i in out for t in (i.creation, i.scheduled, i.deletion)):
        raise InputError(source, "no row has a creation, scheduled or deletion time")
    return out


def trace_end(instances: list[Instance]) -> float:
    """The last time recorded in the file."""
    return max(t for i in instances for t in (i.creation, i.scheduled, i.deletion) if t is not None)


def load(
    *,
    start_day: float = 0,
    days: float | None = None,
    jobs: str = "instances",
    end_order: EndOrder = "lifo",
    seed: int = 0,
    data_dir: str | Path | None = None,
) -> Trace:
    """Load the DLRM inference trace (see the module docstring for every rule)."""
    if jobs not in ("instances", "synthesized"):
        raise ValueError(f"jobs must be 'instances' or 'synthesized', got {jobs!r}")
    path = require(data_root(data_dir) / FILE, SECTION)
    instances = read_instances(path)
    end = trace_end(instances)
    lo, hi = window(start_day, days, end)
    span = hi - lo

    workloads: list[Workload] = []
    skipped = 0
    for inst in instances:
        created = inst.creation if inst.creation is not None else 0.0
        started = inst.scheduled if inst.scheduled is not None else created
        stopped = inst.deletion if inst.deletion is not None else end
        placed = clip(created, started, stopped, lo, hi)
        if placed is None:
            if lo <= created < hi:
                skipped += 1
            continue
        submit, duration, cut = placed
        labels = {TRACE_LABEL: "dlrm", APP_LABEL: inst.app, ROLE_LABEL: inst.role}
        if cut or (inst.deletion is None and stopped >= hi):
            labels[CENSORED_LABEL] = "true"
        workloads.append(
            single_pod(
                inst.name,
                TEAM,
                {
                    CPU: inst.cpu * MILLI,
                    MEMORY: round(inst.memory_gib * GIB) * MILLI,
                    GPU: inst.gpu * MILLI,
                },
                submit,
                duration,
                labels=labels,
            )
        )

    starts = np.array([w.submit_time for w in workloads])
    stops = starts + np.array([w.duration or 0.0 for w in workloads])
    req = [w.total_requests() for w in workloads]
    gpu = np.array([r.get(GPU, 0) / MILLI for r in req])
    cpu = np.array([r.get(CPU, 0) / MILLI for r in req])
    mem = np.array([r.get(MEMORY, 0) / MILLI / GIB for r in req])
    is_gpu = gpu > 0
    curves = {
        "gpus": step_curve(starts, stops, gpu, span, "GPUs", "GPUs requested (HN instances)"),
        "cpus": step_curve(starts, stops, cpu, span, "CPUs", "cores requested (all instances)"),
        "memory_gib": step_curve(starts, stops, mem, span, "GiB", "memory requested"),
        "instances": step_curve(starts, stops, np.ones(len(req)), span, "instances", "live"),
    }
    hn = [i for i in instances if i.gpu > 0]
    cn = [i for i in instances if i.gpu == 0]
    gpu_peak = curves["gpus"].peak
    n_gpu_nodes = math.ceil(gpu_peak / GPUS_PER_NODE)
    hn_cpu = max((i.cpu for i in hn), default=0)
    hn_mem = max((i.memory_gib for i in hn), default=0.0)
    nodes: list[Node] = gpu_nodes(
        "dlrm-gpu",
        n_gpu_nodes,
        GPUS_PER_NODE,
        cpu_milli=GPUS_PER_NODE * hn_cpu * MILLI,
        memory_bytes=round(GPUS_PER_NODE * hn_mem * GIB),
    )
    n_cpu_nodes = 0
    cn_cpu = max((i.cpu for i in cn), default=0)
    cn_mem = max((i.memory_gib for i in cn), default=0.0)
    cpu_only = ~is_gpu
    cn_cpu_peak = step_curve(starts[cpu_only], stops[cpu_only], cpu[cpu_only], span, "").peak
    cn_mem_peak = step_curve(starts[cpu_only], stops[cpu_only], mem[cpu_only], span, "").peak

    assumptions = [
        "One team, 'dlrm', for all 156 applications; its quota is every GPU and CPU of the "
        "cluster.",
        f"The trace has no node list: {n_gpu_nodes} GPU nodes of {GPUS_PER_NODE} GPUs, "
        f"{GPUS_PER_NODE * hn_cpu} cores and {GPUS_PER_NODE * hn_mem:g} GiB (8x the largest HN "
        f"instance, so GPUs fill them first) cover the peak GPU demand of {gpu_peak:,.0f}.",
        "rdma, disk and max_instance_per_node requests are not modelled.",
        f"Trace end = the last time in the file ({end:.0f} s = {end / DAY:.2f} days); "
        "instances with no deletion time run to it (censored), instances with no creation "
        "time existed at the start and are submitted at 0.",
    ]
    if jobs == "instances":
        n_cpu_nodes = math.ceil(
            max(cn_cpu_peak / cn_cpu if cn_cpu else 0.0, cn_mem_peak / cn_mem if cn_mem else 0.0)
        )
        for name in node_names("dlrm-cpu", n_cpu_nodes):
            nodes.append(
                Node(
                    name=name,
                    allocatable={CPU: cn_cpu * MILLI, MEMORY: round(cn_mem * GIB) * MILLI},
                )
            )
        assumptions += [
            "Each instance is one single-pod workload submitted at its creation and running "
            "deletion - scheduled seconds.",
            f"{n_cpu_nodes} CPU nodes of {cn_cpu} cores and {cn_mem:g} GiB (the largest CN "
            f"instance) cover the peak CN demand ({cn_cpu_peak:,.0f} cores, "
            f"{cn_mem_peak:,.0f} GiB) before packing losses.",
        ]
        if skipped:
            assumptions.append(f"{skipped} instances with zero run time are skipped.")
    else:
        grid = np.arange(0.0, span, MINUTE)
        counts = np.rint(curves["gpus"].at(grid)).astype(np.int64)
        synthesized = jobs_from_counts(grid, counts, span, end_order, seed)
        workloads = [
            single_pod(
                f"dlrm-{k:06d}",
                TEAM,
                {GPU: MILLI},
                s,
                e - s,
                labels={TRACE_LABEL: "dlrm", SYNTHETIC_LABEL: "true"}
                | ({CENSORED_LABEL: "true"} if e >= span else {}),
            )
            for k, (s, e) in enumerate(synthesized)
        ]
        assumptions.append(
            "Jobs are synthetic 1-GPU jobs whose concurrent count follows the GPU demand sampled "
            "each minute (a rise starts jobs, a fall ends the "
            + ("newest" if end_order == "lifo" else "randomly chosen (seeded)")
            + " ones); CPU-only instances are left out."
        )
    assumptions.append(
        f"Window: day {start_day:g} to {hi / DAY:.2f}; instances present at its start are "
        "submitted at 0 and those running past its end are cut there."
    )
    total_gpus = n_gpu_nodes * GPUS_PER_NODE
    total_cpus = sum(n.allocatable.get(CPU, 0) for n in nodes) // MILLI
    return Trace(
        name="dlrm",
        description="Alibaba disaggregated DLRM inference, 31 days: 156 apps' instances",
        nodes=nodes,
        workloads=sorted(workloads, key=lambda w: (w.submit_time, w.name)),
        policy={
            "teams": [{"name": TEAM, "quota": [{"resources": {GPU: total_gpus, CPU: total_cpus}}]}],
            "notes": ["Alibaba DLRM inference: one team holding the whole cluster"],
        },
        assumptions=assumptions,
        duration=span,
        demand=curves,
        start=None,
        sources=[path],
        facts={
            "instances_in_file": len(instances),
            "apps": len({i.app for i in instances}),
            "hn_instances": len(hn),
            "cn_instances": len(cn),
            "span_days": round(span / DAY, 2),
            "peak_gpus": gpu_peak,
            "min_gpus": float(curves["gpus"].values[curves["gpus"].times < span].min()),
            "peak_cpus": curves["cpus"].peak,
            "quota_gpus": total_gpus,
            "gpu_nodes": n_gpu_nodes,
            "cpu_nodes": n_cpu_nodes,
            "skipped_zero_runtime": skipped,
        },
    )
