"""Microsoft Philly, Oct-Dec 2017: per-minute active vs total nodes, as demand and jobs.

File (``philly/philly_node_sequence.csv.gz`` of the data folder, see the README's ``philly/``
row): ``time, active, total`` -- how many of the cluster's nodes ran work each minute, from
2017-10-03 00:00 to 2017-12-15 18:42 (105,644 rows, 73.78 days). ``total`` is 420 in 97% of
the minutes; it reads 552 on 2017-11-01/02 and 174 for the hour 2017-11-05 01:00 (the night
US daylight saving time ended), and ``active`` peaks at 450 during the 552-node days. One gap:
no rows from 2017-10-25 14:00 to 2017-10-26 00:00 (10 hours); the curve holds its last value
(317) across it. After the gap ``active`` reads 0 for 18 hours (1,081 minutes, 2017-10-26
00:00 to 18:00, ``total`` still 420), then 1 and 7, and 248 at 18:06: most likely the
logging's outage, not an idle cluster (the days around hold ~290-320 active nodes); the
loader keeps it as recorded, so the 14-day windows holding it (start days 10-23) see the
cluster empty for 18 hours and ~250 nodes of jobs arrive within six minutes after. Two
shorter runs of zero: 2017-12-03 14:57-15:06 (10 minutes) and 2017-12-06 17:43-18:22 (40).

What the loader builds (one team, ``philly``):

- **Demand curves**: ``active_nodes`` and ``total_nodes`` (nodes) and ``gpus`` (``active *
  gpus_per_node``), step functions over the data's own timestamps.
- **Jobs**: whole-node jobs (one pod of ``gpus_per_node`` GPUs) whose concurrent count
  follows ``active`` exactly, by :func:`~fleetshare.traces.common.jobs_from_counts` (a rise
  of ``k`` starts ``k`` jobs, a fall ends the newest ``k``, or random ones with
  ``end_order="random"``); ``resolution_minutes`` > 1 first coarsens the curve to steps of
  that many minutes, each the largest value within it (fewer, longer jobs that still cover
  the demand; the per-minute churn makes 164,637 jobs at 1 minute). The node sequence says
  how many nodes were busy, not which jobs ran: sizes and durations are synthetic.
- **Cluster**: ``nodes`` (default 420, the usual ``total``) nodes of ``gpus_per_node`` GPUs
  (default 8: the data has no GPU count; Philly mixed 2- and 8-GPU servers); minutes with
  more active nodes than that leave jobs pending. The team's quota is every GPU.
- **Window**: ``start_day`` / ``days`` as for Helios.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from fleetshare.inputs import InputError, read_gzip_text
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import GPU
from fleetshare.traces.common import (
    CENSORED_LABEL,
    DAY,
    MINUTE,
    SYNTHETIC_LABEL,
    TRACE_LABEL,
    DemandCurve,
    EndOrder,
    FloatArray,
    IntArray,
    Trace,
    coarsen,
    data_root,
    gpu_nodes,
    gpu_team,
    jobs_from_counts,
    modal,
    require,
    single_pod,
    timed_rows,
    window,
)

FILE = "philly/philly_node_sequence.csv.gz"
SECTION = "philly/"
TEAM = "philly"


def read_sequence(path: Path) -> tuple[np.datetime64, FloatArray, IntArray, IntArray]:
    """``(first timestamp, seconds since it, active, total)``."""
    with io.StringIO(read_gzip_text(path)) as f:
        header = f.readline().rstrip("\n").split(",")
        lines = f.read().splitlines()
    if header[:3] != ["time", "active", "total"]:
        raise InputError(str(path), f"expected columns time,active,total; got {header}")
    stamps, data = timed_rows(str(path), lines, [1, 2])
    over = np.flatnonzero(data[:, 0] > data[:, 1])
    if over.size:
        row = int(over[0])
        raise InputError(
            str(path), f"row {row + 2}: {data[row, 0]} active nodes of {data[row, 1]} in all"
        )
    t0 = stamps[0]
    return t0, (stamps - t0).astype(np.float64), data[:, 0], data[:, 1]


def gaps(times: FloatArray, step: float = MINUTE) -> list[tuple[float, float]]:
    """``(from, to)`` of every interval longer than ``step`` between samples."""
    d = np.diff(times)
    return [(float(times[i]), float(times[i + 1])) for i in np.flatnonzero(d > step)]


def load(
    *,
    start_day: float = 0,
    days: float | None = None,
    gpus_per_node: int = 8,
    nodes: int | None = None,
    resolution_minutes: int = 1,
    end_order: EndOrder = "lifo",
    seed: int = 0,
    data_dir: str | Path | None = None,
) -> Trace:
    """Load the Philly node sequence (see the module docstring for every rule)."""
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be positive, got {gpus_per_node}")
    path = require(data_root(data_dir) / FILE, SECTION)
    t0, times, active, total = read_sequence(path)
    available = float(times[-1]) + MINUTE
    lo, hi = window(start_day, days, available)
    i0 = max(int(np.searchsorted(times, lo, side="right")) - 1, 0)
    i1 = int(np.searchsorted(times, hi, side="left"))
    t = times[i0:i1] - lo
    t[0] = max(float(t[0]), 0.0)
    act, tot = active[i0:i1], total[i0:i1]
    t_jobs, act_jobs = coarsen(t, act, resolution_minutes)
    span = hi - lo
    n_nodes = modal(total.tolist()) if nodes is None else nodes
    if n_nodes < 1:
        raise ValueError(f"nodes must be positive, got {n_nodes}")

    jobs = jobs_from_counts(t_jobs, act_jobs, span, end_order, seed)
    workloads = []
    for k, (start, stop) in enumerate(jobs):
        labels = {TRACE_LABEL: "philly", SYNTHETIC_LABEL: "true"}
        if stop >= span:
            labels[CENSORED_LABEL] = "true"
        workloads.append(
            single_pod(
                f"philly-{k:06d}",
                TEAM,
                {GPU: gpus_per_node * MILLI},
                start,
                stop - start,
                labels=labels,
            )
        )
    curves = {
        "active_nodes": DemandCurve(t, act.astype(np.float64), "nodes", span, "nodes running work"),
        "total_nodes": DemandCurve(t, tot.astype(np.float64), "nodes", span, "nodes in Philly"),
        "gpus": DemandCurve(
            t,
            (act * gpus_per_node).astype(np.float64),
            "GPUs",
            span,
            f"active nodes x {gpus_per_node} GPUs",
        ),
    }
    holes = [(a, b) for a, b in gaps(times) if b > lo and a < hi]
    hole_text = "; ".join(
        f"{t0 + np.timedelta64(int(a), 's')} to {t0 + np.timedelta64(int(b), 's')}"
        for a, b in holes
    )
    size_from = "the usual total" if nodes is None else "given"
    assumptions = [
        f"Demand = active nodes per minute; each active node is one whole-node job of "
        f"{gpus_per_node} GPUs (the data has no GPU count; Philly mixed 2- and 8-GPU servers).",
        "Jobs are synthetic: a rise in active nodes starts jobs that minute, a fall ends the "
        + ("most recently started ones" if end_order == "lifo" else "randomly chosen (seeded) ones")
        + (
            "; their concurrent count reproduces the active-node curve exactly."
            if resolution_minutes == 1
            else f"; they follow the curve coarsened to {resolution_minutes}-minute steps, each "
            "the largest value in it (never below the data)."
        ),
        f"Cluster: {n_nodes} nodes x {gpus_per_node} GPUs ({size_from}); "
        f"active exceeds it in {int((act > n_nodes).sum())} minutes of the window, whose extra "
        "jobs wait. One team, 'philly', with all GPUs as quota.",
        "Jobs running at the window start are submitted at 0; jobs running past its end are "
        "cut there.",
    ]
    if holes:
        assumptions.append(f"No data {hole_text}: the last value is held across the gap.")
    return Trace(
        name="philly",
        description="Microsoft Philly 2017: per-minute active nodes as whole-node jobs",
        nodes=gpu_nodes("philly", n_nodes, gpus_per_node),
        workloads=workloads,
        policy={
            "teams": [gpu_team(TEAM, n_nodes * gpus_per_node)],
            "notes": ["Philly node sequence: one team holding the whole cluster"],
        },
        assumptions=assumptions,
        duration=span,
        demand=curves,
        start=str(t0 + np.timedelta64(int(lo), "s")),
        sources=[path],
        facts={
            "rows": int(act.size),
            "span_days": round(span / DAY, 2),
            "active_peak": int(act.max()),
            "active_mean": round(float(curves["active_nodes"].mean()), 1),
            "jobs": len(workloads),
            "quota_gpus": n_nodes * gpus_per_node,
            "gaps": len(holes),
        },
    )
