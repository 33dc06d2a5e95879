"""Benchmark: one admission cycle over a large, realistic cluster.

The issue's requirement: one cycle over 10,000 pending workloads, 30 teams in 5 groups and
2,000 nodes; measure decisions per second and peak memory. Target: at least 5,000 admission
decisions/s on a 2-core machine, and a cycle's cost growing no worse than n·log n in the number
of pending workloads (shown at 1k / 10k / 50k).

Everything is generated from ``--seed``: the nodes, the policy, the running workloads (about
half the cluster is busy when the cycle starts) and the pending queue. The cluster, policy and
running set are the same for every size; the pending queue of size n is a prefix of the queue of
any larger size, so the sizes measure the same workload mix.

Each size runs in a fresh subprocess (``--one N``) so that the process's peak RSS belongs to that
size only. Run ``python bench/admission_cycle.py --help`` for options; ``bench/README.md``
explains how to read the output.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleetshare.governance.admission import Engine
from fleetshare.governance.snapshot import Assignment, CycleResult, Running, Snapshot
from fleetshare.model.catalog import Catalog, load_catalog
from fleetshare.model.node import INSTANCE_TYPE_LABEL, Node, Taint, Toleration
from fleetshare.model.resources import CPU, GPU, parse_resources
from fleetshare.model.workload import PodSet, Workload
from fleetshare.placement.fit import pod_may_run_on
from fleetshare.policy.schema import Policy, load_policy
from run_info import machine

NOW = 1_000_000.0
"""The snapshot's clock (seconds); submit and admission times lie before it."""

# Instance types and their share of the fleet (GPU pools and a CPU pool).
NODE_MIX: tuple[tuple[str, float], ...] = (
    ("p5.48xlarge", 0.10),
    ("p4d.24xlarge", 0.15),
    ("g5.48xlarge", 0.15),
    ("g5.8xlarge", 0.30),
    ("m5.8xlarge", 0.30),
)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
GPU_TAINT = Taint("nvidia.com/gpu", "true", "NoSchedule")
GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")

PRIORITY_CLASSES = (
    ("inference", 90, 0.10),
    ("experimentation", 80, 0.20),
    ("training", 70, 0.50),
    ("fine-tuning", 50, 0.20),
)
GROUP_NAMES = ("research", "product", "platform", "applied", "infra", "vision", "speech")

QUOTA_FRACTION = 0.9
"""Team quotas add up to this fraction of every pool; the rest is unallocated (idle sharing)."""

BUSY_FRACTION = 0.5
"""How full each pool is with running work when the cycle starts."""

# Pending mix: kind -> probability.
KINDS = (
    ("gpu1", 0.35),  # 1 GPU, one pod
    ("gpu8", 0.20),  # 8 GPUs, one pod (a whole 8-GPU node)
    ("gang", 0.12),  # 2-16 pods of 8 GPUs (multi-node training)
    ("launcher", 0.05),  # a CPU launcher pod set + 2-8 GPU worker pods (two pod sets)
    ("cpu", 0.28),  # 1-4 CPU-only pods
)
EIGHT_GPU_TYPES = ("p5.48xlarge", "p4d.24xlarge", "g5.48xlarge")
GPU_TYPES = (*EIGHT_GPU_TYPES, "g5.8xlarge")
CPU_TYPES = ("m5.8xlarge",)
SELECTOR_PROBABILITY = 0.3
"""Share of GPU workloads pinned to one instance type by a node selector."""


# -- the cluster ---------------------------------------------------------------------------------


def build_nodes(count: int, catalog: Catalog) -> list[Node]:
    """``count`` Ready nodes over :data:`NODE_MIX`; GPU nodes carry the usual GPU taint."""
    per_type = _split(count, [share for _, share in NODE_MIX])
    nodes: list[Node] = []
    for (itype, _), n in zip(NODE_MIX, per_type, strict=True):
        allocatable = catalog.get(itype).allocatable
        taints = (GPU_TAINT,) if GPU in allocatable else ()
        for i in range(n):
            nodes.append(
                Node(
                    name=f"{itype}-{i:04d}",
                    allocatable=dict(allocatable),
                    instance_type=itype,
                    zone=ZONES[i % len(ZONES)],
                    taints=taints,
                )
            )
    return nodes


