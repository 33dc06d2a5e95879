"""The Alibaba GPU cluster trace (cluster-trace-gpu-v2023, "openb") as a simulation trace.

Files (``alibaba-gpu-v2023/`` of the data folder, see the README's ``alibaba-gpu-v2023/`` row),
read with :mod:`fleetshare.traces.openb`:

- ``openb_node_list_gpu_node.csv``: 1,213 GPU nodes with 6,212 GPUs of 7 models (``nodes="all"``
  reads ``openb_node_list_all_node.csv`` instead: 1,523 nodes, the other 310 without GPUs).
- ``openb_pod_list_<pods>.csv``: ``default`` is the full trace, 8,152 pods created over
  149.3 days (times in seconds from the trace start); ``gpuspec33`` and ``gpushare100`` are
  the same pods with more GPU-model constraints / GPU sharing. ``multigpu50`` has no times
  and cannot be simulated.

How pods become workloads (one single-pod workload per pod, named after the pod):

- **Requests**: ``cpu_milli`` (already milli-cores), ``memory_mib`` (MiB; the one pod with 0
  requests no memory) and GPUs as ``nvidia.com/gpu`` in milli-GPU: ``num_gpu * 1000`` for
  whole GPUs, ``gpu_milli`` for a pod sharing one GPU (``num_gpu == 1``, ``gpu_milli < 1000``),
  none for the 1,088 CPU-only pods. Quota counts a share as that much of the GPU total;
  governance placement puts it inside one physical GPU of the node
  (:mod:`fleetshare.placement.gpu_slots`), by the policy's ``cluster.placement``.
- **Load** (for a contended cluster): ``arrival_scale`` above; ``node_sample=k`` keeps every
  k-th node of the node file, in file order (default 1: all).
- **GPU model** (``gpu_spec``, models separated by ``|``; empty in ``default``): nodes carry
  ``nvidia.com/gpu.product=<model>``; a pod accepting one model selects it; a pod accepting
  several selects ``fleetshare.io/gpu-spec.<A>.<B>...=true``, a label every node of those
  models gets (node selectors cannot express "any of").
- **Times**: submitted at ``creation_time`` (divided by ``arrival_scale``, default 1: pods
  arrive that many times faster, for the same durations, which loads the cluster); runs
  ``deletion_time - scheduled_time``. The 897
  pods never scheduled (phase Pending) are kept (``include_unscheduled``) with duration
  ``deletion_time - creation_time``, the time they were wanted; a pod whose duration is 0 is
  skipped. Every pod has a deletion time; the trace spans 0 .. 12,902,960 s (149.34 days),
  the last deletion. Pods still Running at collection carry a deletion time too, which the
  loader takes as given.
- **QoS** -> priority class (``qos_priority``): Guaranteed 100, LS (latency-sensitive) 75,
  Burstable 50, BE (best-effort) 25, so best-effort work yields to latency-sensitive work.
- **Teams**: there is no tenant column. ``team_by="hash"`` (default) puts a pod in team
  ``team-<h mod teams>`` where ``h`` is the 64-bit BLAKE2b hash of ``"<seed>:<pod name>"``
  -- deterministic, seed-dependent and balanced in count. ``team_by="qos"`` uses the QoS class
  as the team (very unbalanced: 7 Guaranteed pods).
- **Prices**: nodes name no instance type; the simulator prices each by its GPU model and size
  (``nvidia.com/gpu.product``; :func:`fleetshare.model.catalog.price_gpu_node`: T4 -> g4dn,
  A10 -> g5, V100 and P100 -> p3dn, the undisclosed G2/G3 -> the cheapest NVIDIA type that
  holds them), the share of the nearest type its GPUs, vCPUs and memory amount to.
- **Quotas**: the cluster's GPUs split over teams in proportion to each team's GPU-seconds
  (GPUs requested x duration), rounded, the remainder to the team with the most; quotas
  cover GPUs only, so CPU-only pods are limited by node capacity, not quota.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fleetshare.model.node import Node
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import CPU, GPU, MEMORY
from fleetshare.model.workload import Workload
from fleetshare.placement.gpu_share import GpuNode
from fleetshare.traces.common import (
    DAY,
    TRACE_LABEL,
    DemandCurve,
    Trace,
    data_root,
    gpu_team,
    proportional_quotas,
    require,
    single_pod,
    stable_hash,
    step_curve,
)
from fleetshare.traces.openb import DEFAULT_POD_FILE, NODE_FILE, TracePod, load_pods
from fleetshare.traces.openb import load_nodes as load_gpu_nodes

FOLDER = "alibaba-gpu-v2023"
SECTION = "alibaba-gpu-v2023/"
ALL_NODE_FILE = "openb_node_list_all_node.csv"
POD_FILES = ("default", "gpuspec33", "gpushare100", "multigpu50")
MODEL_LABEL = "nvidia.com/gpu.product"
SPEC_LABEL_PREFIX = "fleetshare.io/gpu-spec."
QOS_LABEL = "alibaba.com/qos"
PHASE_LABEL = "alibaba.com/pod-phase"
MIB = 2**20

QOS_PRIORITY: dict[str, tuple[str, int]] = {
    "Guaranteed": ("alibaba-guaranteed", 100),
    "LS": ("alibaba-ls", 75),
    "Burstable": ("alibaba-burstable", 50),
    "BE": ("alibaba-be", 25),
}
"""QoS class -> (priority class, weight)."""


def spec_label(models: tuple[str, ...]) -> str:
    """The node label a pod accepting several GPU models selects."""
    return SPEC_LABEL_PREFIX + ".".join(models)


def _selector(models: tuple[str, ...]) -> dict[str, str]:
    if not models:
        return {}
    if len(models) == 1:
        return {MODEL_LABEL: models[0]}
    return {spec_label(models): "true"}


def _node(gpu_node: GpuNode, specs: set[tuple[str, ...]]) -> Node:
    alloc = {
        CPU: gpu_node.cpu_milli,
        MEMORY: gpu_node.memory_mib * MIB * MILLI,
        GPU: gpu_node.num_gpu * MILLI,
    }
    labels: dict[str, str] = {}
    if gpu_node.num_gpu and gpu_node.gpu_model:
        labels[MODEL_LABEL] = gpu_node.gpu_model
        for models in specs:
            if gpu_node.gpu_model in models:
                labels[spec_label(models)] = "true"
    return Node(
        name=gpu_node.name, allocatable={k: v for k, v in alloc.items() if v}, labels=labels
    )


def gpu_request_milli(pod: TracePod) -> int:
    """``num_gpu * 1000`` for whole GPUs, ``gpu_milli`` for a share of one, 0 for CPU only."""
    return pod.shape.gpu_request_milli


def team_of(pod: TracePod, team_by: str, teams: int, seed: int) -> str:
    """The team a pod is assigned to (see the module docstring)."""
    if team_by == "qos":
        return pod.qos or "unknown"
    return f"team-{stable_hash(seed, pod.name) % teams}"


def load(
    *,
    pods: str = "default",
    nodes: str = "gpu",
    teams: int = 4,
    team_by: str = "hash",
    seed: int = 0,
    include_unscheduled: bool = True,
    include_cpu_only: bool = True,
    qos_priority: bool = True,
    arrival_scale: float = 1.0,
    node_sample: int = 1,
    data_dir: str | Path | None = None,
) -> Trace:
    """Load the Alibaba GPU 2023 trace (see the module docstring for every rule)."""
    if not 0 < arrival_scale <= 100_000:
        raise ValueError(f"arrival_scale must be in (0, 100000], got {arrival_scale}")
    if node_sample < 1:
        raise ValueError(f"node_sample must be at least 1, got {node_sample}")
    if pods not in POD_FILES:
        raise ValueError(f"pods must be one of {', '.join(POD_FILES)}; got {pods!r}")
    if nodes not in ("gpu", "all"):
        raise ValueError(f"nodes must be 'gpu' or 'all', got {nodes!r}")
    if team_by not in ("hash", "qos"):
        raise ValueError(f"team_by must be 'hash' or 'qos', got {team_by!r}")
    if teams < 1:
        raise ValueError(f"teams must be at least 1, got {teams}")
    folder = data_root(data_dir) / FOLDER
    pod_file = require(
        folder / (DEFAULT_POD_FILE if pods == "default" else f"openb_pod_list_{pods}.csv"), SECTION
    )
    node_file = require(folder / (NODE_FILE if nodes == "gpu" else ALL_NODE_FILE), SECTION)
    trace_pods = load_pods(pod_file)
    untimed = [p.name for p in trace_pods if p.creation_time is None or p.deletion_time is None]
    if untimed:
        raise ValueError(
            f"{pod_file.name}: {len(untimed)} pods have no creation/deletion time (e.g. "
            f"{untimed[0]}); it is a packing sample, not a simulation trace: use pods='default', "
            "'gpuspec33' or 'gpushare100'"
        )
    specs = {p.shape.gpu_models for p in trace_pods if len(p.shape.gpu_models) > 1}
    every = [_node(n, specs) for n in load_gpu_nodes(node_file)]
    models = {n.labels.get(MODEL_LABEL) for n in every}
    cluster = every[::node_sample]
    end = float(max(p.deletion_time or 0 for p in trace_pods))

    workloads: list[Workload] = []
    skipped = {"unscheduled": 0, "cpu_only": 0, "zero_duration": 0}
    for p in trace_pods:
        assert p.creation_time is not None and p.deletion_time is not None
        gpu = gpu_request_milli(p)
        if not gpu and not include_cpu_only:
            skipped["cpu_only"] += 1
            continue
        if p.scheduled_time is None:
            if not include_unscheduled:
                skipped["unscheduled"] += 1
                continue
            duration = p.deletion_time - p.creation_time
        else:
            duration = p.deletion_time - p.scheduled_time
        if duration <= 0:
            skipped["zero_duration"] += 1
            continue
        unknown = [m for m in p.shape.gpu_models if m not in models]
        if unknown and gpu:
            raise ValueError(f"{pod_file.name}: pod {p.name} asks for unknown GPU models {unknown}")
        klass, weight = QOS_PRIORITY.get(p.qos, (None, 0)) if qos_priority else (None, 0)
        labels = {TRACE_LABEL: "alibaba", QOS_LABEL: p.qos, PHASE_LABEL: p.phase}
        workloads.append(
            single_pod(
                p.name,
                team_of(p, team_by, teams, seed),
                {CPU: p.shape.cpu_milli, MEMORY: p.shape.memory_mib * MIB * MILLI, GPU: gpu},
                p.creation_time / arrival_scale,
                duration,
                priority_class=klass,
                priority=weight,
                labels={k: v for k, v in labels.items() if v},
                node_selector=_selector(p.shape.gpu_models) if gpu else None,
            )
        )

    end = max(end / arrival_scale, *(w.submit_time + (w.duration or 0.0) for w in workloads))
    team_names = sorted({w.team for w in workloads})
    if team_by == "hash":
        team_names = [f"team-{i}" for i in range(teams)]
    gpu_seconds = dict.fromkeys(team_names, 0.0)
    for w in workloads:
        gpu_seconds[w.team] += w.total_requests().get(GPU, 0) / MILLI * (w.duration or 0.0)
    total_gpus = sum(n.allocatable.get(GPU, 0) for n in cluster) // MILLI
    quotas = proportional_quotas(gpu_seconds, total_gpus)

    curves: dict[str, DemandCurve] = {}
    starts = np.array([w.submit_time for w in workloads])
    stops = starts + np.array([w.duration or 0.0 for w in workloads])
    gpus = np.array([w.total_requests().get(GPU, 0) / MILLI for w in workloads])
    team_arr = np.array([w.team for w in workloads])
    what = "GPUs requested by workloads from submission for their duration"
    curves["cluster"] = step_curve(starts, stops, gpus, end, "GPUs", what)
    for team in team_names:
        m = team_arr == team
        curves[team] = step_curve(starts[m], stops[m], gpus[m], end, "GPUs", f"{team}: {what}")

    classes = [
        {"name": name, "weight": weight} for name, weight in QOS_PRIORITY.values() if qos_priority
    ]
    policy = {
        "cluster": {"priority_classes": classes},
        "teams": [gpu_team(t, quotas[t]) for t in team_names],
        "notes": ["Alibaba GPU 2023: teams and quotas derived by fleetshare (no tenant column)"],
    }
    counts = {t: int((team_arr == t).sum()) for t in team_names}
    team_rule = (
        f"pod -> team-(BLAKE2b-64('{seed}:' + pod name) mod {teams})"
        if team_by == "hash"
        else "team = the pod's QoS class"
    )
    assumptions = [
        f"No tenant column: {team_rule}; workloads per team {counts}.",
        f"Quotas ({sum(quotas.values())} GPUs = all {total_gpus} GPUs of the {len(cluster)} "
        f"nodes) are proportional to each team's GPU-seconds, rounded, remainder to the largest: "
        f"{quotas}. Quotas govern GPUs only.",
        "A pod runs deletion_time - scheduled_time seconds from its submission at creation_time.",
        (
            f"{sum(p.scheduled_time is None for p in trace_pods)} pods were never scheduled "
            "(Pending); they are kept with duration deletion_time - creation_time."
            if include_unscheduled
            else f"{skipped['unscheduled']} never-scheduled (Pending) pods are left out."
        ),
        "Pods still Running when the trace was collected keep their recorded deletion_time.",
        "Fractional GPU pods request gpu_milli milli-GPU of nvidia.com/gpu: quota counts it "
        "against the GPU total, placement puts it inside one physical GPU of the node "
        "(cluster.placement chooses the node and GPU).",
        (
            "QoS -> priority: "
            + ", ".join(f"{q} {w}" for q, (_, w) in QOS_PRIORITY.items())
            + " (an assumption; the trace has no priorities)."
            if qos_priority
            else "QoS is kept as a label only; all pods have priority 0."
        ),
    ]
    if skipped["zero_duration"]:
        assumptions.append(f"{skipped['zero_duration']} pod(s) with zero duration are skipped.")
    if skipped["cpu_only"]:
        assumptions.append(f"{skipped['cpu_only']} CPU-only pods are left out.")
    if specs or any(p.shape.gpu_models for p in trace_pods):
        assumptions.append(
            "gpu_spec: one model -> node selector nvidia.com/gpu.product; several -> a "
            "fleetshare.io/gpu-spec.<models> label set on every node of those models."
        )
    return Trace(
        name="alibaba",
        description=f"Alibaba GPU cluster 2023 ({pods}): {len(trace_pods)} pods, "
        f"{len(cluster)} nodes, {total_gpus} GPUs",
        nodes=cluster,
        workloads=sorted(workloads, key=lambda w: (w.submit_time, w.name)),
        policy=policy,
        assumptions=assumptions,
        duration=end,
        demand=curves,
        start=None,
        sources=[pod_file, node_file],
        facts={
            "pods_in_file": len(trace_pods),
            "span_days": round(end / DAY, 2),
            "cpu_only_pods": sum(gpu_request_milli(p) == 0 for p in trace_pods),
            "unscheduled_pods": sum(p.scheduled_time is None for p in trace_pods),
            "skipped": skipped,
            "quota_gpus": sum(quotas.values()),
            "peak_demand_gpus": curves["cluster"].peak,
        },
    )
