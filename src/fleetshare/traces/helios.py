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
  ``demand="running"``: running only, pending GPUs left out). Pending GPUs are work the team
  wanted but its VC could not hold, so a simulation that lets teams borrow can run it.
- **Jobs** (:func:`fleetshare.traces.synthesis.queue_jobs`, per team and size class): the
  class of jobs of >= 8 GPUs holds ``min(*_gpu_num_noless_8, *_gpu_num)`` rounded down to whole
  8-GPU nodes (the ``noless_8`` columns are not capped at the VC size; some minutes exceed the
  total), the class below 8 GPUs the rest, so the two add up to the VC's running and pending
  GPUs. Each class is a queue: when its pending GPUs fall, the oldest waiting jobs start; when
  its running GPUs must fall, the most recently started jobs end (``end_order="random"``:
  seeded random ones); running beyond what left the queue is jobs that start without waiting;
  pending that rises is jobs joining the queue. A job is *submitted when it started waiting*
  (or running, if it never waited) and its *duration is its run only*: the work asked for is
  what ran in Earth, and what was pending waits once (in the simulation, if the policy makes it
  wait). Job counts: the data's running and pending job counts per class say how many jobs a
  rise is; the sizes are the most probable split under :data:`SMALL_SIZES` /
  :data:`LARGE_SIZES` (an assumption, stated in the report; capped at the team's quota). A job
  of 8 GPUs or more is one gang of 8-GPU pods. Where sizes cannot match a fall exactly, the
  smallest larger job ends and the rest start afresh, so the running GPUs stay exact.
  ``resolution_minutes`` > 1 first coarsens every count to steps of that many minutes, each the
  largest value within it (fewer, longer jobs that still cover the data). The label
  :data:`EARTH_START_LABEL` keeps when a job started running in Earth.
- **Quotas**: each VC's quota over the window is the most common daily value in
  ``vc_gpu_quota_daily.csv``; days that disagree are listed in the assumptions (2020-05-09
  gives all 840 GPUs to ``vcIya``, which has no per-minute data, while the per-minute
  ``total_gpu_num`` shows the 16 VCs unchanged that day).
- **Cluster**: ``ceil(total quota / gpus_per_node)`` nodes of ``gpus_per_node`` (8) GPUs --
  856 GPUs on 107 nodes. The data has no CPU or memory, so nodes offer and jobs request
  GPUs only.
- **Teams**: ``clusters`` (a list of VC names) keeps those VCs only -- their per-minute files,
  their quotas, and a cluster of their quotas' size: a sub-cluster of Earth in which those
  teams share only with each other (None: all 16).
- **Window**: ``start_day`` (days after 2020-05-01) and ``days`` select part of the month;
  jobs running or waiting at the window start are submitted at 0, jobs running at its end are
  cut there (label ``fleetshare.io/censored``); a job still waiting at the end asks for the
  rest of the window.
- **Policy**: the VC quotas, and no starvation guard (``starvation_guard_seconds``, default
  None): Earth's scheduler let small jobs pass a waiting large one, and the guard's
  reservations would make the static replay wait far longer than Earth did.

The loader is deterministic; ``seed`` matters only with ``end_order="random"``.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fleetshare.inputs import InputError, read_gzip_text, read_text
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import GPU
from fleetshare.model.workload import PodSet, Workload
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
    modal,
    nodes_for,
    require,
    timed_rows,
    window,
)
from fleetshare.traces.synthesis import queue_jobs

FOLDER = "helios-earth"
SECTION = "helios-earth/"
QUOTA_FILE = "vc_gpu_quota_daily.csv"
MONTH_START = "2020-05-01T00:00:00"
LARGE = 8
"""GPUs per pod of the jobs of at least 8 GPUs (one pod per node)."""
EARTH_START_LABEL = "fleetshare.io/earth-start"
"""On a synthetic job: when it started running in Earth (seconds from the window start); absent
for a job still waiting at the end. Its wait in Earth is this minus its submission time."""

_COLUMNS = (
    "running_gpu_num",
    "pending_gpu_num",
    "total_gpu_num",
    "running_gpu_num_noless_8",
    "pending_gpu_num_noless_8",
    "running_job_num_less_8",
    "running_job_num_noless_8",
    "pending_job_num_less_8",
    "pending_job_num_noless_8",
)