def _split(total: int, weights: list[float] | np.ndarray) -> list[int]:
    """Integer split of ``total`` proportional to ``weights`` (largest remainder)."""
    w = np.asarray(weights, dtype=float)
    exact = total * w / w.sum()
    out = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - out), kind="stable")[: total - int(out.sum())]:
        out[i] += 1
    return [int(x) for x in out]


def _borrow_limits(i: int) -> list[dict[str, Any]]:
    """Varied borrowing limits: percent of quota, percent of idle, absolute, none."""
    variants: list[list[dict[str, Any]]] = [
        [{"percent_of_quota": 50}],
        [{"percent_of_quota": 200}],
        [{"percent_of_idle": 50}],
        [
            {"resource": GPU, "absolute": 32},
            {"resource": CPU, "absolute": 512},
            {"resource": "memory", "absolute": "4Ti"},
        ],
        [{"percent_of_quota": 100, "percent_of_idle": 80}],
        [],
    ]
    return variants[i % len(variants)]


def build_policy(
    nodes: list[Node],
    teams: int,
    groups: int,
    rng: np.random.Generator,
    starvation_guard: float | None = 600.0,
) -> dict[str, Any]:
    """A policy document: ``teams`` teams in ``groups`` groups, quotas ~90% of every pool."""
    group_names = [GROUP_NAMES[g] if g < len(GROUP_NAMES) else f"group-{g}" for g in range(groups)]
    team_names = [f"{group_names[t % groups]}-{t // groups:02d}" for t in range(teams)]
    pools = Counter(n.instance_type for n in nodes)
    # Every team has CPU quota and quota on 1-3 GPU instance types.
    wants: dict[str, set[str]] = {t: set(CPU_TYPES) for t in team_names}
    for t in team_names:
        k = int(rng.integers(1, 4))
        wants[t].update(str(x) for x in rng.choice(GPU_TYPES, size=k, replace=False))
    counts: dict[str, dict[str, int]] = {t: {} for t in team_names}
    for itype, n in pools.items():
        assert itype is not None
        owners = [t for t in team_names if itype in wants[t]] or [team_names[0]]
        weights = rng.dirichlet(np.full(len(owners), 2.0))
        for t, c in zip(owners, _split(int(n * QUOTA_FRACTION), weights), strict=True):
            if c > 0:
                counts[t][itype] = c
    team_docs = []
    for i, t in enumerate(team_names):
        doc: dict[str, Any] = {
            "name": t,
            "group": group_names[i % groups],
            "quota": [
                {"instance_type": it, "count": c}
                for it, c in sorted(counts[t].items(), key=lambda kv: -kv[1])
            ],
            "borrow_limits": _borrow_limits(i),
            "fair_share_weight": [1.0, 1.0, 2.0, 0.5][i % 4],
        }
        if i % 10 == 7:
            doc["sharing"] = "Lend"  # lends, never borrows
        if i % 10 == 8:
            doc["preempt_team_tasks"] = "LowerOrNewerEqualPriority"
        if i % 10 == 9:
            doc["reclaim"] = "LowerPriority"
        team_docs.append(doc)
    return {
        "cluster": {
            "fair_share": True,
            "idle_resource_sharing": True,
            "priority_classes": [
                {"name": name, "weight": weight, "default": name == "training"}
                for name, weight, _ in PRIORITY_CLASSES
            ],
            "preemption": {"min_runtime_seconds": 300, "reclaim_grace_seconds": 60},
            "starvation_guard_seconds": starvation_guard,
        },
        "groups": [{"name": g} for g in group_names],
        "teams": team_docs,
    }


# -- workloads -----------------------------------------------------------------------------------


