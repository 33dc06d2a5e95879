"""What every trace loader shares: the :class:`Trace` type, data paths, quotas and job synthesis.

A trace is a cluster (``nodes``), the work submitted to it (``workloads``, each with
``submit_time`` and ``duration`` in seconds from the trace start), the teams and their quotas
(``policy``, a dict for :func:`fleetshare.policy.schema.load_policy`), demand curves where the
source has them, and ``assumptions``: plain statements of every choice a loader made that the
data did not dictate, to be shown on every report built from the trace.

Job synthesis (:func:`jobs_from_counts`): a curve of how many jobs of one size run at each
sample time becomes jobs that reproduce it exactly. When the count rises by ``k``, ``k`` jobs
start; when it falls by ``k``, ``k`` running jobs end -- the most recently started first
(``lifo``, the default) or ``k`` picked at random with the loader's seed (``random``). Between
samples the count is held (a step function), so the jobs' concurrent count equals the curve
at every sample time, and jobs still running at the end of the window end there.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from fleetshare.inputs import MAX_TOTAL_NODES, InputError
from fleetshare.model.node import Node
from fleetshare.model.quantity import MILLI, parse_quantity
from fleetshare.model.resources import GPU
from fleetshare.model.workload import PodSet, Workload
from fleetshare.policy.schema import Policy, load_policy

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
EndOrder = Literal["lifo", "random"]

DATA_ENV = "FLEETSHARE_DATA"
"""Environment variable naming a reference data folder to use instead of the bundled one."""

BUNDLED_DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
"""The trace files shipped inside the package (``fleetshare/data/traces``, with their README)."""

README = "fleetshare/data/traces/README.md"
MINUTE = 60.0
DAY = 86400.0
GIB = 2**30

CENSORED_LABEL = "fleetshare.io/censored"
"""Set to ``"true"`` on work whose real end lies beyond the loaded window (cut at its end)."""
SYNTHETIC_LABEL = "fleetshare.io/synthetic"
"""Set to ``"true"`` on jobs synthesized from a demand curve rather than read from the trace."""
TRACE_LABEL = "fleetshare.io/trace"


def timed_rows(
    source: str, lines: list[str], columns: list[int]
) -> tuple[npt.NDArray[np.datetime64], IntArray]:
    """The timestamps (first 19 characters of each line) and integer ``columns`` of a CSV
    time series' data lines, checked: at least one row, timestamps that parse and strictly
    increase, non-negative integers. Problems name the file and the row (1 = the header)."""
    if not lines:
        raise InputError(source, "has a header but no data rows")
    try:
        stamps = np.array([ln[:19] for ln in lines], dtype="datetime64[s]")
    except ValueError:
        for i, ln in enumerate(lines):
            try:
                np.datetime64(ln[:19], "s")
            except ValueError:
                raise InputError(source, f"row {i + 2}: not a timestamp: {ln[:19]!r}") from None
        raise
    try:
        data = np.loadtxt(lines, delimiter=",", usecols=columns, dtype=np.int64, ndmin=2)
    except ValueError:
        for i, line in enumerate(lines):
            cells = line.split(",")
            for column in columns:
                text = cells[column].strip() if column < len(cells) else ""
                if not text.lstrip("-").isdigit():
                    raise InputError(
                        source, f"row {i + 2}, column {column + 1}: {text!r} is not a whole number"
                    ) from None
        raise InputError(source, "not a table of whole numbers") from None
    late = np.flatnonzero(np.diff(stamps) <= np.timedelta64(0, "s"))
    if late.size:
        i = int(late[0]) + 1
        raise InputError(
            source, f"row {i + 2}: time {stamps[i]} is not after the row before ({stamps[i - 1]})"
        )
    negative = np.argwhere(data < 0)
    if negative.size:
        row = int(negative[0][0])
        raise InputError(source, f"row {row + 2}: negative count {int(data[row].min())}")
    return stamps, data


def csv_rows(source: str, text: str, required: Iterable[str]) -> list[tuple[int, dict[str, str]]]:
    """``(row number, row)`` of each data row of a CSV text (1 = the header), checked: the
    ``required`` columns are there and there is at least one data row. Cells a short row
    lacks read as empty. Problems raise InputError naming the file."""
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = list(reader.fieldnames or [])
        rows = [
            (i + 2, {k: v or "" for k, v in row.items() if isinstance(k, str)})
            for i, row in enumerate(reader)
        ]
    except csv.Error as exc:
        raise InputError(source, f"not a readable CSV file ({exc})") from None
    missing = [c for c in required if c not in header]
    if missing:
        shown = ", ".join(header[:12]) or "none"
        raise InputError(source, f"has no column {', '.join(missing)} (its columns: {shown})")
    if not rows:
        raise InputError(source, "has a header but no data rows")
    return rows


def cell(
    source: str,
    row: tuple[int, Mapping[str, str]],
    column: str,
    *,
    default: float | None = None,
    whole: bool = False,
) -> float:
    """A finite, non-negative number from one cell (``default`` when the cell is empty);
    InputError naming the file, row and column otherwise. ``whole``: a whole number."""
    number, values = row
    text = values.get(column, "").strip()
    if not text:
        if default is None:
            raise InputError(source, f"row {number}: {column} is empty")
        return default
    try:
        value = float(text)
    except ValueError:
        raise InputError(source, f"row {number}: {column} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or value > 1e15:
        raise InputError(
            source, f"row {number}: {column} {text!r} is not a finite number from 0 to 10^15"
        )
    if whole and not value.is_integer():
        raise InputError(source, f"row {number}: {column} {text!r} is not a whole number")
    return value


def optional_cell(source: str, row: tuple[int, Mapping[str, str]], column: str) -> float | None:
    """:func:`cell`, or None when the cell is empty."""
    return cell(source, row, column, default=-1.0) if row[1].get(column, "").strip() else None


def data_root(data_dir: str | Path | None = None) -> Path:
    """The trace data folder: ``data_dir``, else ``$FLEETSHARE_DATA``, else the bundled copy.

    The bundled copy (:data:`BUNDLED_DATA`) ships inside the package, so a clone or an
    installed wheel needs nothing beside it; the override takes a folder of the same layout
    (such as the reference data the files were copied from).
    """
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    return BUNDLED_DATA


def require(path: Path, section: str) -> Path:
    """``path`` if it is a file, else a FileNotFoundError naming it and the README row."""
    if not path.is_file():
        raise FileNotFoundError(
            f"trace file not found: {path}. It is described in the `{section}` row of {README} "
            f"(source and licence there); pass data_dir= or set {DATA_ENV} to the folder that "
            "holds it."
        )
    return path


@dataclass(frozen=True)
class DemandCurve:
    """A step function of time: ``values[i]`` holds from ``times[i]`` until ``times[i + 1]``.

    ``times`` are seconds from the trace start, increasing; the last value holds until ``end``.
    """

    times: FloatArray
    values: FloatArray
    unit: str
    end: float
    description: str = ""

    def __post_init__(self) -> None:
        if self.times.shape != self.values.shape or self.times.ndim != 1:
            raise ValueError("times and values must be 1-D arrays of the same length")

    def at(self, t: float | FloatArray) -> FloatArray:
        """The value in force at ``t`` (0 before the first sample)."""
        idx = np.searchsorted(self.times, np.asarray(t, dtype=np.float64), side="right") - 1
        vals = np.concatenate(([0.0], self.values))
        return np.asarray(vals[idx + 1], dtype=np.float64)

    @property
    def peak(self) -> float:
        """Largest value."""
        return float(self.values.max()) if self.values.size else 0.0

    def mean(self) -> float:
        """Time-weighted mean over ``[times[0], end)``."""
        if not self.values.size:
            return 0.0
        edges = np.append(self.times, self.end)
        widths = np.diff(edges)
        span = float(widths.sum())
        return float((self.values * widths).sum() / span) if span > 0 else float(self.values[0])

    def integral(self) -> float:
        """Area under the curve (value x seconds), e.g. GPU-seconds."""
        edges = np.append(self.times, self.end)
        return float((self.values * np.diff(edges)).sum())


@dataclass
class Trace:
    """A loaded trace: the cluster, the work, the teams and what the loader assumed."""

    name: str
    description: str
    nodes: list[Node]
    workloads: list[Workload]
    policy: dict[str, Any]
    assumptions: list[str]
    duration: float
    """Seconds covered: workloads are submitted in ``[0, duration)`` and end by ``duration``."""
    demand: dict[str, DemandCurve] = field(default_factory=dict)
    start: str | None = None
    """Wall-clock time of t = 0 (ISO 8601, the trace's own time zone) when the data has one."""
    sources: list[Path] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    """Numbers about the source data a report may print (rows read, rows skipped, ...)."""

    def load_policy(self) -> Policy:
        """The validated policy."""
        return load_policy(self.policy, f"trace {self.name} policy")

    @property
    def teams(self) -> list[str]:
        """Team names in policy order."""
        return [str(t["name"]) for t in self.policy.get("teams", [])]

    def capacity(self, resource: str = GPU) -> int:
        """Total allocatable of ``resource`` over all nodes (milli-units)."""
        return sum(n.allocatable.get(resource, 0) for n in self.nodes)

    def quota_total(self, resource: str = GPU) -> int:
        """Sum of the teams' explicit ``resources`` quotas of ``resource`` (milli-units)."""
        out = 0
        for team in self.policy.get("teams", []):
            for entry in team.get("quota", []):
                amount = entry.get("resources", {}).get(resource)
                if amount is not None:
                    out += parse_quantity(amount)
        return out

    def summary(self) -> dict[str, Any]:
        """Headline numbers for reports."""
        gpu_seconds = sum(
            w.total_requests().get(GPU, 0) / MILLI * (w.duration or 0.0) for w in self.workloads
        )
        return {
            "trace": self.name,
            "start": self.start,
            "duration_days": round(self.duration / DAY, 3),
            "nodes": len(self.nodes),
            "gpus": self.capacity(GPU) / MILLI,
            "cpus": self.capacity("cpu") / MILLI,
            "teams": len(self.teams),
            "workloads": len(self.workloads),
            "gpu_hours": round(gpu_seconds / 3600, 1),
            **self.facts,
        }

    def problems(self) -> list[str]:
        """What makes the trace unusable for simulation (empty when it is sound)."""
        out: list[str] = []
        try:
            policy = self.load_policy()
        except ValueError as exc:
            return [str(exc)]
        teams = set(self.teams)
        names: set[str] = set()
        for w in self.workloads:
            where = f"workload {w.name}"
            if w.name in names:
                out.append(f"{where}: duplicate name")
            names.add(w.name)
            if w.team not in teams:
                out.append(f"{where}: team {w.team!r} is not in the policy")
            if not 0 <= w.submit_time < self.duration:
                out.append(f"{where}: submit_time {w.submit_time} outside [0, {self.duration})")
            if w.duration is None or not w.duration > 0:
                out.append(f"{where}: duration {w.duration} is not positive")
            elif w.submit_time + w.duration > self.duration + 1e-6:
                out.append(f"{where}: ends after the trace ({w.submit_time} + {w.duration})")
            if not w.podsets or any(ps.count < 1 for ps in w.podsets):
                out.append(f"{where}: no pods")
            for ps in w.podsets:
                if not ps.requests or any(v <= 0 for v in ps.requests.values()):
                    out.append(f"{where}: requests must be positive, got {ps.requests}")
            try:
                if policy.priority_of(w.priority_class) != w.priority:
                    out.append(f"{where}: priority {w.priority} != its class's weight")
            except KeyError as exc:
                out.append(f"{where}: {exc.args[0]}")
        node_names = [n.name for n in self.nodes]
        if len(set(node_names)) != len(node_names):
            out.append("duplicate node names")
        return out


# -- helpers for the loaders ---------------------------------------------------------------------


def stable_hash(seed: int, text: str) -> int:
    """A 64-bit hash of ``text`` that is the same on every run and machine (unlike ``hash``)."""
    digest = hashlib.blake2b(f"{seed}:{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def proportional_quotas(demand: Mapping[str, float], total: int) -> dict[str, int]:
    """Split ``total`` (whole units) over teams in proportion to ``demand``.

    Each share is rounded to the nearest whole unit; what rounding leaves over (or takes too
    much) goes to the team with the largest demand, so the quotas sum to ``total`` exactly.
    Equal demand everywhere (including all zero) splits evenly.
    """
    if not demand:
        return {}
    weights = dict(demand)
    whole = sum(weights.values())
    if whole <= 0:
        weights = dict.fromkeys(weights, 1.0)
        whole = float(len(weights))
    quotas = {team: round(total * w / whole) for team, w in weights.items()}
    largest = max(weights, key=lambda t: (weights[t], t))
    quotas[largest] += total - sum(quotas.values())
    if quotas[largest] < 0:  # pragma: no cover - rounding moves at most len(teams)/2 units
        raise ValueError("cannot split quota")
    return quotas


def gpu_team(name: str, gpus: int, **extra: Any) -> dict[str, Any]:
    """A policy team dict with a guaranteed quota of ``gpus`` whole GPUs (default flavor)."""
    return {"name": name, "quota": [{"resources": {GPU: gpus}}], **extra}


def window(start_day: float, days: float | None, available: float) -> tuple[float, float]:
    """``(lo, hi)`` seconds of the requested window, clipped to the data; raises when empty."""
    if not math.isfinite(start_day) or start_day < 0:
        raise ValueError(f"start_day must be a finite number >= 0, got {start_day}")
    if days is not None and not (math.isfinite(days) and days > 0):
        raise ValueError(f"days must be a finite number > 0, got {days}")
    lo = start_day * DAY
    hi = available if days is None else min(available, lo + days * DAY)
    if lo >= available:
        raise ValueError(
            f"start_day {start_day} is past the end of the data ({available / DAY:.2f} days)"
        )
    return lo, hi


def clip(
    created: float, started: float, stopped: float, lo: float, hi: float
) -> tuple[float, float, bool] | None:
    """Place work present in the source from ``created`` (running ``started``-``stopped``) in
    the window ``[lo, hi)``: ``(submit, duration, censored)`` relative to ``lo``, or None.

    Work created before the window is submitted at its start with the rest of its run; work
    still running at ``hi`` is cut there (``censored``). Work with no run time inside the
    window is dropped.
    """
    if stopped <= lo or created >= hi:
        return None
    submit = max(created, lo)
    run_from = max(started, lo)
    run_to = min(stopped, hi)
    if run_to <= run_from:
        return None
    return submit - lo, run_to - run_from, stopped > hi


def single_pod(
    name: str,
    team: str,
    requests: dict[str, int],
    submit: float,
    duration: float,
    *,
    priority_class: str | None = None,
    priority: int = 0,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> Workload:
    """A one-pod workload; zero requests are dropped (as the scenario loader does)."""
    req = {r: v for r, v in requests.items() if v}
    return Workload(
        name=name,
        team=team,
        podsets=(PodSet("main", 1, req, dict(node_selector or {})),),
        submit_time=float(submit),
        priority=priority,
        priority_class=priority_class,
        duration=float(duration),
        labels=dict(labels or {}),
    )


def jobs_from_counts(
    times: Sequence[float] | FloatArray,
    counts: Sequence[int] | IntArray,
    end: float,
    end_order: EndOrder = "lifo",
    seed: int = 0,
) -> list[tuple[float, float]]:
    """Jobs whose concurrent count follows ``counts`` (held between ``times``): (start, stop).

    See the module docstring. Jobs are returned in start order; every stop is ``<= end``.
    """
    t = np.asarray(times, dtype=np.float64)
    c = np.asarray(counts, dtype=np.int64)
    if t.shape != c.shape:
        raise ValueError("times and counts must have the same length")
    if c.size == 0:
        return []
    if (c < 0).any():
        raise ValueError("counts must not be negative")
    if end_order not in ("lifo", "random"):
        raise ValueError(f"end_order must be 'lifo' or 'random', got {end_order!r}")
    rng = random.Random(seed)
    change = np.concatenate(([0], np.flatnonzero(np.diff(c)) + 1))
    starts: list[float] = []
    stops: list[float] = []
    running: list[int] = []  # indices into starts/stops
    prev = 0
    for i in change.tolist():
        now = float(t[i])
        delta = int(c[i]) - prev
        prev = int(c[i])
        if delta > 0:
            for _ in range(delta):
                running.append(len(starts))
                starts.append(now)
                stops.append(end)
        elif end_order == "lifo":
            for _ in range(-delta):
                stops[running.pop()] = now
        else:
            for _ in range(-delta):
                k = rng.randrange(len(running))
                running[k], running[-1] = running[-1], running[k]
                stops[running.pop()] = now
    return [(s, e) for s, e in zip(starts, stops, strict=True) if e > s]


def concurrent(
    intervals: Iterable[tuple[float, float]],
    at: FloatArray,
    weights: Iterable[float] | None = None,
) -> FloatArray:
    """How much of ``intervals`` (``start <= t < stop``, optionally weighted) is live at ``at``."""
    pairs = list(intervals)
    s = np.array([p[0] for p in pairs], dtype=np.float64)
    e = np.array([p[1] for p in pairs], dtype=np.float64)
    w = np.ones(len(pairs)) if weights is None else np.fromiter(weights, dtype=np.float64)
    return step_curve(s, e, w, float(at.max()) + 1 if at.size else 0.0, "").at(at)


def step_curve(
    starts: FloatArray,
    stops: FloatArray,
    weights: FloatArray,
    end: float,
    unit: str,
    description: str = "",
) -> DemandCurve:
    """The exact step function of weighted intervals ``[start, stop)`` (one step per event)."""
    times = np.concatenate((starts, stops))
    deltas = np.concatenate((weights, -weights))
    order = np.argsort(times, kind="stable")
    times, deltas = times[order], deltas[order]
    level = np.cumsum(deltas)
    if times.size == 0:
        return DemandCurve(np.zeros(1), np.zeros(1), unit, end, description)
    last = np.append(times[1:] != times[:-1], True)  # the level after all events at a time
    t, v = times[last], level[last]
    if t[0] > 0:
        t, v = np.concatenate(([0.0], t)), np.concatenate(([0.0], v))
    v = np.round(v, 9)  # cancel float noise so that an empty cluster reads exactly 0
    return DemandCurve(t, v, unit, end, description)


def coarsen(times: FloatArray, values: IntArray, minutes: int) -> tuple[FloatArray, IntArray]:
    """Resample a step curve to ``minutes``-minute steps, each the *largest* value within it.

    The coarse curve never falls below the fine one, so jobs synthesized from it cover all the
    demand (held a little longer) with far fewer starts and stops. ``minutes=1`` keeps the data.
    """
    if minutes < 1:
        raise ValueError(f"resolution must be at least 1 minute, got {minutes}")
    if minutes == 1 or times.size == 0:
        return times, values
    step = minutes * MINUTE
    bucket = np.floor(times / step).astype(np.int64)
    first = np.concatenate(([0], np.flatnonzero(np.diff(bucket)) + 1))
    coarse = np.maximum.reduceat(values, first)
    t = bucket[first].astype(np.float64) * step
    t[0] = times[0]
    return t, coarse


def node_names(prefix: str, count: int) -> list[str]:
    """``prefix-000``, ``prefix-001``, ... zero-padded to the width of ``count`` (at most
    :data:`~fleetshare.inputs.MAX_TOTAL_NODES`: options such as ``nodes=10**9`` would build a
    billion)."""
    if count > MAX_TOTAL_NODES:
        raise ValueError(f"{count:,} nodes; at most {MAX_TOTAL_NODES:,} are simulated")
    width = max(3, len(str(count - 1)))
    return [f"{prefix}-{i:0{width}d}" for i in range(count)]


def gpu_nodes(
    prefix: str,
    count: int,
    gpus: int,
    *,
    cpu_milli: int = 0,
    memory_bytes: int = 0,
    labels: dict[str, str] | None = None,
) -> list[Node]:
    """``count`` identical GPU nodes (resources left out when zero)."""
    alloc = {GPU: gpus * MILLI, "cpu": cpu_milli, "memory": memory_bytes * MILLI}
    alloc = {k: v for k, v in alloc.items() if v}
    return [
        Node(name=name, allocatable=dict(alloc), labels=dict(labels or {}))
        for name in node_names(prefix, count)
    ]


def nodes_for(total_gpus: int, gpus_per_node: int) -> int:
    """Whole nodes needed for ``total_gpus``."""
    return math.ceil(total_gpus / gpus_per_node) if total_gpus > 0 else 0


def modal(values: Iterable[int]) -> int:
    """The most common value (the largest on ties)."""
    counts: dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return max(counts, key=lambda v: (counts[v], v))
