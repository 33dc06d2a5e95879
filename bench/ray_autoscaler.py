"""Benchmark: fleetshare's provisioner side by side with Ray's autoscaler bin packing.

The same GPU training / inference demand mixes go to these planners in one run:

- **fleetshare**: :func:`fleetshare.autoscaling.provisioner.plan_nodes` (minimises the hourly
  price: greedy + local search + column generation, with an LP lower bound);
- **ray-v1**: ``ray.autoscaler._private.resource_demand_scheduler.get_nodes_for`` with the
  default utilisation scorer, the bin-packing core of the classic autoscaler's
  ``ResourceDemandScheduler.get_nodes_to_launch`` (adds one node at a time: the node type whose
  node would be best *utilised* by the remaining demand; no prices);
- **ray-v2**: ``ray.autoscaler.v2.scheduler.ResourceDemandScheduler().schedule(request)``, the
  autoscaler v2 scheduler, fed a ``SchedulingRequest`` of ``NodeTypeConfig`` node types,
  protobuf ``ResourceRequestByCount`` demands and one ``GangResourceRequest`` per gang (a PACK
  placement group); same kind of utilisation score, no prices.

Ray runs with two descriptions of the node types: ``ray-v1`` / ``ray-v2`` get ``CPU``, ``GPU``
and ``memory`` (what KubeRay derives from a worker group), ``ray-v1+acc`` / ``ray-v2+acc`` also
get ``accelerator_type:<GPU model>: 1`` on GPU nodes (what Ray's EC2 cluster launcher
autodetects); the extra resource changes Ray's utilisation score, hence its choices. In a mix
that pins GPU models both descriptions carry it (pods ask for ``accelerator_type:<model>:
0.001``, as Ray's ``accelerator_type=`` option does; fleetshare gets a node selector on
``karpenter.k8s.aws/instance-gpu-name``).

Every planner sees the same instance types (the priced EC2 types of the g4dn, g5, g6, p3dn,
p4d, p5, m5, c5 and r5 families in the packaged catalog, with Kubernetes *allocatable*
capacity, one zone, on-demand prices) and the same pods. Ray's node types carry no price, so
Ray's plans are priced afterwards with the same catalog prices. Every plan's node list is then
checked independently: first-fit decreasing (several pod and node orders) must place every
pod by all resources and GPU model; when it cannot, an exact MILP (scipy/HiGHS) gives the most
pods the node list can hold.

Measured per mix: hourly cost, nodes, decision time (median wall seconds of ``--repeat``
calls; only the planner call is timed, not building its inputs), fleetshare's lower bound,
and the saving (ray - fleetshare) / ray. Results: ``bench/results/ray_autoscaler.json`` and a
table on stdout. Ray is an optional, benchmark-only dependency: ``python -m pip install ray``.
See ``bench/README.md`` for the mixes and how to read the result.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import GPU_NAME_LABEL, Plan, PodShape, plan_nodes
from fleetshare.model.catalog import Catalog, InstanceType, load_catalog
from fleetshare.model.node import HOSTNAME_LABEL
from fleetshare.model.resources import GPU
from run_info import machine

FAMILIES = ("g4dn", "g5", "g6", "p3dn", "p4d", "p5", "m5", "c5", "r5")
"""Instance families offered to every planner (the catalog has no plain p3: p3dn stands in)."""
ZONE = "us-east-1a"
GIB = 2**30
MAX_WORKERS = 10_000
"""Per node type (Ray ``max_workers``): high enough never to bind."""
ACCEL = "accelerator_type:"
"""Ray's GPU-model resource: 1 per GPU node, 0.001 per pinned task."""
PIN = 0.001
VERIFY_SECONDS = 60.0
"""Time limit of the exact (MILP) check of a node list."""
INSTALL_HINT = (
    "Ray is not installed. It is a benchmark-only dependency (not in pyproject.toml):\n"
    "    .venv/bin/python -m pip install ray\n"
    "then run this script again (`make bench` installs it first)."
)

Need = tuple[int, int, int, str | None]
"""One pod or one node: cpu milli, memory bytes, GPUs, GPU model (None: any / no GPU)."""