def _res(cpu: float, mem_gi: int, gpus: int = 0) -> dict[str, int]:
    spec: dict[str, str | int | float] = {"cpu": cpu, "memory": f"{mem_gi}Gi"}
    if gpus:
        spec[GPU] = gpus
    return parse_resources(spec)


class WorkloadFactory:
    """Draws workloads of the pending mix, one at a time, from one random stream."""

    def __init__(self, policy: Policy, rng: np.random.Generator, prefix: str) -> None:
        self.rng = rng
        self.prefix = prefix
        self.teams = [t.name for t in policy.teams]
        self.team_weights = rng.dirichlet(np.full(len(self.teams), 1.5))
        self.kind_names = [k for k, _ in KINDS]
        self.kind_p = np.array([p for _, p in KINDS])
        self.prio_p = np.array([p for _, _, p in PRIORITY_CLASSES])
        self.count = 0

    def draw(self, submit_time: float, kind: str | None = None) -> Workload:
        rng = self.rng
        self.count += 1
        name = f"{self.prefix}-{self.count:06d}"
        team = self.teams[int(rng.choice(len(self.teams), p=self.team_weights))]
        kind = kind or self.kind_names[int(rng.choice(len(self.kind_names), p=self.kind_p))]
        pc_name, pc_weight, _ = PRIORITY_CLASSES[int(rng.choice(4, p=self.prio_p))]
        selector: dict[str, str] = {}
        gpu_tol = (GPU_TOLERATION,)
        if kind == "gpu1":
            if rng.random() < SELECTOR_PROBABILITY:
                selector = {INSTANCE_TYPE_LABEL: str(rng.choice(GPU_TYPES))}
            cpu = float(rng.choice([2, 4, 8]))
            podsets: tuple[PodSet, ...] = (
                PodSet("main", 1, _res(cpu, int(cpu) * 4, 1), selector, gpu_tol),
            )
        elif kind == "gpu8":
            if rng.random() < SELECTOR_PROBABILITY:
                selector = {INSTANCE_TYPE_LABEL: str(rng.choice(EIGHT_GPU_TYPES))}
            podsets = (PodSet("main", 1, _res(64, 512, 8), selector, gpu_tol),)
        elif kind == "gang":
            if rng.random() < SELECTOR_PROBABILITY:
                selector = {INSTANCE_TYPE_LABEL: str(rng.choice(EIGHT_GPU_TYPES))}
            pods = int(rng.choice([2, 4, 8, 16], p=[0.4, 0.3, 0.2, 0.1]))
            podsets = (PodSet("worker", pods, _res(90, 600, 8), selector, gpu_tol),)
        elif kind == "launcher":
            if rng.random() < SELECTOR_PROBABILITY:
                selector = {INSTANCE_TYPE_LABEL: str(rng.choice(GPU_TYPES))}
            workers = int(rng.integers(2, 9))
            podsets = (
                PodSet("launcher", 1, _res(2, 8), selector, gpu_tol),
                PodSet("worker", workers, _res(4, 16, 1), selector, gpu_tol),
            )
        else:
            pods = int(rng.integers(1, 5))
            cpu = float(rng.choice([1, 2, 4, 8, 16]))
            podsets = (PodSet("main", pods, _res(cpu, int(cpu) * 4)),)
        return Workload(
            name=name,
            team=team,
            podsets=podsets,
            submit_time=submit_time,
            priority=pc_weight,
            priority_class=pc_name,
            labels={"kind": kind},
        )


def build_pending(policy: Policy, n: int, seed: int) -> list[Workload]:
    """``n`` pending workloads; the first k of size n are the workloads of size k."""
    factory = WorkloadFactory(policy, np.random.default_rng([seed, 2]), "pending")
    out = []
    for _ in range(n):
        age = float(factory.rng.exponential(1800.0))  # ~72% have waited longer than 600 s
        out.append(factory.draw(NOW - min(age, 86_400.0)))
    return out