SMALL_SIZES: dict[int, float] = {
    1: 0.55,
    2: 0.2,
    4: 0.2,
    3: 0.0125,
    5: 0.0125,
    6: 0.0125,
    7: 0.0125,
}
"""Prior over the sizes (GPUs) of jobs of fewer than 8 GPUs: powers of two, single GPUs most
common. An assumption of this loader (see the module docstring): it only chooses among the
splits that the per-minute GPU and job counts allow."""
LARGE_SIZES: dict[int, float] = {
    1: 0.5,
    2: 0.2,
    4: 0.12,
    8: 0.06,
    16: 0.02,
    3: 0.01,
    5: 0.01,
    6: 0.01,
    7: 0.01,
    **{k: 0.05 / 7 for k in range(9, 16)},
}
"""Prior over the sizes of jobs of at least 8 GPUs, in 8-GPU pods (1 = one node, 8 = 64 GPUs):
powers of two first. An assumption, like :data:`SMALL_SIZES`."""


class VcSeries:
    """One VC's per-minute columns (times in seconds from 2020-05-01 00:00)."""

    def __init__(self, name: str, times: FloatArray, columns: dict[str, IntArray]) -> None:
        self.name = name
        self.times = times
        self.columns = columns


def vc_files(folder: Path, clusters: Sequence[str] | None = None) -> list[Path]:
    """The per-minute files, sorted by VC name; only those of ``clusters`` when given (a name
    without a file is an error that lists the VCs there are)."""
    files = sorted(p for p in folder.glob("vc*.csv.gz"))
    if not files:
        require(folder / "vc*.csv.gz", SECTION)
    if clusters is None:
        return files
    by_name = {p.name.removesuffix(".csv.gz"): p for p in files}
    unknown = [c for c in clusters if c not in by_name]
    if unknown:
        raise ValueError(
            f"clusters: no per-minute file for {', '.join(unknown)} in {folder}; "
            f"VCs: {', '.join(by_name)}"
        )
    if not clusters:
        raise ValueError(f"clusters: give at least one VC ({', '.join(by_name)})")
    if len(set(clusters)) < len(clusters):
        raise ValueError(f"clusters: a VC named twice in {', '.join(clusters)}")
    return [by_name[c] for c in sorted(clusters)]