# -- demand ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    """``pods`` identical pods; a gang is placed in full or not at all."""

    name: str
    pods: int
    cpu: float  # vCPU
    mem_gib: float
    gpu: int = 0
    gang: bool = False
    accel: str | None = None
    """GPU model the pods need (catalog ``gpu_name``: a100, h100, l4, ...); None: any."""

    def need(self) -> Need:
        return (round(self.cpu * 1000), round(self.mem_gib * GIB), self.gpu, self.accel)


@dataclass(frozen=True, slots=True)
class Mix:
    name: str
    description: str
    jobs: tuple[Job, ...]

    @property
    def pods(self) -> int:
        return sum(j.pods for j in self.jobs)

    @property
    def pinned(self) -> bool:
        return any(j.accel for j in self.jobs)

    def needs(self) -> list[Need]:
        return [job.need() for job in self.jobs for _ in range(job.pods)]


def _training(rng: np.random.Generator, gangs: int, quads: int, duals: int, tag: str) -> list[Job]:
    jobs = [Job(f"{tag}gang-{i}", 8, 8, 64, 1, gang=True) for i in range(gangs)]
    for i in range(quads):  # 4-GPU pods, 1-2 per job (2-pod jobs are gangs)
        n = int(rng.integers(1, 3))
        jobs.append(Job(f"{tag}quad-{i}", n, 32, 192, 4, gang=n > 1))
    jobs += [Job(f"{tag}dual-{i}", 1, 16, 96, 2) for i in range(duals)]
    return jobs


def _inference(
    rng: np.random.Generator,
    deployments: int,
    cpu_services: int,
    tag: str,
    accel: Sequence[str | None] = (None,),
) -> list[Job]:
    jobs = []
    for i in range(deployments):
        cpu = float(rng.choice([2, 4, 6]))
        mem = float(rng.choice([8, 16, 24]))
        pin = accel[i % len(accel)]
        jobs.append(Job(f"{tag}infer-{i}", int(rng.integers(6, 25)), cpu, mem, 1, accel=pin))
    for i in range(cpu_services):
        cpu = float(rng.choice([1, 2]))
        jobs.append(Job(f"{tag}svc-{i}", int(rng.integers(2, 7)), cpu, 2 * cpu, 0))
    return jobs


def build_mixes(seed: int) -> list[Mix]:
    """The demand mixes; sizes drawn from ``numpy.random.default_rng([seed, k])``."""
    r = [np.random.default_rng([seed, k]) for k in range(7)]
    odd = [
        Job("three-gpu", 24, 24, 96, 3),
        Job("bigmem-gpu", 12, 12, 400, 1),
        Job("six-gpu", 6, 60, 500, 6),
        Job("bigmem-cpu", 20, 8, 300, 0),
        Job("odd-cpu-gpu", 40, 3.5, 13, 1),
        Job("odd-cpu", 30, 1.5, 5, 0),
    ]
    prep = [
        Job("etl-large", int(r[4].integers(140, 181)), 16, 32, 0),
        Job("etl-small", int(r[4].integers(60, 101)), 4, 16, 0),
        Job("gpu-featurize", int(r[4].integers(40, 61)), 8, 32, 1),
        *[Job(f"gang-{i}", 8, 8, 64, 1, gang=True) for i in range(4)],
    ]
    pinned = [
        *[Job(f"a100-gang-{i}", 8, 8, 64, 1, gang=True, accel="a100") for i in range(6)],
        *[Job(f"h100-gang-{i}", 8, 12, 96, 1, gang=True, accel="h100") for i in range(4)],
        *[Job(f"a10g-quad-{i}", 1, 32, 128, 4, accel="a10g") for i in range(8)],
        *_inference(r[5], deployments=16, cpu_services=6, tag="", accel=("l4", "t4")),
    ]
    return [
        Mix(
            "training",
            "gangs of 8 x (1 GPU, 8 vCPU, 64 GiB); 4-GPU pods (32 vCPU, 192 GiB) in 1-2 pod "
            "jobs; 2-GPU pods (16 vCPU, 96 GiB); any GPU model",
            tuple(_training(r[0], gangs=18, quads=14, duals=24, tag="")),
        ),
        Mix(
            "inference",
            "deployments of 6-24 replicas of (1 GPU, 2-6 vCPU, 8-24 GiB); CPU-only services "
            "of 2-6 replicas (1-2 vCPU, 2-4 GiB); any GPU model",
            tuple(_inference(r[1], deployments=22, cpu_services=10, tag="")),
        ),
        Mix(
            "mixed",
            "training (8 gangs, 6 quad jobs, 10 dual pods) and inference (12 deployments, "
            "6 CPU services) together; any GPU model",
            tuple(
                _training(r[2], gangs=8, quads=6, duals=10, tag="t-")
                + _inference(r[3], deployments=12, cpu_services=6, tag="i-")
            ),
        ),
        Mix(
            "odd-shapes",
            "3-GPU pods; 1-GPU pods with 400 GiB; 6-GPU pods with 500 GiB; CPU pods with 300 "
            "GiB; 1-GPU pods with 3.5 vCPU; 1.5-vCPU pods; any GPU model",
            tuple(odd),
        ),
        Mix(
            "data-prep",
            "CPU-heavy ETL (16 vCPU/32 GiB and 4 vCPU/16 GiB pods) with GPU featurisation "
            "(1 GPU, 8 vCPU, 32 GiB) and 4 training gangs of 8; any GPU model",
            tuple(prep),
        ),
        Mix(
            "pinned",
            "GPU models pinned: 6 A100 gangs and 4 H100 gangs of 8, 8 A10G 4-GPU pods, 16 "
            "inference deployments on L4 or T4 (alternating), 6 CPU services",
            tuple(pinned),
        ),
    ]


