"""Benchmark: the provisioner on the shape of Karpenter's scheduling benchmark.

Karpenter's ``scheduling_benchmark_test.go`` schedules a diverse mix of pods onto 400 fake
instance types (``fake.InstanceTypes(400)``) and reports pods per second (about 560 pods/s at
its largest sizes). This script builds the same kind of problem for
:func:`fleetshare.autoscaling.provisioner.plan_nodes` and measures, at 1k / 5k / 20k pods:

- **pods/s**: pods ÷ wall seconds of turning the pod list into pod shapes plus ``plan_nodes``;
- **nodes** and **hourly cost** of the plan, the LP **lower bound** and the **gap** to it;
- whether every pod is placed and the plan is valid (an independent check of every planned
  node: resources, pods per node, zones, spread skew).

Instance types (as ``fake.InstanceTypes``): type ``i`` (i = 0..399) has ``i+1`` vCPU,
``2(i+1)`` GiB memory and ``10(i+1)`` pods, minus Karpenter's fake kube-reserved overhead of
100m CPU and 10Mi memory; price 0.1 per vCPU + 0.1 per GiB per hour; on-demand in three zones
at the same price. One node pool may launch all of them.

Pods: CPU requests drawn from {100, 250, 500, 1000, 1500}m and memory from {100, 256, 512,
1024, 2048, 4096}Mi (numpy ``default_rng(seed)``), a fifth each of

- generic pods (requests drawn per pod),
- zonal topology spread (maxSkew 1 over zones),
- hostname topology spread (maxSkew 1 over hosts: at most one per new node),
- zonal pod self-affinity (all in one zone),
- hostname pod anti-affinity (at most one per node).

Constrained pods come in *deployments* of 10-50 pods (size drawn uniformly), each with one pod
template, so its pods share requests and the constraint applies within the deployment (its
label selector). Karpenter's benchmark draws requests per pod even within a label group and
also has hostname pod affinity, which fleetshare's per-shape constraints do not model; its
anti-affinity pods all share one label (one pod per node overall). See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import scipy

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import Plan, PodShape, plan_nodes
from fleetshare.model.catalog import Catalog, InstanceType
from run_info import machine

ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
CPU_MILLI = (100, 250, 500, 1000, 1500)
MEMORY_MI = (100, 256, 512, 1024, 2048, 4096)
KINDS = ("generic", "zone-spread", "host-spread", "zone-affinity", "host-anti-affinity")
MI = 2**20
GI = 2**30


def instance_types(count: int = 400) -> Catalog:
    """``fake.InstanceTypes(count)``: i+1 vCPU, 2(i+1) GiB, 10(i+1) pods."""
    out = []
    for i in range(count):
        vcpu = i + 1
        out.append(
            InstanceType(
                name=f"fake-it-{i}",
                family="fake",
                arch="amd64",
                vcpu=vcpu,
                memory_mib=2 * vcpu * 1024,
                gpu_count=0,
                gpu_name=None,
                gpu_manufacturer=None,
                gpu_memory_mib=0,
                accelerator_count=0,
                accelerator_name=None,
                efa=0,
                allocatable={
                    "cpu": vcpu * 1000 - 100,
                    "memory": (2 * vcpu * GI - 10 * MI) * 1000,
                    "pods": 10 * vcpu * 1000,
                },
                price_per_hour=round(0.1 * vcpu + 0.1 * 2 * vcpu, 6),
            )
        )
    return Catalog(out)


def offerings(catalog: Catalog) -> list[Offering]:
    return [
        Offering(inst.name, zone, "on-demand", float(inst.price_per_hour or 0))
        for inst in catalog
        for zone in ZONES
    ]


def make_pods(count: int, seed: int, group_min: int, group_max: int) -> list[dict[str, Any]]:
    """The pending pods as plain records (what a controller would list from the API)."""
    rng = np.random.default_rng(seed)
    pods: list[dict[str, Any]] = []
    per_kind = [count // len(KINDS)] * len(KINDS)
    per_kind[0] += count - sum(per_kind)  # the remainder are generic, as in Karpenter's
    for kind, n in zip(KINDS, per_kind, strict=True):
        if kind == "generic":
            cpus = rng.choice(CPU_MILLI, n)
            mems = rng.choice(MEMORY_MI, n)
            pods += [
                {"kind": kind, "group": None, "cpu": int(c), "memory_mi": int(m)}
                for c, m in zip(cpus, mems, strict=True)
            ]
            continue
        made, group = 0, 0
        while made < n:
            size = min(n - made, int(rng.integers(group_min, group_max + 1)))
            cpu, mem = int(rng.choice(CPU_MILLI)), int(rng.choice(MEMORY_MI))
            name = f"{kind}-{group}"
            pods += [{"kind": kind, "group": name, "cpu": cpu, "memory_mi": mem}] * size
            made += size
            group += 1
    return pods


def build_shapes(pods: list[dict[str, Any]]) -> list[PodShape]:
    """Group pods into shapes: generic pods by requests, the others by deployment."""
    groups: dict[tuple[str, str | None, int, int], int] = defaultdict(int)
    for pod in pods:
        groups[(pod["kind"], pod["group"], pod["cpu"], pod["memory_mi"])] += 1
    shapes = []
    for (kind, group, cpu, mem), n in sorted(groups.items(), key=lambda kv: str(kv[0])):
        requests = (("cpu", cpu), ("memory", mem * MI * 1000))
        shapes.append(
            PodShape(
                requests=requests,
                count=n,
                workloads=(group,) if group else (),
                zone_spread=kind == "zone-spread",
                same_zone=kind == "zone-affinity",
                max_per_node=1 if kind in ("host-spread", "host-anti-affinity") else None,
            )
        )
    return shapes


def check_plan(plan: Plan, shapes: list[PodShape], catalog: Catalog) -> list[str]:
    """Independent check of the plan's nodes; returns violations (none expected)."""
    bad: list[str] = []
    placed = Counter[int]()
    zones: dict[int, Counter[str]] = defaultdict(Counter)
    for n, node in enumerate(plan.nodes):
        alloc = catalog.get(node.instance_type).allocatable
        used = Counter[str]()
        for s, k in node.pods:
            shape = shapes[s]
            placed[s] += k
            zones[s][node.zone] += k
            for r, v in shape.requests:
                used[r] += v * k
            used["pods"] += 1000 * k
            if shape.max_per_node is not None and k > shape.max_per_node:
                bad.append(f"node {n}: {k} pods of shape {s} (max {shape.max_per_node})")
        for r, v in used.items():
            if v > alloc.get(r, 0):
                bad.append(f"node {n} ({node.instance_type}): {r} {v} > {alloc.get(r, 0)}")
    for s, shape in enumerate(shapes):
        if s not in plan.unplaceable and placed[s] != shape.count:
            bad.append(f"shape {s}: {placed[s]} of {shape.count} pods placed")
        if shape.same_zone and len(zones[s]) > 1:
            bad.append(f"shape {s}: same-zone pods in {sorted(zones[s])}")
        if shape.zone_spread and placed[s]:
            counts = [zones[s].get(z, 0) for z in ZONES]
            if max(counts) - min(counts) > 1:
                bad.append(f"shape {s}: zone counts {counts}")
    return bad