def read_vc(path: Path) -> VcSeries:
    """Read one ``vc*.csv.gz`` (numpy, 60 ms for a month): kept, read-only, for the process
    by path, size and modification time (a load reads all 16 VCs, 1 s, and runs of several
    windows, policies or sweeps in one process load the trace again each time). A file that
    cannot be looked at is read as before, to say why."""
    try:
        where, stat = path.resolve(), path.stat()
    except OSError:
        return _read_vc(path)
    return _read_vc_kept(path, where, (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=16)
def _read_vc_kept(path: Path, where: Path, version: tuple[int, int, int, int]) -> VcSeries:
    """:func:`_read_vc` of ``path`` (its messages name it as given), kept per file and
    version (``where`` it resolves to: one month's VCs); its arrays read-only."""
    series = _read_vc(path)
    for values in (series.times, *series.columns.values()):
        values.flags.writeable = False
    return series


def _read_vc(path: Path) -> VcSeries:
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


def _capped(prior: dict[int, float], largest: int) -> dict[int, float]:
    """The prior without sizes above ``largest`` (a VC's quota: larger jobs could never run)."""
    kept = {k: w for k, w in prior.items() if k <= largest}
    return kept or {1: 1.0}


def _class_series(
    cols: dict[str, IntArray], run: IntArray, pend: IntArray, kind: str, demand: str
) -> dict[str, IntArray]:
    """Running and pending GPUs and jobs of one size class of a VC, per minute.

    Jobs of >= 8 GPUs hold ``min(*_gpu_num_noless_8, *_gpu_num)`` rounded down to whole 8-GPU
    nodes; the rest of ``*_gpu_num`` are the small jobs' GPUs, so the two classes add up to the
    VC's running and pending GPUs exactly. ``excess`` marks minutes where the >= 8 column
    exceeded the total.
    """
    big_run = np.minimum(cols["running_gpu_num_noless_8"], run) // LARGE * LARGE
    if demand == "running+pending":
        big_pend = np.minimum(cols["pending_gpu_num_noless_8"], pend) // LARGE * LARGE
        pend_jobs = {
            "large": cols["pending_job_num_noless_8"],
            "small": cols["pending_job_num_less_8"],
        }
    else:
        big_pend = np.zeros_like(pend)
        pend_jobs = {"large": np.zeros_like(pend), "small": np.zeros_like(pend)}
    excess = (cols["running_gpu_num_noless_8"] > run).astype(np.int64)
    if kind == "large":
        return {
            "running": big_run,
            "pending": big_pend,
            "running_jobs": cols["running_job_num_noless_8"],
            "pending_jobs": pend_jobs["large"],
            "excess": excess,
        }
    return {
        "running": run - big_run,
        "pending": pend - big_pend,
        "running_jobs": cols["running_job_num_less_8"],
        "pending_jobs": pend_jobs["small"],
        "excess": excess,
    }


def _job(
    name: str,
    team: str,
    size: tuple[int, int],
    submit: float,
    duration: float,
    labels: dict[str, str],
) -> Workload:
    """A job of ``count`` pods of ``unit`` GPUs each (``size = (count, unit)``): a single pod
    below 8 GPUs, a gang of 8-GPU pods (one per node) at and above."""
    count, unit = size
    pods, per_pod = (1, count) if unit == 1 else (count, unit)
    return Workload(
        name=name,
        team=team,
        podsets=(PodSet("main", pods, {GPU: per_pod * MILLI}),),
        submit_time=float(submit),
        duration=float(duration),
        labels=labels,
    )


def load(
    *,
    start_day: float = 0,
    days: float | None = None,
    demand: str = "running+pending",
    gpus_per_node: int = 8,
    resolution_minutes: int = 1,
    end_order: EndOrder = "lifo",
    seed: int = 0,
    starvation_guard_seconds: float | None = None,
    clusters: list[str] | None = None,
    data_dir: str | Path | None = None,
) -> Trace:
    """Load Helios Earth (see the module docstring for every rule); ``clusters`` keeps those
    VCs only (a sub-cluster of their quotas)."""
    if demand not in ("running+pending", "running"):
        raise ValueError(f"demand must be 'running+pending' or 'running', got {demand!r}")
    if gpus_per_node < LARGE:
        raise ValueError(
            f"gpus_per_node must be at least {LARGE} (8-GPU jobs), got {gpus_per_node}"
        )
    folder = data_root(data_dir) / FOLDER
    quota_path = require(folder / QUOTA_FILE, SECTION)
    files = vc_files(folder, clusters)
    series = [read_vc(p) for p in files]
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
    counts = {
        "large": 0,
        "small": 0,
        "censored": 0,
        "never_started": 0,
        "one_minute": 0,
        "withdrawn": 0,
    }
    sizes: dict[int, int] = {}
    work = {"ran": 0.0, "pending": 0.0, "error": 0.0, "withdrawn": 0.0, "requested": 0.0}
    split_excess = 0
    for s in series:
        cols = s.columns
        run = cols["running_gpu_num"]
        pend = cols["pending_gpu_num"] if demand == "running+pending" else np.zeros_like(run)
        d = run + pend
        t, dw = _in_window(s.times, d, lo, hi)
        curves[s.name] = DemandCurve(
            t, dw.astype(np.float64), "GPUs", span, f"{s.name}: GPUs demanded ({demand})"
        )
        if grid is None or cluster is None:
            grid, cluster = t, dw.astype(np.float64)
        elif t.shape == grid.shape and np.array_equal(t, grid):
            cluster = cluster + dw
        else:
            cluster = cluster + curves[s.name].at(grid)
        quota_units = max(1, quotas[s.name] // LARGE)
        for kind, prior, unit in (
            ("small", _capped(SMALL_SIZES, quotas[s.name]), 1),
            ("large", _capped(LARGE_SIZES, quota_units), LARGE),
        ):
            series_w = {
                name: _in_window(s.times, values, lo, hi)[1]
                for name, values in _class_series(cols, run, pend, kind, demand).items()
            }
            if kind == "large":
                split_excess += int(series_w["excess"].sum())
            tj, run_c = coarsen(t, series_w["running"] // unit, resolution_minutes)
            _, pend_c = coarsen(t, series_w["pending"] // unit, resolution_minutes)
            _, run_j = coarsen(t, series_w["running_jobs"], resolution_minutes)
            _, pend_j = coarsen(t, series_w["pending_jobs"], resolution_minutes)
            job_units = float(run_c.sum() + pend_c.sum())
            job_count = float(run_j.sum() + pend_j.sum())
            mean = job_units / job_count if job_count else None
            jobs, stats = queue_jobs(
                tj,
                run_c,
                pend_c,
                span,
                prior,
                running_jobs=run_j,
                pending_jobs=pend_j,
                mean_size=mean,
                end_order=end_order,
                seed=seed + unit,
            )
            work["ran"] += float((series_w["running"] * np.diff(np.append(t, span))).sum())
            work["pending"] += float((series_w["pending"] * np.diff(np.append(t, span))).sum())
            work["error"] += stats.running_error_unit_seconds * unit
            work["withdrawn"] += stats.withdrawn_unit_seconds * unit
            counts["withdrawn"] += stats.withdrawn
            for k, job in enumerate(jobs):
                gpus = job.size * unit
                labels = {TRACE_LABEL: "helios", SYNTHETIC_LABEL: "true"}
                if job.start is not None:
                    labels[EARTH_START_LABEL] = f"{job.start:g}"
                duration = job.run if job.start is not None else span - job.submit
                if job.stop >= span:
                    labels[CENSORED_LABEL] = "true"
                    counts["censored"] += 1
                if job.start is None:
                    counts["never_started"] += 1
                elif job.run <= MINUTE * resolution_minutes and job.stop < span:
                    counts["one_minute"] += 1
                sizes[gpus] = sizes.get(gpus, 0) + 1
                work["requested"] += gpus * duration
                workloads.append(
                    _job(
                        f"{s.name}-{gpus}g-{k:05d}",
                        s.name,
                        (job.size, unit),
                        job.submit,
                        duration,
                        labels,
                    )
                )
            counts[kind] += len(jobs)
    if grid is not None and cluster is not None:
        curves["cluster"] = DemandCurve(
            grid, cluster, "GPUs", span, f"all teams: GPUs demanded ({demand})"
        )
    workloads.sort(key=lambda w: (w.submit_time, w.name))

    policy = {
        "cluster": {"starvation_guard_seconds": starvation_guard_seconds},
        "teams": [gpu_team(vc, q) for vc, q in sorted(quotas.items())],
        "notes": [f"Helios Earth VC quotas ({QUOTA_FILE})"],
    }
    ending = "most recently started" if end_order == "lifo" else "randomly chosen (seeded)"
    hours = {k: v / 3600 for k, v in work.items()}
    mix = ", ".join(f"{g} GPUs {n}" for g, n in sorted(sizes.items()))
    assumptions += [
        (
            "Team demand = running_gpu_num + pending_gpu_num per minute; pending GPUs were "
            "waiting in Earth (VCs could not borrow), so a policy that lends and borrows can "
            "run them."
            if demand != "running"
            else "Team demand = running_gpu_num per minute; GPUs pending in Earth are left out "
            "(jobs are submitted when they started running)."
        ),
        "Jobs are synthetic, built per team and size class (< 8 GPUs; >= 8 GPUs) from the "
        "per-minute running and pending GPUs and job counts as a queue: a job waits while "
        "Earth's pending count holds it and runs while its running count does, so its "
        "duration is its run only and it is submitted when it started waiting. When pending "
        "falls, the oldest waiting jobs start; when running must fall, the "
        f"{ending} jobs end; a rise in running beyond the jobs that left the queue starts "
        "jobs that never waited. "
        + (
            "The jobs reproduce each team's per-minute running and pending GPUs up to size "
            f"mismatches ({hours['error']:,.0f} GPU-h of running GPUs off the data over the "
            "window)"
            if resolution_minutes == 1
            else f"The jobs follow each team's counts coarsened to {resolution_minutes}-minute "
            "steps, each the largest value in it (never below the data)"
        )
        + f". Work asked for: {hours['requested']:,.0f} GPU-h; Earth ran "
        f"{hours['ran']:,.0f} GPU-h and held {hours['pending']:,.0f} GPU-h pending"
        + (
            f" ({counts['never_started']} jobs still waiting at the end ask for the rest of "
            "the window)."
            if counts["never_started"]
            else "."
        )
        + (
            f" {counts['withdrawn']} waiting jobs left the queue without a start to explain it "
            f"(sizes that did not fit); they are dropped with the {hours['withdrawn']:,.0f} "
            "GPU-h they waited."
            if counts["withdrawn"]
            else ""
        ),
        "Job sizes: the new jobs of a minute are as many as the data's job counts say, split "
        "into the most probable sizes under a prior (below 8 GPUs: 1 GPU 55%, 2 and 4 GPUs "
        "20% each, 3/5/6/7 GPUs 1.25% each; from 8 GPUs, in whole 8-GPU nodes: 1 node 50%, 2 "
        "20%, 4 12%, 8 6%, 16 2%, other counts 10% together), capped at the team's quota. The "
        "prior is this loader's assumption (powers of two, single GPUs most common, as the "
        "Helios paper (SC'21) describes the job-size mix; its per-cluster figures were not "
        "available to us): it only chooses among the splits the per-minute counts allow. "
        f"A job of 8 GPUs or more is one gang of 8-GPU pods, one per node. Jobs by size: {mix}.",
        f"The >= 8-GPU columns exceed the team's demand in {split_excess} team-minutes (they "
        "are not capped at the VC size); the 8-GPU share is capped at the demand there.",
        f"Cluster: {n_nodes} nodes x {gpus_per_node} GPUs = {n_nodes * gpus_per_node} GPUs, "
        f"enough for the {total_quota} GPUs of quota; Earth's real node count and CPU/memory "
        "are not in the data, so nodes offer and jobs request GPUs only.",
        *(
            []
            if clusters is None
            else [
                f"Sub-cluster: only the VCs {', '.join(s.name for s in series)} "
                f"({total_quota} GPUs of quota, of {len(vc_files(folder))} VCs in the data); "
                "the other VCs' demand is left out, and these teams share only with each other."
            ]
        ),
        "Teams share by fleetshare's default (lend and borrow); Earth's VCs could not borrow "
        "(set sharing: DontLend to replay that).",
        (
            "No starvation guard (starvation_guard_seconds: null), as in Earth: with "
            "fleetshare's default guard (600 s) a long-waiting large job holds back its team's "
            "later small jobs, which Earth's scheduler evidently did not do (the month under "
            "static quotas would hold 2.4x Earth's pending GPU-hours; without it, 1.17x)."
            if starvation_guard_seconds is None
            else f"Starvation guard: {starvation_guard_seconds:g} s (Earth had none)."
        ),
        f"Window: day {start_day:g} to {hi / DAY:g} of May 2020; jobs running or waiting at "
        "the window start are submitted at 0 and jobs running past its end are cut there.",
    ]
    start_stamp = np.datetime64(MONTH_START, "s") + np.timedelta64(int(lo), "s")
    return Trace(
        name="helios",
        description=(
            f"Helios Earth, May 2020: {len(series)} teams' per-minute GPU demand as synthetic jobs"
            if clusters is None
            else f"Helios Earth, May 2020, the sub-cluster of {len(series)} of its "
            f"{len(vc_files(folder))} teams ({', '.join(s.name for s in series)}; "
            f"{total_quota} GPUs of quota): their per-minute GPU demand as synthetic jobs"
        ),
        nodes=gpu_nodes("earth", n_nodes, gpus_per_node),
        workloads=workloads,
        policy=policy,
        assumptions=assumptions,
        duration=span,
        demand=curves,
        start=str(start_stamp),
        sources=[*files, quota_path],
        facts={
            "teams": len(series),
            "minutes": round(span / MINUTE),
            "quota_gpus": total_quota,
            "jobs_from_8gpu": counts["large"],
            "jobs_below_8gpu": counts["small"],
            "jobs_by_gpus": dict(sorted(sizes.items())),
            "censored_jobs": counts["censored"],
            "jobs_never_started": counts["never_started"],
            "jobs_of_one_step": counts["one_minute"],
            "jobs_withdrawn": counts["withdrawn"],
            "withdrawn_wait_gpu_hours": round(hours["withdrawn"], 1),
            "requested_gpu_hours": round(hours["requested"], 1),
            "earth_running_gpu_hours": round(hours["ran"], 1),
            "earth_pending_gpu_hours": round(hours["pending"], 1),
            "earth_allocation": round(work["ran"] / (total_quota * span), 4)
            if total_quota
            else 0.0,
            "peak_demand_gpus": curves["cluster"].peak if "cluster" in curves else 0.0,
        },
    )
