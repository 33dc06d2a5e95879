"""The Helios "Earth" cluster, May 2020: 16 teams' per-minute GPU demand, turned into jobs.

Files (``helios-earth/`` of the data folder, see the README's ``helios-earth/`` row):

- ``vc<ID>.csv.gz``, one per team (virtual cluster, VC): a row per minute from
  2020-05-01 00:00 to 2020-05-31 23:59 (44,640 rows) with ``running_gpu_num`` and
  ``pending_gpu_num`` (GPUs of running / waiting jobs), ``total_gpu_num`` (the VC's size), the
  same split into jobs of at least 8 GPUs (``*_noless_8``) and of fewer (``*_less_8``), and job
  counts.
- ``vc_gpu_quota_daily.csv``: each VC's GPU quota per day (2020-04-01 to 2020-09-28), for 25
  VCs and their ``total``; the 16 VCs with per-minute files hold all 856 GPUs of May.

What the loader builds:

- **Demand** of a team at minute ``t``: ``d(t) = running_gpu_num + pending_gpu_num`` (option
  ``demand="running"``: running only). Pending GPUs are work the team wanted but its VC could
  not hold, so a simulation that lets teams borrow can run it.
- **Jobs** reproduce ``d(t)`` exactly at every minute. Of the demand, ``b(t) = min(d(t),
  GPUs in jobs of >= 8 GPUs)`` runs as 8-GPU jobs -- ``floor(b/8)`` of them -- and the rest as
  1-GPU jobs; each of the two counts becomes jobs by
  :func:`~fleetshare.traces.common.jobs_from_counts` (a rise of ``k`` starts ``k`` jobs at
  that minute, a fall ends ``k`` of the running ones, the newest first, or random ones with
  ``end_order="random"``). ``resolution_minutes`` > 1 first coarsens both counts to steps
  of that many minutes, each the largest value within it (fewer, longer jobs that still cover
  the demand). Job sizes, counts and durations are therefore synthetic: only the
  per-team GPU demand over time is the trace's. A job's duration spans the time its GPUs
  were running *or* pending in Earth. The ``*_noless_8`` columns exceed the total in some
  minutes (they are not capped at the VC's size); they are used only to split the demand.
- **Quotas**: each VC's quota over the window is the most common daily value in
  ``vc_gpu_quota_daily.csv``; days that disagree are listed in the assumptions (2020-05-09
  gives all 840 GPUs to ``vcIya``, which has no per-minute data, while the per-minute
  ``total_gpu_num`` shows the 16 VCs unchanged that day).
- **Cluster**: ``ceil(total quota / gpus_per_node)`` nodes of ``gpus_per_node`` (8) GPUs --
  856 GPUs on 107 nodes. The data has no CPU or memory, so nodes offer and jobs request
  GPUs only.
- **Window**: ``start_day`` (days after 2020-05-01) and ``days`` select part of the month;
  jobs running at the window start are submitted at 0, jobs running at its end are cut there
  (label ``fleetshare.io/censored``).

The loader is deterministic; ``seed`` matters only with ``end_order="random"``.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fleetshare.inputs import InputError, read_gzip_text, read_text
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import GPU
from fleetshare.model.workload import Workload
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
    cell,
    coarsen,
    csv_rows,
    data_root,
    gpu_nodes,
    gpu_team,
    jobs_from_counts,
    modal,
    nodes_for,
    require,
    single_pod,
    timed_rows,
    window,
)

FOLDER = "helios-earth"
SECTION = "helios-earth/"
QUOTA_FILE = "vc_gpu_quota_daily.csv"
MONTH_START = "2020-05-01T00:00:00"
LARGE = 8
"""Size of the jobs that carry the >= 8-GPU part of the demand."""

_COLUMNS = (
    "running_gpu_num",
    "pending_gpu_num",
    "total_gpu_num",
    "running_gpu_num_noless_8",
    "pending_gpu_num_noless_8",
)


class VcSeries:
    """One VC's per-minute columns (times in seconds from 2020-05-01 00:00)."""

    def __init__(self, name: str, times: FloatArray, columns: dict[str, IntArray]) -> None:
        self.name = name
        self.times = times
        self.columns = columns