def measure(
    n: int, args: argparse.Namespace, catalog: Catalog, offers: list[Offering]
) -> dict[str, Any]:
    pools = [NodePool(name="default", families=["fake"])]
    pods = make_pods(n, args.seed, args.group_min, args.group_max)
    times: list[float] = []
    plan = Plan()
    shapes: list[PodShape] = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        shapes = build_shapes(pods)
        plan = plan_nodes(
            shapes,
            pools,
            catalog,
            offers,
            time_limit=args.time_limit,
            target_gap=args.target_gap,
        )
        times.append(time.perf_counter() - started)
    best = min(times)
    violations = check_plan(plan, shapes, catalog)
    row = {
        "pods": n,
        "shapes": len(shapes),
        "best_s": round(best, 3),
        "median_s": round(float(np.median(times)), 3),
        "pods_per_s": round(n / best, 1),
        "nodes": len(plan.nodes),
        "hourly_cost": round(plan.hourly_cost, 4),
        "lower_bound": round(plan.lower_bound, 4),
        "bound_is_proven": plan.bound_is_proven,
        "bound_kind": (
            "LP optimum (column generation converged)"
            if plan.stats.get("lp_converged")
            else "column generation (Farley)"
            if plan.lower_bound > plan.stats.get("resource_bound", 0) + 1e-9
            else "resource prices (a feasible dual of the master LP)"
        ),
        "gap": round(plan.gap, 5),
        "method": plan.method,
        "pods_not_planned": sum(shapes[s].count for s in plan.unplaceable),
        "plan_valid": not violations,
        "violations": violations[:10],
        "solver": {k: round(v, 4) for k, v in plan.stats.items()},
        "timings_s": [round(t, 3) for t in times],
    }
    return row


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sizes", default="1000,5000,20000", help="pod counts, comma separated")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--repeat", type=int, default=3, help="timed runs per size (best reported)")
    p.add_argument("--group-min", type=int, default=10, help="smallest deployment")
    p.add_argument("--group-max", type=int, default=50, help="largest deployment")
    p.add_argument("--time-limit", type=float, default=10.0, help="plan_nodes time_limit")
    p.add_argument(
        "--target-gap",
        type=float,
        default=0.02,
        help="plan_nodes target_gap: 0 forces column generation (slower, tighter bound)",
    )
    p.add_argument("--target", type=float, default=2000.0, help="pods/s wanted at --target-at")
    p.add_argument("--target-at", type=int, default=20000)
    p.add_argument("--gap-target", type=float, default=0.03)
    p.add_argument("--out", type=Path, default=Path("bench/results/karpenter_shape.json"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    catalog = instance_types()
    offers = offerings(catalog)
    load_before = [round(x, 2) for x in os.getloadavg()]
    rows = []
    for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
        print(f"planning {n:,} pods ...", file=sys.stderr, flush=True)
        rows.append(measure(n, args, catalog, offers))
        r = rows[-1]
        print(
            f"{r['pods']:>7,} pods  {r['shapes']:>4} shapes  {r['best_s']:>7.3f} s  "
            f"{r['pods_per_s']:>9,.0f} pods/s  {r['nodes']:>5} nodes  "
            f"cost {r['hourly_cost']:>10.2f}"
            f"  bound {r['lower_bound']:>10.2f}  gap {r['gap']:.2%}  {r['method']}"
            f"  valid {r['plan_valid']}",
            flush=True,
        )
    at = next((r for r in rows if r["pods"] == args.target_at), None)
    report = {
        "benchmark": "karpenter_shape",
        "machine": machine(scipy=scipy.__version__),
        "config": {
            "sizes": args.sizes,
            "seed": args.seed,
            "repeat": args.repeat,
            "group_size": [args.group_min, args.group_max],
            "time_limit": args.time_limit,
            "target_gap": args.target_gap,
            "instance_types": 400,
            "zones": list(ZONES),
        },
        "results": rows,
        "targets": {
            "pods_per_s": args.target,
            "at_pods": args.target_at,
            "measured": at["pods_per_s"] if at else None,
            "pods_per_s_met": bool(at and at["pods_per_s"] >= args.target),
            "gap": args.gap_target,
            "gap_met_where_proven": all(
                r["gap"] <= args.gap_target for r in rows if r["bound_is_proven"]
            ),
            "karpenter_reported_pods_per_s": 560,
        },
    }
    report["machine"]["load_average_before"] = load_before
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