# -- instance types ------------------------------------------------------------------------------


def instance_set(catalog: Catalog) -> list[InstanceType]:
    """Priced amd64 types of :data:`FAMILIES`, in catalog order."""
    return [
        inst
        for inst in catalog
        if inst.family in FAMILIES and inst.price_per_hour is not None and inst.arch == "amd64"
    ]


def capacity(inst: InstanceType) -> Need:
    """Allocatable (cpu milli, memory bytes, GPUs) and the GPU model."""
    a = inst.allocatable
    gpus = int(a.get(GPU, 0)) // 1000
    return (int(a["cpu"]), int(a["memory"]) // 1000, gpus, inst.gpu_name if gpus else None)


# -- fleetshare side -----------------------------------------------------------------------------


def fleetshare_inputs(
    mix: Mix, types: Sequence[InstanceType]
) -> tuple[list[PodShape], list[NodePool], list[Offering], list[Need]]:
    """Pod shapes (identical non-gang pods merged, one shape per gang whose pods must share
    one host, ``domain=kubernetes.io/hostname``), one node pool, one on-demand offering per
    type in one zone, and per shape what one pod needs."""
    merged: Counter[Need] = Counter()
    gangs: list[tuple[str, Need, int]] = []
    for job in mix.jobs:
        if job.gang:
            gangs.append((job.name, job.need(), job.pods))
        else:
            merged[job.need()] += job.pods
    shapes, needs = [], []
    for need, count in sorted(merged.items(), key=lambda kv: (kv[0][:3], kv[0][3] or "")):
        shapes.append(PodShape(_requests(need), count, _selector(need)))
        needs.append(need)
    for name, need, count in gangs:  # kept together: a gang's pods share one host
        shapes.append(
            PodShape(_requests(need), count, _selector(need), gang=name, domain=HOSTNAME_LABEL)
        )
        needs.append(need)
    pool = NodePool(name="bench", instance_types=[t.name for t in types])
    offers = [Offering(t.name, ZONE, "on-demand", float(t.price_per_hour or 0)) for t in types]
    return shapes, [pool], offers, needs


def _requests(need: Need) -> tuple[tuple[str, int], ...]:
    cpu, mem, gpu, _ = need
    req = {"cpu": cpu, "memory": mem * 1000}
    if gpu:
        req[GPU] = gpu * 1000
    return tuple(sorted(req.items()))


def _selector(need: Need) -> tuple[tuple[str, str], ...]:
    return ((GPU_NAME_LABEL, need[3]),) if need[3] else ()


def check_assignment(
    plan: Plan, shapes: Sequence[PodShape], needs: Sequence[Need], catalog: Catalog
) -> list[str]:
    """fleetshare's own pod-to-node assignment: every node holds its pods (resources and GPU
    model), every pod is on a node."""
    problems = []
    placed: Counter[int] = Counter()
    for i, node in enumerate(plan.nodes):
        cap = capacity(catalog.get(node.instance_type))
        used = [0, 0, 0]
        for s, k in node.pods:
            placed[s] += k
            for r in range(3):
                used[r] += needs[s][r] * k
            if needs[s][3] and needs[s][3] != cap[3]:
                problems.append(f"node {i} ({node.instance_type}): shape {s} needs {needs[s][3]}")
        if any(u > c for u, c in zip(used, cap[:3], strict=True)):
            problems.append(f"node {i} ({node.instance_type}) over capacity: {used} > {cap}")
    for s, shape in enumerate(shapes):
        if placed[s] != shape.count:
            problems.append(f"shape {s}: {placed[s]} of {shape.count} pods assigned")
    return problems


# -- Ray side ------------------------------------------------------------------------------------


def import_ray() -> Any:
    """The ``ray`` module, or None when it is not installed."""
    try:
        import ray
    except ImportError:
        return None
    return ray


def ray_node_resources(inst: InstanceType, accel: bool) -> dict[str, float]:
    """A node of ``inst`` in Ray's terms: CPU in vCPUs, memory in bytes, GPUs and (``accel``)
    ``accelerator_type:<MODEL>: 1``."""
    cpu, mem, gpu, model = capacity(inst)
    res: dict[str, float] = {"CPU": cpu / 1000, "memory": float(mem)}
    if gpu:
        res["GPU"] = float(gpu)
        if accel and model:
            res[ACCEL + model.upper()] = 1.0
    return res


def ray_bundle(job: Job) -> dict[str, float]:
    cpu, mem, gpu, model = job.need()
    bundle: dict[str, float] = {"CPU": cpu / 1000, "memory": float(mem)}
    if gpu:
        bundle["GPU"] = float(gpu)
    if model:
        bundle[ACCEL + model.upper()] = PIN
    return bundle


class RayV1:
    """``get_nodes_for(node_types, existing_nodes, head_node_type, max_to_add, resources,
    utilization_scorer, strict_spread=False)`` with ``_default_utilization_scorer``."""

    def __init__(self, types: Sequence[InstanceType], accel: bool) -> None:
        from ray.autoscaler._private.node_provider_availability_tracker import (
            NodeAvailabilitySummary,
        )
        from ray.autoscaler._private.resource_demand_scheduler import (
            _default_utilization_scorer,
            get_nodes_for,
        )

        self.name = "ray-v1+acc" if accel else "ray-v1"
        self.types, self.accel = list(types), accel
        self._get_nodes_for = get_nodes_for
        self._scorer = functools.partial(
            _default_utilization_scorer,
            node_availability_summary=NodeAvailabilitySummary(node_availabilities={}),
        )

    def inputs(self, mix: Mix) -> tuple[dict[str, Any], list[dict[str, float]]]:
        accel = self.accel or mix.pinned
        node_types = {
            t.name: {
                "resources": ray_node_resources(t, accel),
                "min_workers": 0,
                "max_workers": MAX_WORKERS,
            }
            for t in self.types
        }
        # Ray v1 flattens PACK / SPREAD placement groups into plain bundles
        # (placement_groups_to_resource_demands), so gang pods are plain bundles here.
        return node_types, [ray_bundle(job) for job in mix.jobs for _ in range(job.pods)]

    def plan(
        self, inputs: tuple[dict[str, Any], list[dict[str, float]]]
    ) -> tuple[Counter[str], int]:
        """Node type counts to add, and how many pods Ray left unfulfilled."""
        node_types, bundles = inputs
        counts, residual = self._get_nodes_for(
            node_types,
            {},
            "head",  # not among the node types: no head node, nothing gets a +1
            MAX_WORKERS * len(node_types),
            bundles,
            utilization_scorer=self._scorer,
        )
        return Counter(counts), len(residual)


class RayV2:
    """``ResourceDemandScheduler().schedule(SchedulingRequest(...))`` of autoscaler v2."""

    def __init__(self, types: Sequence[InstanceType], accel: bool) -> None:
        from ray.autoscaler.v2.instance_manager.config import NodeTypeConfig
        from ray.autoscaler.v2.scheduler import ResourceDemandScheduler, SchedulingRequest
        from ray.autoscaler.v2.utils import ResourceRequestUtil
        from ray.core.generated.autoscaler_pb2 import GangResourceRequest

        self.name = "ray-v2+acc" if accel else "ray-v2"
        self.types, self.accel = list(types), accel
        self._config = NodeTypeConfig
        self._scheduler = ResourceDemandScheduler
        self._request = SchedulingRequest
        self._util = ResourceRequestUtil
        self._gang = GangResourceRequest

    def inputs(self, mix: Mix) -> Any:
        accel = self.accel or mix.pinned
        configs = {
            t.name: self._config(
                name=t.name,
                min_worker_nodes=0,
                max_worker_nodes=MAX_WORKERS,
                resources=ray_node_resources(t, accel),
            )
            for t in self.types
        }
        make = self._util.make
        plain = [make(ray_bundle(j)) for j in mix.jobs if not j.gang for _ in range(j.pods)]
        gangs = [
            self._gang(requests=[make(ray_bundle(j)) for _ in range(j.pods)], details=j.name)
            for j in mix.jobs
            if j.gang
        ]
        return self._request(
            disable_launch_config_check=True,
            node_type_configs=configs,
            resource_requests=self._util.group_by_count(plain),
            gang_resource_requests=gangs,
        )

    def plan(self, request: Any) -> tuple[Counter[str], int]:
        reply = self._scheduler().schedule(request)
        counts: Counter[str] = Counter()
        for launch in reply.to_launch:
            counts[launch.instance_type] += launch.count
        unfulfilled = len(reply.infeasible_resource_requests) + sum(
            len(g.requests) for g in reply.infeasible_gang_resource_requests
        )
        return counts, unfulfilled


# -- independent check ---------------------------------------------------------------------------


def _fits(node: Need, pod: Need) -> bool:
    return (
        pod[0] <= node[0]
        and pod[1] <= node[1]
        and pod[2] <= node[2]
        and (pod[3] is None or pod[3] == node[3])
    )


POD_ORDERS: dict[str, Callable[[Need, Need], tuple[float, ...]]] = {
    "gpu,mem,cpu": lambda p, ref: (p[2], p[1], p[0]),
    "mem,cpu,gpu": lambda p, ref: (p[1], p[0], p[2]),
    "cpu,mem,gpu": lambda p, ref: (p[0], p[1], p[2]),
    "dominant share": lambda p, ref: (max(p[r] / max(ref[r], 1) for r in range(3)),),
}
NODE_ORDERS: dict[str, Callable[[Need], tuple[int, ...]]] = {
    "big first": lambda c: (-c[2], -c[1], -c[0]),
    "small first": lambda c: (c[2], c[1], c[0]),
}


def first_fit(nodes: Sequence[Need], pods: Sequence[Need]) -> tuple[int, str]:
    """Fewest pods first-fit decreasing leaves out on ``nodes`` (over several pod and node
    orders), and the best order."""
    ref: Need = (*(max((n[r] for n in nodes), default=1) for r in range(3)), None)  # type: ignore[assignment]
    best = (len(pods) + 1, "")
    for pname, pkey in POD_ORDERS.items():
        order = sorted(pods, key=functools.partial(pkey, ref=ref), reverse=True)
        for nname, nkey in NODE_ORDERS.items():
            free = [list(c) for c in sorted(nodes, key=nkey)]
            left = 0
            for p in order:
                for f in free:
                    if _fits((f[0], f[1], f[2], f[3]), p):
                        f[0] -= p[0]
                        f[1] -= p[1]
                        f[2] -= p[2]
                        break
                else:
                    left += 1
            if left < best[0]:
                best = (left, f"first-fit ({pname} / {nname})")
            if left == 0:
                return best
    return best


def most_placed(nodes: Sequence[Need], pods: Sequence[Need], seconds: float) -> tuple[int, str]:
    """Pods left out by the best assignment to ``nodes`` (a MILP: maximise pods placed)."""
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint, milp

    demand = Counter(pods)
    classes = list(demand)
    pairs = [
        (c, n) for c, p in enumerate(classes) for n, node in enumerate(nodes) if _fits(node, p)
    ]
    if not pairs:
        return len(pods), "exact (nothing fits)"
    rows, cols, vals = [], [], []
    for k, (c, n) in enumerate(pairs):
        rows.append(c)  # class demand rows
        cols.append(k)
        vals.append(1.0)
        for r in range(3):
            if classes[c][r]:
                rows.append(len(classes) + 3 * n + r)
                cols.append(k)
                vals.append(float(classes[c][r]))
    A = sp.csr_matrix((vals, (rows, cols)), shape=(len(classes) + 3 * len(nodes), len(pairs)))
    upper = np.array(
        [demand[p] for p in classes] + [float(node[r]) for node in nodes for r in range(3)]
    )
    res = milp(
        c=-np.ones(len(pairs)),
        constraints=[LinearConstraint(A, -np.inf, upper)],
        integrality=np.ones(len(pairs)),
        bounds=Bounds(0, np.array([demand[classes[c]] for c, _ in pairs], dtype=float)),
        options={"time_limit": seconds},
    )
    if res.x is None:
        return len(pods), "exact check found no assignment within its time limit"
    placed = round(-res.fun)
    if res.status == 0:
        return len(pods) - placed, "exact (MILP optimum)"
    bound = int(np.floor(-getattr(res, "mip_dual_bound", -len(pods)) + 1e-6))
    return len(pods) - placed, f"MILP time limit: between {len(pods) - bound} and this"


def verify(nodes: Sequence[Need], pods: Sequence[Need]) -> tuple[int, str]:
    left, how = first_fit(nodes, pods)
    if left == 0:
        return 0, how
    return most_placed(nodes, pods, VERIFY_SECONDS)


# -- measurement ---------------------------------------------------------------------------------


def _timed(
    calls: Sequence[Callable[[], Any]], repeat: int
) -> tuple[list[list[Any]], list[list[float]]]:
    """Results and wall seconds of ``repeat`` rounds of every call, interleaved (one round
    calls each planner once), so a change in machine load hits all planners alike."""
    outs: list[list[Any]] = [[] for _ in calls]
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeat):
        for i, call in enumerate(calls):
            t = time.perf_counter()
            outs[i].append(call())
            times[i].append(time.perf_counter() - t)
    return outs, times