def vc_files(folder: Path) -> list[Path]:
    """The per-minute files, sorted by VC name."""
    files = sorted(p for p in folder.glob("vc*.csv.gz"))
    if not files:
        require(folder / "vc*.csv.gz", SECTION)
    return files


def read_vc(path: Path) -> VcSeries:
    """Read one ``vc*.csv.gz`` (numpy, a few tens of milliseconds)."""
    with io.StringIO(read_gzip_text(path)) as f:
        header = f.readline().rstrip("\n").split(",")
        lines = f.read().splitlines()
    missing = [c for c in ("time", *_COLUMNS) if c not in header]
    if missing:
        raise InputError(str(path), f"missing columns {missing}")
    stamps, data = timed_rows(str(path), lines, [header.index(c) for c in _COLUMNS])
    t0 = np.datetime64(MONTH_START, "s")
    times = (stamps - t0).astype(np.float64)
    columns = {c: data[:, i] for i, c in enumerate(_COLUMNS)}
    return VcSeries(path.name.removesuffix(".csv.gz"), times, columns)


def read_quotas(path: Path) -> dict[str, dict[str, int]]:
    """Daily quota per VC: ``{date: {vc: gpus}}`` (checked: whole, non-negative counts;
    problems name the file, row and column)."""
    source = str(path)
    out: dict[str, dict[str, int]] = {}
    for row in csv_rows(source, read_text(path), ("date",)):
        vcs = [vc for vc in row[1] if vc not in ("date", "total")]
        out[row[1]["date"]] = {vc: int(cell(source, row, vc, whole=True)) for vc in vcs}
    return out


def _in_window(
    times: FloatArray, values: IntArray, lo: float, hi: float
) -> tuple[FloatArray, IntArray]:
    """The samples in force during ``[lo, hi)``, with times relative to ``lo``."""
    i0 = max(int(np.searchsorted(times, lo, side="right")) - 1, 0)
    i1 = int(np.searchsorted(times, hi, side="left"))
    t = times[i0:i1] - lo
    t[0] = max(float(t[0]), 0.0)
    return t, values[i0:i1]


def _day_mask(times: FloatArray, date: str) -> npt.NDArray[np.bool_]:
    """Samples falling on ``date`` (YYYY-MM-DD)."""
    day = (np.datetime64(date, "D") - np.datetime64(MONTH_START, "D")).astype(np.int64)
    return np.asarray((times >= day * DAY) & (times < (day + 1) * DAY))


def _describe_row(row: dict[str, int], quotas: dict[str, int]) -> str:
    """What a daily quota row changes: ``vcIya 840, 16 VCs 0``."""
    other = [f"{vc} {q}" for vc, q in row.items() if vc not in quotas and q]
    by_value: dict[int, list[str]] = {}
    for vc, q in quotas.items():
        if row.get(vc, 0) != q:
            by_value.setdefault(row.get(vc, 0), []).append(vc)
    ours = [
        f"{len(vcs)} VCs {q}" if len(vcs) > 3 else ", ".join(f"{vc} {q}" for vc in vcs)
        for q, vcs in sorted(by_value.items())
    ]
    return ", ".join(other + ours)