@dataclass
class _Pool:
    """Free capacity per node, for placing the running workloads."""

    nodes: list[Node]
    total: np.ndarray  # nodes x [cpu, memory, gpu]
    free: np.ndarray
    by_type: dict[str, np.ndarray]

    @classmethod
    def of(cls, nodes: list[Node]) -> _Pool:
        free = np.array(
            [[n.allocatable.get(r, 0) for r in (CPU, "memory", GPU)] for n in nodes], np.int64
        )
        by_type: dict[str, list[int]] = {}
        for i, n in enumerate(nodes):
            by_type.setdefault(n.instance_type or "", []).append(i)
        return cls(nodes, free.copy(), free, {k: np.array(v) for k, v in by_type.items()})

    def place(self, itype: str, podset: PodSet) -> list[tuple[int, int]] | None:
        rows = self.by_type[itype]
        need = np.array([podset.requests.get(r, 0) for r in (CPU, "memory", GPU)], np.int64)
        mask = need > 0
        per_node = (self.free[rows][:, mask] // need[mask]).min(axis=1)
        if int(per_node.sum()) < podset.count:
            return None
        chosen, left = [], podset.count
        for j in np.flatnonzero(per_node > 0):  # first fit, lowest index first
            take = min(int(per_node[j]), left)
            chosen.append((int(rows[j]), take))
            left -= take
            if left == 0:
                break
        return chosen

    def take(self, plan: list[tuple[int, int]], podset: PodSet) -> None:
        need = np.array([podset.requests.get(r, 0) for r in (CPU, "memory", GPU)], np.int64)
        for i, k in plan:
            self.free[i] -= need * k

    def busy(self, itype: str) -> float:
        """Busy fraction of the pool's GPUs (of its CPUs for a CPU pool)."""
        rows = self.by_type[itype]
        col = 2 if int(self.total[rows, 2].sum()) > 0 else 0
        return 1.0 - float(self.free[rows, col].sum()) / float(self.total[rows, col].sum())


def build_running(
    policy: Policy, nodes: list[Node], seed: int, busy: float = BUSY_FRACTION
) -> list[Running]:
    """Running workloads filling every pool to about ``busy`` of its GPUs (CPU pool: CPUs).

    Most run on a flavor their team has quota on; about a quarter run elsewhere (borrowing), so
    reclaim and fair-share preemption have candidates.
    """
    rng = np.random.default_rng([seed, 1])
    factory = WorkloadFactory(policy, rng, "running")
    quota_types = {t.name: {q.flavor for q in t.quota} for t in policy.teams}
    pool = _Pool.of(nodes)
    running: list[Running] = []
    misses = 0
    while misses < 2000:
        wl = factory.draw(NOW - 3600.0 - float(rng.exponential(7200.0)))
        selector = wl.podsets[0].node_selector.get(INSTANCE_TYPE_LABEL)
        is_gpu = any(GPU in ps.requests for ps in wl.podsets)
        choices = [selector] if selector else list(GPU_TYPES if is_gpu else CPU_TYPES)
        if wl.podsets[0].requests.get(GPU, 0) >= 8000:
            choices = [c for c in choices if c in EIGHT_GPU_TYPES]
        own = [c for c in choices if c in quota_types[wl.team]]
        if own and rng.random() < 0.75:
            choices = own
        choices = [c for c in choices if pool.busy(c) < busy]
        if not choices:
            misses += 1
            continue
        itype = choices[int(rng.integers(len(choices)))]
        plans = []
        for ps in wl.podsets:
            plan = pool.place(itype, ps)
            if plan is None:
                break
            pool.take(plan, ps)
            plans.append(plan)
        if len(plans) < len(wl.podsets):
            for ps, plan in zip(wl.podsets, plans, strict=False):
                pool.take([(i, -k) for i, k in plan], ps)
            misses += 1
            continue
        placement = tuple(tuple((nodes[i].name, k) for i, k in plan) for plan in plans)
        assignment = Assignment((itype,) * len(wl.podsets), placement)
        admitted_at = wl.submit_time + float(rng.uniform(0, 3000))
        running.append(Running(wl, assignment, min(admitted_at, NOW - 30.0)))
    return running


@dataclass
class Cluster:
    catalog: Catalog
    nodes: list[Node]
    policy: Policy
    running: list[Running]


def _guard(text: str) -> float | None:
    return None if text.lower() in ("off", "none", "null") else float(text)


def build_cluster(args: argparse.Namespace) -> Cluster:
    catalog = load_catalog()
    rng = np.random.default_rng([args.seed, 0])
    nodes = build_nodes(args.nodes, catalog)
    guard = _guard(args.starvation_guard)
    doc = build_policy(nodes, args.teams, args.groups, rng, guard)
    policy = load_policy(doc, "bench policy")
    running = build_running(policy, nodes, args.seed)
    return Cluster(catalog, nodes, policy, running)


# -- measuring one size --------------------------------------------------------------------------


def _reason_kind(reason: str) -> str:
    """A pending reason's kind, as its composer keyed it (the first word of its typed key,
    :data:`~fleetshare.model.reason.Gist`; a joined or noted reason by its first problem's):
    no message is read back."""
    gist = getattr(reason, "gist", None)
    while gist and gist[0] in ("joined", "noted") and len(gist) > 1 and isinstance(gist[1], tuple):
        gist = gist[1]
    return str(gist[0]) if gist else "other"


def _summary(result: CycleResult) -> dict[str, Any]:
    return {
        "admissions": len(result.admissions),
        "preemptions": len(result.preemptions),
        "still_pending": len(result.pending),
        "decisions": len(result.admissions) + len(result.preemptions) + len(result.pending),
        "borrowing_admissions": sum(1 for a in result.admissions if a.borrowed),
        "preemptions_by_reason": dict(Counter(p.reason for p in result.preemptions)),
        "pending_by_reason": dict(
            Counter(_reason_kind(p.reason) for p in result.pending.values()).most_common()
        ),
        "warnings": len(result.warnings),
    }


def verify(snapshot: Snapshot, result: CycleResult) -> list[str]:
    """Invariants any cycle must keep; returns the violations (first few of each kind)."""
    problems: list[str] = []
    pending = {w.name: w for w in snapshot.pending}
    admitted = [a.workload.name for a in result.admissions]
    decided = Counter(admitted) + Counter(list(result.pending))
    problems += [f"{n} decided {k} times" for n, k in decided.items() if k != 1][:5]
    problems += [f"{n} got no decision" for n in pending if n not in decided][:5]
    problems += [f"{n} was not pending" for n in decided if n not in pending][:5]
    running = {r.workload.name: r for r in snapshot.running}
    victims = Counter(p.workload.name for p in result.preemptions)
    problems += [f"{n} preempted {k} times" for n, k in victims.items() if k != 1][:5]
    problems += [f"victim {n} was not running" for n in victims if n not in running][:5]
    nodes = {n.name: n for n in snapshot.nodes}
    free = {n.name: dict(n.allocatable) for n in snapshot.nodes if n.schedulable}
    holders = [r for r in snapshot.running if r.workload.name not in victims]
    placed = [(r.workload, r.assignment) for r in holders]
    placed += [(a.workload, a.assignment) for a in result.admissions]
    for wl, assignment in placed:
        for ps, flavor, pods in zip(
            wl.podsets, assignment.flavors, assignment.placement, strict=True
        ):
            if sum(k for _, k in pods) != ps.count:
                problems.append(f"{wl.name}/{ps.name}: placed {pods}, wants {ps.count} pods")
            for node_name, k in pods:
                node = nodes[node_name]
                if node.instance_type != flavor or not pod_may_run_on(ps, node):
                    problems.append(f"{wl.name}/{ps.name} may not run on {node_name}")
                for res, amount in ps.requests.items():
                    free[node_name][res] = free[node_name].get(res, 0) - amount * k
    over = [f"{n} over-committed: {r}" for n, f in free.items() for r, v in f.items() if v < 0]
    return problems[:20] + over[:10]


def _max_rss_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def measure_one(args: argparse.Namespace, n: int) -> dict[str, Any]:
    """Build the snapshot for ``n`` pending workloads and measure the cycle (this process)."""
    t0 = time.perf_counter()
    cluster = build_cluster(args)
    pending = build_pending(cluster.policy, n, args.seed)
    snapshot = Snapshot(NOW, cluster.nodes, cluster.running, pending)
    build_s = time.perf_counter() - t0
    gc.collect()
    rss_before = _max_rss_mib()

    def cycle(snap: Snapshot) -> CycleResult:
        return Engine(cluster.policy, cluster.catalog).cycle(snap)

    # Fixed cost: the same cluster with an empty queue (state set-up from nodes and running).
    empty = Snapshot(NOW, cluster.nodes, cluster.running, [])
    fixed = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        cycle(empty)
        fixed.append(time.perf_counter() - t)

    times: list[float] = []
    summary: dict[str, Any] | None = None
    violations: list[str] = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        result = cycle(snapshot)
        times.append(time.perf_counter() - t)
        s = _summary(result)
        if summary is None:
            summary = s
            violations = verify(snapshot, result)
        elif s != summary:
            raise AssertionError(f"cycle is not deterministic: {s} != {summary}")
        del result
    assert summary is not None
    rss_after = _max_rss_mib()

    # Peak Python heap of one cycle (tracemalloc slows the cycle, so it is a separate run).
    traced_peak: float | None = None
    if args.trace_memory:
        gc.collect()
        tracemalloc.start()
        tracemalloc.reset_peak()
        result = cycle(snapshot)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del result
        traced_peak = round(peak / 2**20, 1)

    best, median = min(times), statistics.median(times)
    decisions = summary["decisions"]
    return {
        "pending": n,
        "nodes": len(cluster.nodes),
        "running": len(cluster.running),
        "teams": len(cluster.policy.teams),
        "groups": len(cluster.policy.groups),
        "snapshot_build_s": round(build_s, 3),
        "times_s": [round(t, 4) for t in times],
        "best_s": round(best, 4),
        "median_s": round(median, 4),
        "fixed_best_s": round(min(fixed), 4),
        "decisions_per_s": round(decisions / best, 1),
        "decisions_per_s_median": round(decisions / median, 1),
        "us_per_decision": round(best / decisions * 1e6, 1),
        "tracemalloc_peak_mib": traced_peak,
        "max_rss_mib_before_cycle": round(rss_before, 1),
        "max_rss_mib": round(rss_after, 1),
        **summary,
        "invariant_violations": violations,
    }


# -- growth, reports -----------------------------------------------------------------------------


def growth(rows: list[dict[str, Any]], tolerance: float) -> dict[str, Any]:
    """Compare time(n)/time(n0) with n/n0 and n·log n / n0·log n0."""
    done = [r for r in rows if "best_s" in r and r["pending"] > 0]
    if len(done) < 2:
        return {"points": [], "within_n_log_n": None}
    base = done[0]
    n0, t0 = base["pending"], base["best_s"]
    m0 = max(t0 - base["fixed_best_s"], 1e-9)
    points = []
    ok = True
    for r in done:
        n, t = r["pending"], r["best_s"]
        nlogn = (n * math.log(n)) / (n0 * math.log(n0))
        ratio = t / t0
        marginal = max(t - r["fixed_best_s"], 1e-9) / m0
        point = {
            "pending": n,
            "n_ratio": round(n / n0, 2),
            "n_log_n_ratio": round(nlogn, 2),
            "time_ratio": round(ratio, 2),
            "marginal_time_ratio": round(marginal, 2),
        }
        if r is not base:
            prev = done[done.index(r) - 1]
            point["exponent_vs_previous"] = round(
                math.log(t / prev["best_s"]) / math.log(n / prev["pending"]), 2
            )
        points.append(point)
        ok = ok and marginal <= nlogn * tolerance
    return {
        "baseline_pending": n0,
        "tolerance": tolerance,
        "points": points,
        "within_n_log_n": ok,
        "note": "marginal = cycle time minus the same cycle with an empty queue (fixed set-up "
        "cost); within_n_log_n compares the marginal ratio with the n·log n ratio times the "
        "tolerance",
    }


COLUMNS = (
    ("pending", "pending", "{:,}"),
    ("best s", "best_s", "{:.3f}"),
    ("median s", "median_s", "{:.3f}"),
    ("fixed s", "fixed_best_s", "{:.3f}"),
    ("decisions/s", "decisions_per_s", "{:,.0f}"),
    ("µs/decision", "us_per_decision", "{:,.1f}"),
    ("admitted", "admissions", "{:,}"),
    ("preempted", "preemptions", "{:,}"),
    ("still pending", "still_pending", "{:,}"),
    ("heap peak MiB", "tracemalloc_peak_mib", "{:,.1f}"),
    ("max RSS MiB", "max_rss_mib", "{:,.1f}"),
)


def _cells(row: dict[str, Any]) -> list[str]:
    if "error" in row:
        return [f"{row['pending']:,}", row["error"]] + [""] * (len(COLUMNS) - 2)
    return ["n/a" if row.get(key) is None else fmt.format(row[key]) for _, key, fmt in COLUMNS]


def plain_table(rows: list[dict[str, Any]]) -> str:
    header = [title for title, _, _ in COLUMNS]
    body = [_cells(r) for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in body]
    return "\n".join(lines)


def _verdict(target: dict[str, Any]) -> str:
    if target["measured"] is None:
        return "not measured"
    return "met" if target["decisions_per_s_met"] else "NOT met"


def markdown(report: dict[str, Any]) -> str:
    rows, g, m, cfg = report["results"], report["growth"], report["machine"], report["config"]
    out = [
        "# Admission cycle benchmark",
        "",
        f"Generated by `bench/admission_cycle.py` on {m['date']}: {m['processor']}, "
        f"{m['cpu_count']} CPUs, Python {m['python']}, numpy {m['numpy']}; commit "
        f"{m['git_commit']}{' (src modified)' if m['src_modified'] else ''}; load average "
        f"{m['load_average_before'][0]} before, {m['load_average'][0]} after (a shared machine "
        "makes timings noisy).",
        "",
        f"Cluster: {cfg['nodes']:,} nodes, {cfg['teams']} teams in {cfg['groups']} groups, "
        f"{report['running']:,} running workloads (~{BUSY_FRACTION:.0%} busy), seed "
        f"{cfg['seed']}, starvation guard {cfg['starvation_guard']} s; best and median of "
        f"{cfg['repeat']} cycles.",
        "",
        "| " + " | ".join(t for t, _, _ in COLUMNS) + " |",
        "|" + "|".join("---:" for _ in COLUMNS) + "|",
    ]
    out += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    target = report["targets"]
    out += [
        "",
        f"Target ≥ {target['decisions_per_s']:,.0f} decisions/s at {target['at_pending']:,} "
        f"pending: **{_verdict(target)}**"
        + (f" ({target['measured']:,.0f}/s)." if target["measured"] is not None else "."),
        "",
        "## Growth",
        "",
        "| pending | n ratio | n·log n ratio | time ratio | marginal time ratio | local exponent |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for p in g["points"]:
        out.append(
            f"| {p['pending']:,} | {p['n_ratio']} | {p['n_log_n_ratio']} | {p['time_ratio']} "
            f"| {p['marginal_time_ratio']} | {p.get('exponent_vs_previous', '')} |"
        )
    verdict = {True: "within n·log n", False: "WORSE than n·log n", None: "not enough sizes"}
    out += [
        "",
        f"Growth: **{verdict[g['within_n_log_n']]}** ({g.get('note', '')}; tolerance "
        f"{g.get('tolerance', '')}).",
        "",
        "## Pending reasons and preemptions",
        "",
    ]
    for r in rows:
        if "error" in r:
            continue
        reasons = ", ".join(f"{k}: {v:,}" for k, v in r["pending_by_reason"].items())
        pre = ", ".join(f"{k}: {v}" for k, v in r["preemptions_by_reason"].items()) or "none"
        bad = r.get("invariant_violations") or []
        checks = "all invariants hold" if not bad else "INVARIANT VIOLATIONS: " + "; ".join(bad)
        out.append(
            f"- {r['pending']:,} pending: {reasons}. Preemptions: {pre}. "
            f"Admitted while borrowing: {r['borrowing_admissions']:,}. Checks: {checks}."
        )
    return "\n".join(out) + "\n"


# -- driver --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=Path("bench/results/admission_cycle.json"))
    p.add_argument("--sizes", default="1000,10000,50000", help="pending queue sizes")
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--teams", type=int, default=30)
    p.add_argument("--groups", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=3, help="cycles timed per size")
    p.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds allowed per size (subprocess)"
    )
    p.add_argument("--target", type=float, default=5000.0, help="decisions/s target")
    p.add_argument("--target-at", type=int, default=10000, help="queue size the target is for")
    p.add_argument("--tolerance", type=float, default=1.25, help="slack on the n·log n bound")
    p.add_argument(
        "--starvation-guard",
        default="600",
        help="policy's starvation_guard_seconds, or 'off' (default 600, the product default)",
    )
    p.add_argument(
        "--trace-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run one cycle under tracemalloc for its heap peak (slow: ~4x a cycle)",
    )
    p.add_argument("--one", type=int, metavar="N", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _child(args: argparse.Namespace, n: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--one",
        str(n),
        *("--nodes", str(args.nodes), "--teams", str(args.teams)),
        *("--groups", str(args.groups), "--seed", str(args.seed)),
        *("--repeat", str(args.repeat), "--starvation-guard", args.starvation_guard),
        "--trace-memory" if args.trace_memory else "--no-trace-memory",
    ]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"pending": n, "error": f"timed out after {args.timeout:.0f} s"}
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        last = proc.stderr.strip().splitlines()[-1:] or ["?"]
        return {"pending": n, "error": f"failed: {last[0]}", "stderr": proc.stderr[-4000:]}
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    row["wall_s"] = round(time.perf_counter() - started, 1)
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one is not None:
        row = measure_one(args, args.one)
        print(json.dumps(row))
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    load_before = [round(x, 2) for x in os.getloadavg()]
    rows = []
    for n in sizes:
        print(f"measuring {n:,} pending workloads ...", file=sys.stderr, flush=True)
        rows.append(_child(args, n))
    target_row = next(
        (r for r in rows if r["pending"] == args.target_at and "error" not in r), None
    )
    measured = target_row["decisions_per_s"] if target_row else None
    report: dict[str, Any] = {
        "benchmark": "admission_cycle",
        "machine": machine(),
        "config": {
            k: getattr(args, k)
            for k in (
                "sizes",
                "nodes",
                "teams",
                "groups",
                "seed",
                "repeat",
                "tolerance",
                "starvation_guard",
            )
        },
        "running": next((r["running"] for r in rows if "running" in r), 0),
        "results": rows,
        "growth": growth(rows, args.tolerance),
        "targets": {
            "decisions_per_s": args.target,
            "at_pending": args.target_at,
            "measured": measured,
            "decisions_per_s_met": measured is not None and measured >= args.target,
        },
    }
    report["machine"]["load_average_before"] = load_before
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(plain_table(rows))
    print()
    for p in report["growth"]["points"]:
        print(
            f"n={p['pending']:>7,}  n ratio {p['n_ratio']:>6}  n·log n ratio "
            f"{p['n_log_n_ratio']:>6}  time ratio {p['time_ratio']:>6}  marginal "
            f"{p['marginal_time_ratio']:>6}"
        )
    print(f"within n·log n: {report['growth']['within_n_log_n']}")
    print(
        f"target {args.target:,.0f} decisions/s at {args.target_at:,}: "
        f"{_verdict(report['targets'])}"
    )
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