def _side(
    counts: Counter[str], catalog: Catalog, pods: list[Need], times: list[float]
) -> dict[str, Any]:
    nodes = [capacity(catalog.get(t)) for t, n in sorted(counts.items()) for _ in range(n)]
    left, how = verify(nodes, pods)
    return {
        "hourly_cost": round(
            sum(float(catalog.get(t).price_per_hour or 0) * n for t, n in counts.items()), 4
        ),
        "nodes": sum(counts.values()),
        "gpus": sum(capacity(catalog.get(t))[2] * n for t, n in counts.items()),
        "node_types": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "median_s": round(statistics.median(times), 4),
        "times_s": [round(t, 4) for t in times],
        "verified_unplaced": left,
        "verified_by": how,
    }


def measure_mix(
    mix: Mix,
    catalog: Catalog,
    types: Sequence[InstanceType],
    rays: Sequence[RayV1 | RayV2],
    repeat: int,
    time_limit: float | None,
) -> dict[str, Any]:
    pods = mix.needs()
    shapes, pools, offers, needs = fleetshare_inputs(mix, types)
    kwargs: dict[str, Any] = {} if time_limit is None else {"time_limit": time_limit}
    calls: list[Callable[[], Any]] = [
        lambda: plan_nodes(shapes, pools, catalog, offers, **kwargs),
        *(functools.partial(ray.plan, ray.inputs(mix)) for ray in rays),
    ]
    outs, timings = _timed(calls, repeat)
    plans, times = outs[0], timings[0]
    plan: Plan = plans[0]
    counts: Counter[str] = Counter()
    for launch in plan.launches:
        counts[launch.instance_type] += launch.count
    ours = _side(counts, catalog, pods, times)
    assigned = Counter(s for node in plan.nodes for s, k in node.pods for _ in range(k))
    ours.update(
        {
            "hourly_cost": round(plan.hourly_cost, 4),
            "costs_of_runs": [round(p.hourly_cost, 4) for p in plans],
            "lower_bound": round(plan.lower_bound, 4),
            "bound_is_proven": plan.bound_is_proven,
            "gap_to_bound": round(plan.gap, 4),
            "method": plan.method,
            "planner_seconds": round(plan.seconds, 4),
            "solver": {k: round(float(v), 4) for k, v in plan.stats.items()},
            "unplaced": sum(shape.count - assigned[s] for s, shape in enumerate(shapes)),
            "unplaceable": {str(k): v for k, v in plan.unplaceable.items()},
            "assignment_problems": check_assignment(plan, shapes, needs, catalog),
            "gangs_on_one_node": sum(
                1
                for s, shape in enumerate(shapes)
                if shape.gang is not None
                and sum(1 for node in plan.nodes for t, k in node.pods if t == s and k) == 1
            ),
        }
    )
    row: dict[str, Any] = {
        "mix": mix.name,
        "description": mix.description,
        "pods": mix.pods,
        "jobs": len(mix.jobs),
        "gangs": sum(j.gang for j in mix.jobs),
        "gpus_requested": sum(j.gpu * j.pods for j in mix.jobs),
        "shapes": len(shapes),
        "fleetshare": ours,
    }
    for i, ray in enumerate(rays, start=1):
        rcounts, unfulfilled = outs[i][0]
        side = _side(rcounts, catalog, pods, timings[i])
        side["unplaced"] = unfulfilled
        side["deterministic"] = all(o == outs[i][0] for o in outs[i])
        row[ray.name] = side
        row[f"vs_{ray.name}"] = compare(ours, side)
    if rays:  # the cheapest Ray plan that places every pod (else the cheapest)
        best = min(
            (r.name for r in rays),
            key=lambda n: (
                row[n]["unplaced"] + row[n]["verified_unplaced"] > 0,
                row[n]["hourly_cost"],
            ),
        )
        row["vs_best_ray"] = {"planner": best, **row[f"vs_{best}"]}
    return row