def load(
    *,
    start_day: float = 0,
    days: float | None = None,
    demand: str = "running+pending",
    gpus_per_node: int = 8,
    resolution_minutes: int = 1,
    end_order: EndOrder = "lifo",
    seed: int = 0,
    data_dir: str | Path | None = None,
) -> Trace:
    """Load Helios Earth (see the module docstring for every rule)."""
    if demand not in ("running+pending", "running"):
        raise ValueError(f"demand must be 'running+pending' or 'running', got {demand!r}")
    if gpus_per_node < LARGE:
        raise ValueError(
            f"gpus_per_node must be at least {LARGE} (8-GPU jobs), got {gpus_per_node}"
        )
    folder = data_root(data_dir) / FOLDER
    quota_path = require(folder / QUOTA_FILE, SECTION)
    series = [read_vc(p) for p in vc_files(folder)]
    available = min(float(s.times[-1]) + MINUTE for s in series)
    lo, hi = window(start_day, days, available)

    # quotas: the most common daily value over the window's days
    daily = read_quotas(quota_path)
    first = np.datetime64(MONTH_START, "D")
    dates = [str(first + np.timedelta64(d, "D")) for d in range(int(lo // DAY), int(-(-hi // DAY)))]
    missing_days = [d for d in dates if d not in daily]
    if missing_days:
        raise ValueError(f"{quota_path}: no quota for {missing_days}")
    assumptions: list[str] = []
    quotas: dict[str, int] = {}
    odd_dates: set[str] = set()
    for s in series:
        if s.name not in daily[dates[0]]:
            raise ValueError(f"{quota_path}: no column for {s.name}")
        values = [daily[d][s.name] for d in dates]
        quotas[s.name] = modal(values)
        odd_dates.update(d for d, v in zip(dates, values, strict=True) if v != quotas[s.name])
        size = modal(s.columns["total_gpu_num"][(s.times >= lo) & (s.times < hi)].tolist())
        if size != quotas[s.name]:
            assumptions.append(
                f"{s.name}: quota {quotas[s.name]} GPUs from {QUOTA_FILE}, but its per-minute "
                f"total_gpu_num is mostly {size}."
            )
    if odd_dates:
        rows = "; ".join(f"{d}: {_describe_row(daily[d], quotas)}" for d in sorted(odd_dates))
        steady = all(
            set(s.columns["total_gpu_num"][_day_mask(s.times, d)].tolist()) <= {quotas[s.name]}
            for s in series
            for d in odd_dates
        )
        assumptions.append(
            f"Quotas are each VC's most common daily value in {QUOTA_FILE} over the window; "
            f"rows that differ are ignored ({rows}); the VCs' per-minute total_gpu_num "
            + ("is unchanged on those days." if steady else "changes on those days too.")
        )
    total_quota = sum(quotas.values())
    n_nodes = nodes_for(total_quota, gpus_per_node)

    workloads: list[Workload] = []
    curves: dict[str, DemandCurve] = {}
    span = hi - lo
    grid: FloatArray | None = None
    cluster: FloatArray | None = None
    counts = {"large": 0, "small": 0, "censored": 0}
    split_excess = 0
    for s in series:
        run = s.columns["running_gpu_num"]
        big = s.columns["running_gpu_num_noless_8"]
        if demand == "running+pending":
            d = run + s.columns["pending_gpu_num"]
            big = big + s.columns["pending_gpu_num_noless_8"]
        else:
            d = run
        t, dw = _in_window(s.times, d, lo, hi)
        _, bw = _in_window(s.times, big, lo, hi)
        split_excess += int((bw > dw).sum())
        tj, dj = coarsen(t, dw, resolution_minutes)
        _, bj = coarsen(t, bw, resolution_minutes)
        large = np.minimum(bj, dj) // LARGE
        small = dj - LARGE * large
        curves[s.name] = DemandCurve(
            t, dw.astype(np.float64), "GPUs", span, f"{s.name}: GPUs demanded ({demand})"
        )
        if grid is None or cluster is None:
            grid, cluster = t, dw.astype(np.float64)
        elif t.shape == grid.shape and np.array_equal(t, grid):
            cluster = cluster + dw
        else:
            cluster = cluster + curves[s.name].at(grid)
        for size, count in ((LARGE, large), (1, small)):
            kind = "large" if size == LARGE else "small"
            jobs = jobs_from_counts(tj, count, span, end_order, seed + size)
            for k, (start, stop) in enumerate(jobs):
                labels = {TRACE_LABEL: "helios", SYNTHETIC_LABEL: "true"}
                if stop >= span:
                    labels[CENSORED_LABEL] = "true"
                    counts["censored"] += 1
                workloads.append(
                    single_pod(
                        f"{s.name}-{size}g-{k:05d}",
                        s.name,
                        {GPU: size * MILLI},
                        start,
                        stop - start,
                        labels=labels,
                    )
                )
            counts[kind] += len(jobs)
    if grid is not None and cluster is not None:
        curves["cluster"] = DemandCurve(
            grid, cluster, "GPUs", span, f"all teams: GPUs demanded ({demand})"
        )
    workloads.sort(key=lambda w: (w.submit_time, w.name))

    policy = {
        "teams": [gpu_team(vc, q) for vc, q in sorted(quotas.items())],
        "notes": [f"Helios Earth VC quotas ({QUOTA_FILE})"],
    }
    columns = "running_gpu_num" if demand == "running" else "running_gpu_num + pending_gpu_num"
    ending = "most recently started" if end_order == "lifo" else "randomly chosen (seeded)"
    assumptions += [
        f"Team demand = {columns} per minute"
        + (
            "; pending GPUs were waiting in Earth (VCs could not borrow), so a policy that "
            "lends and borrows can run them."
            if demand != "running"
            else "; GPUs pending in Earth are left out."
        ),
        f"Jobs are synthetic: per team, min(demand, GPUs in >= 8-GPU jobs) // 8 run as 8-GPU "
        f"jobs and the rest as 1-GPU jobs; a rise in either count starts jobs that minute, a fall "
        f"ends the {ending} ones. "
        + (
            "The jobs reproduce each team's per-minute demand exactly"
            if resolution_minutes == 1
            else f"The jobs follow each team's demand coarsened to {resolution_minutes}-minute "
            "steps, each the largest value in it (never below the data)"
        )
        + "; real job sizes, counts and durations are not in the data.",
        "A synthetic job's duration covers the time its GPUs were "
        + ("running or pending in Earth." if demand != "running" else "running in Earth."),
        f"The >= 8-GPU columns exceed the team's demand in {split_excess} team-minutes (they "
        "are not capped at the VC size); the 8-GPU share is capped at the demand there.",
        f"Cluster: {n_nodes} nodes x {gpus_per_node} GPUs = {n_nodes * gpus_per_node} GPUs, "
        f"enough for the {total_quota} GPUs of quota; Earth's real node count and CPU/memory "
        "are not in the data, so nodes offer and jobs request GPUs only.",
        "Teams share by fleetshare's default (lend and borrow); Earth's VCs could not borrow "
        "(set sharing: DontLend to replay that).",
        f"Window: day {start_day:g} to {hi / DAY:g} of May 2020; jobs running at the window "
        "start are submitted at 0 and jobs running past its end are cut there.",
    ]
    start_stamp = np.datetime64(MONTH_START, "s") + np.timedelta64(int(lo), "s")
    return Trace(
        name="helios",
        description="Helios Earth, May 2020: 16 teams' per-minute GPU demand as synthetic jobs",
        nodes=gpu_nodes("earth", n_nodes, gpus_per_node),
        workloads=workloads,
        policy=policy,
        assumptions=assumptions,
        duration=span,
        demand=curves,
        start=str(start_stamp),
        sources=[*vc_files(folder), quota_path],
        facts={
            "teams": len(series),
            "minutes": round(span / MINUTE),
            "quota_gpus": total_quota,
            "jobs_8gpu": counts["large"],
            "jobs_1gpu": counts["small"],
            "censored_jobs": counts["censored"],
            "peak_demand_gpus": curves["cluster"].peak if "cluster" in curves else 0.0,
        },
    )