def compare(ours: dict[str, Any], ray: dict[str, Any]) -> dict[str, Any]:
    """Saving, the most any plan could save (to fleetshare's lower bound), targets, speed."""
    cost = ray["hourly_cost"]
    saving = (cost - ours["hourly_cost"]) / cost if cost > 0 else 0.0
    headroom = (cost - ours["lower_bound"]) / cost if cost > 0 else 0.0
    return {
        "saving_pct": round(100 * saving, 2),
        "headroom_pct": round(100 * headroom, 2),
        "comparable": ours["unplaced"] + ours["verified_unplaced"] == 0
        and ray["unplaced"] + ray["verified_unplaced"] == 0,
        "never_more_expensive": ours["hourly_cost"] <= cost + 1e-6,
        "target_20pct": (
            ("met" if saving >= 0.2 else "NOT met")
            if headroom >= 0.2
            else f"n/a (the lower bound is only {100 * headroom:.1f}% below Ray)"
        ),
        "speedup": round(ray["median_s"] / max(ours["median_s"], 1e-9), 2),
        "faster": ours["median_s"] < ray["median_s"],
    }


# -- report --------------------------------------------------------------------------------------


def summary(rows: list[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        vs = {r["mix"]: r[f"vs_{name}"] for r in rows}
        ray_cost = sum(
            r[r["vs_best_ray"]["planner"] if name == "best_ray" else name]["hourly_cost"]
            for r in rows
        )
        comparable = [m for m, v in vs.items() if v["comparable"]]
        out[name] = {
            "mixes_comparable": comparable,
            "never_more_expensive": all(vs[m]["never_more_expensive"] for m in comparable),
            "saving_pct": {m: v["saving_pct"] for m, v in vs.items()},
            "target_20pct": {m: v["target_20pct"] for m, v in vs.items()},
            "faster": {m: v["faster"] for m, v in vs.items()},
            "faster_everywhere": all(v["faster"] for v in vs.values()),
            "total_cost_fleetshare": round(sum(r["fleetshare"]["hourly_cost"] for r in rows), 2),
            "total_cost_ray": round(ray_cost, 2),
        }
    return out


def print_table(rows: list[dict[str, Any]], names: Sequence[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="fleetshare vs Ray autoscaler: hourly cost and decision time")
    for col in ("mix", "pods", "planner", "$/h", "nodes", "GPUs", "saving", "median s", "left out"):
        table.add_column(col, justify="left" if col in ("mix", "planner") else "right")
    for row in rows:
        fs = row["fleetshare"]
        table.add_row(
            row["mix"],
            f"{row['pods']}",
            "fleetshare",
            f"{fs['hourly_cost']:,.2f}",
            f"{fs['nodes']}",
            f"{fs['gpus']}",
            f"(bound {fs['lower_bound']:,.2f})",
            f"{fs['median_s']:.3f}",
            f"{fs['unplaced']}/{fs['verified_unplaced']}",
        )
        for name in names:
            side, vs = row[name], row[f"vs_{name}"]
            table.add_row(
                "",
                "",
                name,
                f"{side['hourly_cost']:,.2f}",
                f"{side['nodes']}",
                f"{side['gpus']}",
                f"{vs['saving_pct']:.1f}%" + ("" if vs["comparable"] else " *"),
                f"{side['median_s']:.3f}",
                f"{side['unplaced']}/{side['verified_unplaced']}",
            )
        table.add_section()
    console = Console(width=None if sys.stdout.isatty() else 110)
    console.print(table)
    console.print(
        "saving = (ray - fleetshare) / ray; left out = pods the planner reports unplaced / "
        "pods the independent check cannot place on the node list; * = not comparable"
    )


def machine_with(ray: Any) -> dict[str, Any]:
    """:func:`run_info.machine` with the versions of scipy, Ray and protobuf."""
    import scipy

    try:
        from google.protobuf import __version__ as protobuf_version
    except ImportError:
        protobuf_version = None
    version = getattr(ray, "__version__", None)
    return machine(scipy=scipy.__version__, ray=version, protobuf=protobuf_version)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=Path("bench/results/ray_autoscaler.json"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=3, help="timed calls per planner and mix")
    p.add_argument("--mixes", default="", help="comma-separated mix names (default: all)")
    p.add_argument(
        "--time-limit", type=float, default=None, help="plan_nodes time_limit (default: its own)"
    )
    p.add_argument("--no-v2", action="store_true", help="skip Ray's autoscaler v2 scheduler")
    p.add_argument(
        "--no-acc", action="store_true", help="skip the runs with accelerator_type resources"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ray = import_ray()
    if ray is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    # get_nodes_for logs a warning per unfulfillable demand; the JSON counts them instead
    logging.getLogger("ray.autoscaler").setLevel(logging.ERROR)
    catalog = load_catalog()
    types = instance_set(catalog)
    rays: list[RayV1 | RayV2] = []
    for accel in (False,) if args.no_acc else (False, True):
        rays.append(RayV1(types, accel))
        if not args.no_v2:
            rays.append(RayV2(types, accel))
    mixes = build_mixes(args.seed)
    if args.mixes:
        wanted = {m.strip() for m in args.mixes.split(",") if m.strip()}
        mixes = [m for m in mixes if m.name in wanted]
    load_before = [round(x, 2) for x in os.getloadavg()]
    rows = []
    for mix in mixes:
        print(f"mix {mix.name}: {mix.pods} pods ...", file=sys.stderr, flush=True)
        rows.append(measure_mix(mix, catalog, types, rays, args.repeat, args.time_limit))
    names = [r.name for r in rays]
    report: dict[str, Any] = {
        "benchmark": "ray_autoscaler",
        "machine": {**machine_with(ray), "load_average_before": load_before},
        "config": {
            "seed": args.seed,
            "repeat": args.repeat,
            "time_limit": args.time_limit,
            "zone": ZONE,
            "capacity_type": "on-demand",
            "families": list(FAMILIES),
            "instance_types": [t.name for t in types],
            "ray_apis": {
                "ray-v1": "ray.autoscaler._private.resource_demand_scheduler.get_nodes_for("
                "node_types, {}, 'head', max_to_add, bundles, utilization_scorer="
                "partial(_default_utilization_scorer, node_availability_summary=...))",
                "ray-v2": "ray.autoscaler.v2.scheduler.ResourceDemandScheduler().schedule("
                "SchedulingRequest(node_type_configs, resource_requests, "
                "gang_resource_requests))",
                "+acc": "node types also carry accelerator_type:<GPU model>: 1 (as Ray's EC2 "
                "launcher autodetects); without: CPU, GPU, memory (as KubeRay derives)",
            },
        },
        "results": rows,
        "summary": summary(rows, [*names, "best_ray"] if names else []),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print_table(rows, names)
    for name, s in report["summary"].items():
        targets = Counter(t.split(" ")[0] for t in s["target_20pct"].values())
        slower = [m for m, fast in s["faster"].items() if not fast]
        print(
            f"vs {name}: total $/h {s['total_cost_fleetshare']:,.2f} vs "
            f"{s['total_cost_ray']:,.2f}; never more expensive: {s['never_more_expensive']}; "
            f"20% target met {targets['met']}, NOT met {targets['NOT']}, n/a {targets['n/a']}; "
            f"slower on: {', '.join(slower) or 'none'}"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
